// Which Host a browser-facing answer may carry: PUBLIC_URL's; the address the server reaches
// itself at (HOST:PORT, a wildcard bind's on loopback), where Next fetches a redirecting server
// action's target from itself; and the
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
 * Where the server reaches itself: the address it binds, a wildcard bind on loopback (as `next
 * start` does), IPv6 in brackets. `npm start`'s health check asks there, and Next fetches there a
 * redirecting server action's target (the sign-in redirects) to send its RSC payload in the
 * action's answer: scripts/serve.ts hands it to Next as its origin, which `next start` also sets.
 * Without it Next builds that origin from the request, with X-Forwarded-Proto's scheme, so behind
 * a proxy that ends TLS it fetched https:// from this plain-HTTP server, and failed.
 */
export function selfOrigin(environment: Pick<Environment, 'HOST' | 'PORT'>): string {
  const bound = environment.HOST === '0.0.0.0' ? '127.0.0.1' : environment.HOST === '::' ? '::1' : environment.HOST;
  return `http://${bound.includes(':') ? `[${bound}]` : bound}:${environment.PORT}`;
}

/** The Host of the server's requests to itself (Node's fetch sets it from selfOrigin). Refused, a script sign-in's answer came back empty and the browser asked again. */
export function selfFetchHost(environment: Pick<Environment, 'HOST' | 'PORT'>): string {
  return new URL(selfOrigin(environment)).host.toLowerCase();
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
  return { url: `${selfOrigin(environment)}/api/health`, host: publicUrl(environment).host };
}
