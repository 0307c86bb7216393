// The bridge from pages and route handlers to server/: the process-wide services.
import 'server-only';
import { services, type Services } from './services';

/** The booted services; normally booted by instrumentation.ts before the first request. */
export function runtime(): Promise<Services> {
  return services();
}

export { ownerPool } from './services';
