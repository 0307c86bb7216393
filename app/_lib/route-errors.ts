// Every route handler's unexpected error: one JSON log line (route, method, correlation id,
// what failed) and a problem+json 500 with no-store, instead of Next's multi-line print of the
// raw error (a Postgres error echoes the input it refused). Next's own control flow (redirect,
// notFound, forbidden) passes through.
import 'server-only';
import { randomUUID } from 'node:crypto';
import { unstable_rethrow } from 'next/navigation';
import { isDatabaseUnavailable, problemFor, problemResponse } from '@retrysafe/store';
import { describeError, logger } from '@/server/logging';

export function handled<C>(route: string, handler: (request: Request, context: C) => Promise<Response>): (request: Request, context: C) => Promise<Response> {
  return async (request, context) => {
    try {
      return await handler(request, context);
    } catch (error) {
      unstable_rethrow(error);
      const correlationId = randomUUID();
      // A database that cannot be reached (e.g. while the services boot) is a 503 with Retry-After, not a 500.
      const unavailable = isDatabaseUnavailable(error) ? problemFor(error) : null;
      if (unavailable) {
        logger.warn({ route, method: request.method, correlationId, error: describeError(error) }, 'database unavailable');
        return problemResponse(unavailable, correlationId);
      }
      logger.error({ route, method: request.method, correlationId, error: describeError(error) }, 'route failed');
      return problemResponse({ status: 500, slug: 'internal', title: 'Internal error', detail: 'The failure is logged under this correlation id' }, correlationId);
    }
  };
}
