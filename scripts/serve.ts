// The HTTP front `npm start` runs instead of `next start`: Next's own request handler behind a
// plain Node server that first settles who the client is (server/client-address.ts). Inside
// Next a client-written X-Forwarded-For cannot be told from one Next added itself, so the
// address is resolved here, from the socket and TRUST_PROXY, before Next sees the request.
// Server action and RSC requests are screened here too (scripts/action-front.ts): a refused one
// is a 4xx and one JSON log line, before Next, which would answer 500 and print a raw error; and
// Next's console output goes through the JSON logger.
// SIGTERM or SIGINT closes the listener, lets the requests in flight finish, stops the
// runtime (server/runtime.ts, the composition root: the duties, a last metrics and quota flush,
// every pool, in order), closes Next and exits. The runtime itself is made inside Next's bundle
// (app/_lib/runtime.ts) and reached here through its one global (stopSharedRuntime).
import { createServer } from 'node:http';
import next from 'next';
import { applyClientHeaders, trustFunction } from '../server/client-address';
import { readEnvironment } from '../server/config';
import { allowedHosts, selfOrigin } from '../server/http-host';
import { stopSharedRuntime } from '../server/runtime-bridge';
import { describeError, logger } from '../server/logging';
import { knownActionIds, routeConsoleToLogger, screenAction } from './action-front';

async function main(): Promise<void> {
  const environment = readEnvironment();
  const trust = trustFunction(environment.TRUST_PROXY);
  // The origin Next fetches itself at (a redirecting server action's target), as `next start` sets it.
  process.env.__NEXT_PRIVATE_ORIGIN = selfOrigin(environment);
  const app = next({ dev: false, dir: process.cwd(), hostname: environment.HOST, port: environment.PORT });
  const handle = app.getRequestHandler();
  routeConsoleToLogger();
  await app.prepare();
  const knownActions = await knownActionIds(process.cwd());
  const ownHosts = allowedHosts(environment);
  const server = createServer((request, response) => {
    applyClientHeaders(request, trust);
    screenAction(request, response, knownActions, ownHosts)
      .then((screened) => (screened ? handle(screened, response) : undefined))
      .catch((error: unknown) => {
        logger.error({ error: describeError(error) }, 'request failed');
        if (!response.headersSent) response.writeHead(500, { 'content-type': 'application/problem+json' });
        response.end(JSON.stringify({ type: 'urn:retrysafe:problem:internal', title: 'Internal error', status: 500 }));
      });
  });
  server.listen(environment.PORT, environment.HOST, () => {
    process.stdout.write(`[retrysafe] Listening on ${environment.HOST}:${environment.PORT} (trusted proxies: ${describe(environment.TRUST_PROXY)})\n`);
  });
  let stopping = false;
  const stop = (code: number) => {
    if (stopping) return;
    stopping = true;
    setTimeout(() => process.exit(code), 10_000).unref();
    const closed = new Promise<void>((done) => server.close(() => done()));
    server.closeIdleConnections();
    // Requests in flight get a few seconds to finish before their connections are cut.
    const cut = setTimeout(() => server.closeAllConnections(), 3_000);
    void closed
      .then(() => clearTimeout(cut))
      .then(() => stopSharedRuntime())
      // What each pool held when it was closed: none is left open behind the exit.
      .then((stopped) => logger.info({ connectionsClosed: stopped?.connectionsClosed ?? {} }, 'runtime stopped'))
      .catch((error: unknown) => process.stderr.write(`[retrysafe] stopping the runtime failed: ${summary(error)}\n`))
      .then(() => app.close())
      .finally(() => process.exit(code));
  };
  // A requested stop is a normal exit (npm start's launcher reads any other code as a crash).
  process.once('SIGTERM', () => stop(0));
  process.once('SIGINT', () => stop(0));
}

function describe(trust: ReturnType<typeof readEnvironment>['TRUST_PROXY']): string {
  if (trust.kind === 'none') return 'none, the socket address is the client';
  return trust.kind === 'hops' ? `${trust.hops} hop(s)` : trust.addresses.join(', ');
}

/** An error as one line for the terminal, through describeError: a database error's message may quote input. */
function summary(error: unknown): string {
  const described = describeError(error);
  if (described.message !== undefined) return `${described.name}: ${described.message}`;
  return Object.entries(described).map(([field, value]) => `${field} ${value}`).join(', ');
}

main().catch((error: unknown) => {
  process.stderr.write(`[retrysafe] The server could not start: ${summary(error)}\n`);
  process.exit(1);
});
