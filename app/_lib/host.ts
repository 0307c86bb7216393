// The Host check of server/http-host for route handlers and the proxy: the allowed hosts
// computed once from the environment, and the 421 to answer to any other.
import { randomUUID } from 'node:crypto';
import { readEnvironment } from '@/server/config';
import { allowedHosts, isAllowedHost } from '@/server/http-host';
import { problemResponse } from '@retrysafe/store';

let allowed: Set<string> | undefined;

/** null when the request's Host is one this server answers as, else the 421 to return. */
export function misdirected(headers: Headers): Response | null {
  allowed ??= allowedHosts(readEnvironment());
  if (isAllowedHost(headers.get('host'), allowed)) return null;
  return problemResponse({ status: 421, slug: 'misdirected-request', title: 'This server does not answer for that host name' }, randomUUID());
}
