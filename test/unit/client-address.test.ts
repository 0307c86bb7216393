// TRUST_PROXY and the client address the HTTP front resolves (server/client-address.ts): no
// client-written header survives, X-Forwarded-For counts only through trusted hops, and the
// forwarded host and protocol only from a trusted peer.
import type { IncomingMessage } from 'node:http';
import { describe, expect, it } from 'vitest';
import { applyClientHeaders, CLIENT_ADDRESS_HEADER, trustFunction, trustProxySchema } from '../../server/client-address';
import { readEnvironment } from '../../server/config';

function request(peer: string, headers: Record<string, string>): IncomingMessage {
  return { socket: { remoteAddress: peer }, headers: { ...headers } } as unknown as IncomingMessage;
}

const trust = (value: string) => trustFunction(trustProxySchema.parse(value));

describe('TRUST_PROXY', () => {
  it('parses a hop count, a list of addresses and ranges, and nothing', () => {
    expect(trustProxySchema.parse('')).toEqual({ kind: 'none' });
    expect(trustProxySchema.parse('2')).toEqual({ kind: 'hops', hops: 2 });
    expect(trustProxySchema.parse('10.0.0.0/8, 192.0.2.7,loopback,2001:db8::/32')).toEqual({ kind: 'addresses', addresses: ['10.0.0.0/8', '192.0.2.7', 'loopback', '2001:db8::/32'] });
    for (const bad of ['yes', '10.0.0.0/33', '300.1.1.1', 'example.com', '99']) expect(trustProxySchema.safeParse(bad).success, bad).toBe(false);
    expect(readEnvironment({ NODE_ENV: 'test' }).TRUST_PROXY).toEqual({ kind: 'none' });
    expect(() => readEnvironment({ NODE_ENV: 'test', TRUST_PROXY: 'everyone' })).toThrow(/TRUST_PROXY/);
  });
});

describe('the client address', () => {
  const forged = { 'x-forwarded-for': '203.0.113.1', 'x-real-ip': '203.0.113.2', forwarded: 'for=203.0.113.3', [CLIENT_ADDRESS_HEADER]: '203.0.113.4', 'x-forwarded-host': 'evil.example', 'x-forwarded-proto': 'https' };

  it('is the socket peer when no proxy is trusted, whatever the client wrote', () => {
    const sent = request('::ffff:198.51.100.9', forged);
    expect(applyClientHeaders(sent, trust(''))).toEqual({ address: '198.51.100.9', viaTrustedProxy: false });
    expect(sent.headers).toEqual({ [CLIENT_ADDRESS_HEADER]: '198.51.100.9', 'x-forwarded-for': '198.51.100.9' });
  });

  it('is the nearest untrusted hop behind trusted proxies, and keeps their forwarded host', () => {
    const sent = request('10.0.0.5', { 'x-forwarded-for': '203.0.113.50, 192.0.2.60, 10.0.0.4', 'x-forwarded-host': 'dash.example', 'x-forwarded-proto': 'https' });
    expect(applyClientHeaders(sent, trust('10.0.0.0/8'))).toEqual({ address: '192.0.2.60', viaTrustedProxy: true });
    expect(sent.headers['x-forwarded-host']).toBe('dash.example');
    expect(sent.headers['x-forwarded-proto']).toBe('https');
    expect(applyClientHeaders(request('10.0.0.5', { 'x-forwarded-for': '203.0.113.50, 192.0.2.60' }), trust('1')).address).toBe('192.0.2.60');
    expect(applyClientHeaders(request('10.0.0.5', { 'x-forwarded-for': '203.0.113.50, 192.0.2.60' }), trust('2')).address).toBe('203.0.113.50');
  });

  it('drops the forwarded host and protocol from a peer that is not a trusted proxy', () => {
    const sent = request('192.0.2.1', { 'x-forwarded-host': 'evil.example', 'x-forwarded-proto': 'https', 'x-forwarded-port': '443' });
    applyClientHeaders(sent, trust('10.0.0.0/8'));
    expect(sent.headers['x-forwarded-host']).toBeUndefined();
    expect(sent.headers['x-forwarded-proto']).toBeUndefined();
    expect(sent.headers['x-forwarded-port']).toBeUndefined();
  });

  it('is unknown when every hop is a trusted proxy (it recorded no client)', () => {
    const sent = request('127.0.0.1', { [CLIENT_ADDRESS_HEADER]: '203.0.113.4' });
    expect(applyClientHeaders(sent, trust('loopback'))).toEqual({ address: null, viaTrustedProxy: true });
    expect(sent.headers[CLIENT_ADDRESS_HEADER]).toBeUndefined();
  });
});
