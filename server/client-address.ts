// Who the client is, as far as this server can know: the socket's peer, or, when that peer is
// a proxy the operator said to trust (TRUST_PROXY), the address that proxy recorded in
// X-Forwarded-For. Every other forwarding header is the client's own writing, so the HTTP
// front (scripts/serve.ts) strips them and passes the one address on in an internal header.
import type { IncomingMessage } from 'node:http';
import { isIP } from 'node:net';
import proxyAddr from 'proxy-addr';
import { z } from 'zod';

/** Set by the HTTP front on every request; any value a client sent is replaced first. */
export const CLIENT_ADDRESS_HEADER = 'x-retrysafe-client-address';

/** Client-written headers that name an address; none reaches the app as sent. */
const ADDRESS_HEADERS = ['x-forwarded-for', 'x-real-ip', 'forwarded', 'true-client-ip', 'cf-connecting-ip', CLIENT_ADDRESS_HEADER];
/** Headers that say how the client reached the proxy; kept only when a trusted proxy sent them. */
const FORWARDED_ORIGIN_HEADERS = ['x-forwarded-host', 'x-forwarded-proto', 'x-forwarded-port'];

export type TrustProxy = { kind: 'none' } | { kind: 'hops'; hops: number } | { kind: 'addresses'; addresses: string[] };

const namedRanges = new Set(['loopback', 'linklocal', 'uniquelocal']);

/** An address, a CIDR range, or one of proxy-addr's named ranges. */
const proxyAddress = z.string().refine((entry) => {
  if (namedRanges.has(entry)) return true;
  const [address = '', bits, ...rest] = entry.split('/');
  const family = isIP(address);
  if (family === 0 || rest.length > 0) return false;
  if (bits === undefined) return true;
  if (!/^\d{1,3}$/.test(bits)) return false;
  return Number(bits) <= (family === 4 ? 32 : 128);
}, 'each entry must be an IP address, a CIDR range, or loopback, linklocal or uniquelocal');

/**
 * TRUST_PROXY: unset (trust no proxy: the socket's peer is the client), a number of proxy hops
 * in front of this server, or a comma-separated list of proxy addresses and ranges.
 */
export const trustProxySchema = z
  .string()
  .trim()
  .transform((value, context): TrustProxy => {
    if (value === '' || value === '0' || value === 'false') return { kind: 'none' };
    if (/^\d+$/.test(value)) {
      const hops = Number(value);
      if (hops > 32) {
        context.addIssue({ code: 'custom', message: 'a hop count must be at most 32' });
        return z.NEVER;
      }
      return { kind: 'hops', hops };
    }
    const addresses = value.split(',').map((entry) => entry.trim()).filter(Boolean);
    for (const entry of addresses) {
      if (!proxyAddress.safeParse(entry).success) {
        context.addIssue({ code: 'custom', message: 'must be a number of hops or a comma-separated list of IP addresses, CIDR ranges, loopback, linklocal or uniquelocal' });
        return z.NEVER;
      }
    }
    return { kind: 'addresses', addresses };
  });

/** proxy-addr's trust function: is the hop at this position (0 = the socket's peer) a proxy we trust? */
export function trustFunction(trust: TrustProxy): (address: string, hop: number) => boolean {
  switch (trust.kind) {
    case 'none':
      return () => false;
    case 'hops':
      return (_address, hop) => hop < trust.hops;
    case 'addresses': {
      const compiled = proxyAddr.compile(trust.addresses);
      return (address, hop) => compiled(address, hop);
    }
  }
}

/** Drops IPv4-mapped IPv6 framing, so 127.0.0.1 reads the same whichever stack accepted it. */
function plain(address: string): string {
  return address.startsWith('::ffff:') && isIP(address.slice(7)) === 4 ? address.slice(7) : address;
}

export interface ResolvedClient {
  /** The client's address, or null when it cannot be known (the nearest untrusted hop is itself a trusted proxy: it forwarded no address). */
  address: string | null;
  /** The socket's peer is a trusted proxy, so its X-Forwarded-Host and -Proto hold. */
  viaTrustedProxy: boolean;
}

export function resolveClient(request: IncomingMessage, trust: (address: string, hop: number) => boolean): ResolvedClient {
  const peer = request.socket.remoteAddress;
  if (!peer) return { address: null, viaTrustedProxy: false };
  const viaTrustedProxy = trust(plain(peer), 0);
  const chain = proxyAddr.all(request, (address, hop) => trust(plain(address), hop));
  const resolved = plain(proxyAddr(request, (address, hop) => trust(plain(address), hop)));
  // Every hop was trusted (a proxy that recorded no client): the address is a proxy's, not a client's.
  const everyHopTrusted = chain.every((address, hop) => trust(plain(address), hop));
  return { address: everyHopTrusted ? null : resolved, viaTrustedProxy };
}

/**
 * Rewrites a request's headers before the app sees them: no client-written address header
 * survives, the resolved address is set in CLIENT_ADDRESS_HEADER (absent when unknown), and
 * X-Forwarded-Host/-Proto/-Port are kept only from a trusted proxy.
 */
export function applyClientHeaders(request: IncomingMessage, trust: (address: string, hop: number) => boolean): ResolvedClient {
  const client = resolveClient(request, trust);
  for (const name of ADDRESS_HEADERS) Reflect.deleteProperty(request.headers, name);
  if (!client.viaTrustedProxy) for (const name of FORWARDED_ORIGIN_HEADERS) Reflect.deleteProperty(request.headers, name);
  if (client.address) request.headers[CLIENT_ADDRESS_HEADER] = client.address;
  // Next fills X-Forwarded-For from the socket when it is absent; give it the resolved address instead.
  if (client.address) request.headers['x-forwarded-for'] = client.address;
  return client;
}

/** The address the HTTP front resolved, read back from a request's headers; null when unknown or absent. */
export function clientAddressOf(headers: Headers): string | null {
  const value = headers.get(CLIENT_ADDRESS_HEADER);
  return value !== null && isIP(value) !== 0 ? value : null;
}
