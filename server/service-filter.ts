// A dashboard page's `?service=` filter, checked against the services that have policies. A
// service no policy names is said so (the page corrects its URL). When the list cannot be read,
// the failure is logged (describeError) and the asked service is kept: the page's own read
// checks it again and shows its error state, rather than silently showing every service.
import type { Logger } from 'pino';
import type { Queryable } from '@retrysafe/store/postgres';
import { logger as defaultLogger } from './logging';
import { reportPrefetchFailure } from './prefetch';
import { policyServices } from './retention/review';

export interface ServiceFilter {
  service: string | undefined;
  /** What the page says it corrected in the address. */
  notices: string[];
}

export async function checkServiceFilter(db: Queryable, asked: string | undefined, page: string, log: Pick<Logger, 'error'> = defaultLogger): Promise<ServiceFilter> {
  if (!asked) return { service: undefined, notices: [] };
  let services: string[];
  try {
    services = await policyServices(db);
  } catch (error) {
    reportPrefetchFailure(page, log)(error);
    return { service: asked, notices: [] };
  }
  return services.includes(asked) ? { service: asked, notices: [] } : { service: undefined, notices: [`There is no service "${asked.slice(0, 80)}": showing all services.`] };
}
