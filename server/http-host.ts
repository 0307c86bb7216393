// Which Host a browser-facing answer may carry: PUBLIC_URL's; the address the server was started
// on (HOST:PORT), where Next fetches a redirecting server action's target from itself; and the
// loopback names on the server's port in embedded mode (a local demo opened as localhost or
// 127.0.0.1). Anything else is answered 421, so a page on another name that a DNS-rebinding
// attacker pointed at this server cannot read the dashboard or its health (a rebinding page's
// requests carry the attacker's name, never the address HOST names). The bearer-key API answers
// any Host: a rebinding page holds no API key, and cookies never authenticate it.
import type { Environment } from './config';

type HostSettings = Pick<Environment, 'PUBLIC_URL' | 'PORT' | 'HOST' | 'RETRYSAFE_EMBEDDED'>;

/** Where operators reach the dashboard: PUBLIC_URL, else http://localhost:PORT. */
export function publicUrl(environment: Pick<Environment, 'PUBLIC_URL' | 'PORT'>): URL {
  return new URL(environment.PUBLIC_URL ?? `http://localhost:${environment.PORT}`);
}

export function allowedHosts(environment: HostSettings): Set<string> {
  const hosts = new Set([publicUrl(environment).host.toLowerCase(), selfFetchHost(environment)]);
  if (environment.RETRYSAFE_EMBEDDED === true) {
    for (const name of ['localhost', '127.0.0.1', '[::1]']) hosts.add(`${name}:${environment.PORT}`);
  }
  return hosts;
}

/**
 * The Host of Next's requests to itself: after a server action redirects (the sign-in does), Next
 * fetches the target's RSC payload from the address it was started with (`next({ hostname: HOST,
 * port: PORT })`, IPv6 in brackets) and sends it in the action's answer; Node's fetch sets Host
 * from that address. Refused, the answer came back empty and the browser asked again.
 */
export function selfFetchHost(environment: Pick<Environment, 'HOST' | 'PORT'>): string {
  const host = environment.HOST.includes(':') ? `[${environment.HOST}]` : environment.HOST;
  return `${host}:${environment.PORT}`.toLowerCase();
}

export function isAllowedHost(host: string | null, allowed: Set<string>): boolean {
  return host !== null && allowed.has(host.toLowerCase());
}

/**
 * How `npm start` checks the server it started: over the address it binds (a wildcard bind is
 * reached on loopback), sent with PUBLIC_URL's host, the one Host every mode answers for. (Sent
 * as `127.0.0.1:PORT`, the check was answered 421 outside embedded mode.)
 */
export function selfCheckTarget(environment: Pick<Environment, 'PUBLIC_URL' | 'PORT' | 'HOST'>): { url: string; host: string } {
  const bound = environment.HOST === '0.0.0.0' ? '127.0.0.1' : environment.HOST === '::' ? '::1' : environment.HOST;
  const address = bound.includes(':') ? `[${bound}]` : bound;
  return { url: `http://${address}:${environment.PORT}/api/health`, host: publicUrl(environment).host };
}
