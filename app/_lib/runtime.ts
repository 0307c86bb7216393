// The bridge from pages, route handlers and server actions to the server's composition root
// (server/runtime.ts): this process's one runtime, made on first use with what only Next's
// side can give it (better-auth's cookie plugin, which sets a sign-in's cookies through
// next/headers), and shared through the one global the separate bundles make unavoidable
// (sharedRuntime). Booted by instrumentation.ts when the server starts; stopped by the HTTP front.
import 'server-only';
import { nextCookies } from 'better-auth/next-js';
import type pg from 'pg';
import { createOperatorAuth } from '@/server/auth/operator-auth';
import { createServerRuntime, type ServerRuntime, type Services } from '@/server/runtime';
import { sharedRuntime } from '@/server/runtime-bridge';

/** This process's runtime (made, not booted, on first call). */
export function serverRuntime(): ServerRuntime {
  return sharedRuntime(() =>
    createServerRuntime({
      operatorAuth: (pool, settings) =>
        createOperatorAuth({
          pool,
          secret: settings.authSecret,
          baseURL: settings.publicUrl,
          absoluteSessionSeconds: settings.absoluteSessionSeconds,
          plugins: [nextCookies()],
        }),
    }),
  );
}

/** The booted services; normally booted by instrumentation.ts before the first request. */
export function runtime(): Promise<Services> {
  return serverRuntime().services();
}

/** The owner pool, available before (and without) a successful boot, e.g. for health checks. */
export function ownerPool(): pg.Pool {
  return serverRuntime().ownerPool;
}
