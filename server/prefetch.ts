// A dashboard page's server-side prefetch that failed: the page still renders (its client
// fetches and shows the error state), and the failure is one JSON line in the log, not dropped.
import type { Logger } from 'pino';
import { describeError, logger as defaultLogger } from './logging';

/** A `.catch` handler for a page's prefetch: logs the page and the error (describeError), and lets the render go on. */
export function reportPrefetchFailure(page: string, log: Pick<Logger, 'error'> = defaultLogger): (error: unknown) => void {
  return (error) => log.error({ page, error: describeError(error) }, 'server prefetch failed; the page fetches on the client');
}
