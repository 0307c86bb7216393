// The settings of services whose key records the dashboard reads outside Postgres (see
// key-backends.ts): DASHBOARD_KEYS_REDIS and DASHBOARD_KEYS_MYSQL, each `service=URL` entries,
// comma-separated. Here apart from the backends so that reading the environment loads no driver.
import { z } from 'zod';
import { serviceNameSchema } from './service-name';

/**
 * `service=url` entries, comma-separated (a comma inside a URL is written %2C). Each service once;
 * the URL's protocol one of `protocols`.
 */
function serviceUrls(protocols: readonly string[]) {
  return z.string().transform((value, context) => {
    const map = new Map<string, string>();
    for (const entry of value.split(',').map((part) => part.trim()).filter((part) => part !== '')) {
      const equals = entry.indexOf('=');
      const service = entry.slice(0, Math.max(0, equals));
      const url = entry.slice(equals + 1);
      if (equals < 1 || !serviceNameSchema.safeParse(service).success) {
        context.addIssue({ code: 'custom', message: `each entry is service=URL with a service name of a-z, 0-9, '.', '_' or '-' (entry ${map.size + 1} is not)` });
        return z.NEVER;
      }
      if (!URL.canParse(url) || !protocols.includes(new URL(url).protocol)) {
        // Never the URL itself: it may hold a password.
        context.addIssue({ code: 'custom', message: `the URL of ${service} must be a ${protocols.map((p) => `${p}//`).join(' or ')} URL` });
        return z.NEVER;
      }
      if (map.has(service)) {
        context.addIssue({ code: 'custom', message: `${service} is named twice` });
        return z.NEVER;
      }
      map.set(service, url);
    }
    return map;
  });
}

/** The environment variables (server/config.ts spreads them into its schema). */
export const keyBackendVariables = {
  /** Services whose key records are in Redis: `orders=redis://host:6379,cart=rediss://host:6380`. */
  DASHBOARD_KEYS_REDIS: serviceUrls(['redis:', 'rediss:']).optional(),
  /** Services whose key records are in MySQL/MariaDB, each with a read-only user's URL: `shop=mysql://retrysafe_dashboard:pw@host:3306/shop`. */
  DASHBOARD_KEYS_MYSQL: serviceUrls(['mysql:']).optional(),
};

/** A service in both maps: said in one line naming the two settings. */
export function keyBackendOverlap(settings: { DASHBOARD_KEYS_REDIS?: Map<string, string> | undefined; DASHBOARD_KEYS_MYSQL?: Map<string, string> | undefined }): string | null {
  for (const service of settings.DASHBOARD_KEYS_MYSQL?.keys() ?? []) {
    if (settings.DASHBOARD_KEYS_REDIS?.has(service)) return `${service} is in both DASHBOARD_KEYS_REDIS and DASHBOARD_KEYS_MYSQL: a service's keys live in one place`;
  }
  return null;
}

