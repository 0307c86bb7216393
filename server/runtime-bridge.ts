// The one global bridge to the server's runtime (server/runtime.ts), kept apart with no import
// but a type, so the HTTP front can stop the runtime without loading the server's modules.
import type { RuntimeStopped, ServerRuntime } from './runtime';

// Next compiles route handlers, server actions, pages and
// instrumentation.ts into separate bundles, each with its own copy of this module, and the HTTP
// front (scripts/serve.ts) is a third module graph in the same process: a module-level variable
// would be one runtime per copy. The instance lives on globalThis under this symbol instead,
// made by whichever Next bundle asks first (so the store's classes are Next's own copies, those
// its route handlers test errors against) and stopped by the front.
const RUNTIME = Symbol.for('retrysafe.runtime');
type Holder = typeof globalThis & { [RUNTIME]?: ServerRuntime };

/** This process's runtime, made by `create` on first call (a throw leaves none: the next call tries again). */
export function sharedRuntime(create: () => ServerRuntime): ServerRuntime {
  const holder = globalThis as Holder;
  holder[RUNTIME] ??= create();
  return holder[RUNTIME];
}

/** Stops this process's shared runtime if one was made (the HTTP front, on SIGTERM); undefined if none was. */
export function stopSharedRuntime(): Promise<RuntimeStopped | undefined> {
  return (globalThis as Holder)[RUNTIME]?.stop() ?? Promise.resolve(undefined);
}
