// The settings of services whose key records the dashboard reads outside Postgres (see
// key-backends.ts): DASHBOARD_KEYS_REDIS and DASHBOARD_KEYS_MYSQL, each `service=URL` entries,
// comma-separated; a Redis Cluster as `redis+cluster://[user:password@]host:port|host:port...`
// (its nodes split by `|`, never by the comma that splits entries). Here apart from the backends
// so that reading the environment loads no driver.
import { z } from 'zod';
import { serviceNameSchema } from './service-name';

/** Where the dashboard reads a Redis-kept service's keys: one server's URL, or a cluster's nodes (each a redis:// or rediss:// URL). */
export type RedisTarget = { kind: 'server'; url: string } | { kind: 'cluster'; nodes: string[] };

const CLUSTER_PROTOCOLS: Readonly<Record<string, string>> = { 'redis+cluster:': 'redis:', 'rediss+cluster:': 'rediss:' };

/**
 * A DASHBOARD_KEYS_REDIS value: a redis:// or rediss:// URL, or `redis+cluster://` (or
 * `rediss+cluster://`, TLS) with the user and password, if any, once before the nodes, then each
 * node's `host:port`, `|`-separated: `redis+cluster://user:pw@10.0.0.1:7000|10.0.0.2:7000`. The
 * password's own `|`, `@`, `,` or `/` written %7C, %40, %2C, %2F. Null for anything else; never
 * says why in terms of the value (it may hold a password).
 */
export function parseRedisTarget(value: string): RedisTarget | null {
  const scheme = /^([a-z+]+:)\/\//.exec(value)?.[1];
  if (scheme === 'redis:' || scheme === 'rediss:') return URL.canParse(value) ? { kind: 'server', url: value } : null;
  const protocol = scheme === undefined ? undefined : CLUSTER_PROTOCOLS[scheme];
  if (scheme === undefined || protocol === undefined) return null;
  const rest = value.slice(scheme.length + 2);
  const at = rest.lastIndexOf('@');
  const credentials = at < 0 ? '' : rest.slice(0, at + 1);
  const hosts = (at < 0 ? rest : rest.slice(at + 1)).split('|');
  const nodes: string[] = [];
  for (const host of hosts) {
    // host:port (or [v6]:port) only: a cluster has one database, so no path.
    if (!/^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]+):\d{1,5}$/.test(host)) return null;
    const url = `${protocol}//${credentials}${host}`;
    if (!URL.canParse(url)) return null;
    nodes.push(url);
  }
  return nodes.length > 0 ? { kind: 'cluster', nodes } : null;
}

/**
 * `service=url` entries, comma-separated (a comma inside a URL is written %2C). Each service once;
 * the URL's protocol one of `protocols` (`redis+cluster:` and `rediss+cluster:`: parseRedisTarget).
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
      if (protocols.some((protocol) => protocol in CLUSTER_PROTOCOLS) && /^[a-z]+\+cluster:/.test(url)) {
        if (!parseRedisTarget(url)) {
          // Never the value itself: it may hold a password.
          context.addIssue({ code: 'custom', message: `the cluster of ${service} must be redis+cluster://[user:password@]host:port|host:port... (or rediss+cluster://), each node host:port` });
          return z.NEVER;
        }
      } else if (!URL.canParse(url) || !protocols.includes(new URL(url).protocol)) {
        // Never the URL itself: it may hold a password.
        const plain = protocols.filter((p) => !(p in CLUSTER_PROTOCOLS));
        context.addIssue({ code: 'custom', message: `the URL of ${service} must be a ${plain.map((p) => `${p}//`).join(' or ')} URL` });
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
  /**
   * Services whose key records are in Redis: `orders=redis://host:6379,cart=rediss://host:6380`; in
   * a Redis Cluster: `orders=redis+cluster://h1:7000|h2:7000|h3:7000` (parseRedisTarget).
   */
  DASHBOARD_KEYS_REDIS: serviceUrls(['redis:', 'rediss:', 'redis+cluster:', 'rediss+cluster:']).optional(),
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

