// A dashboard page's server-side prefetch that failed: the page still renders (its client
// fetches and shows the error state), and the failure is one JSON line in the log, not dropped.
import type { Logger } from 'pino';
import { logger as defaultLogger } from './logging';

/** A `.catch` handler for a page's prefetch: logs the page and the reason, and lets the render go on. */
export function reportPrefetchFailure(page: string, log: Pick<Logger, 'error'> = defaultLogger): (error: unknown) => void {
  return (error) => log.error({ page, reason: error instanceof Error ? `${error.name}: ${error.message}` : String(error) }, 'server prefetch failed; the page fetches on the client');
}
