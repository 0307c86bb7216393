// Which Host a browser-facing answer may carry: PUBLIC_URL's, plus the loopback names on the
// server's port in embedded mode (a local demo opened as localhost or 127.0.0.1). Anything else
// is answered 421, so a page on another name that a DNS-rebinding attacker pointed at this
// server cannot read the dashboard or its health. The bearer-key API answers any Host: a
// rebinding page holds no API key, and cookies never authenticate it.
import type { Environment } from './config';

export function allowedHosts(environment: Pick<Environment, 'PUBLIC_URL' | 'PORT' | 'RETRYSAFE_EMBEDDED'>): Set<string> {
  const hosts = new Set([new URL(environment.PUBLIC_URL ?? `http://localhost:${environment.PORT}`).host.toLowerCase()]);
  if (environment.RETRYSAFE_EMBEDDED === true) {
    for (const name of ['localhost', '127.0.0.1', '[::1]']) hosts.add(`${name}:${environment.PORT}`);
  }
  return hosts;
}

export function isAllowedHost(host: string | null, allowed: Set<string>): boolean {
  return host !== null && allowed.has(host.toLowerCase());
}
