// The bridge from pages and route handlers to server/: the process-wide services.
import 'server-only';
import { services, startServices, type Services } from './services';

export function runtime(): Services {
  // Normally started by instrumentation.ts at boot; this covers a server started without it.
  void startServices();
  return services();
}
