// Stored responses and services: a body sealed before services existed (associated data
// [principal, scope, key], as the store wrote it until migration 0016) still opens for the demo
// service those rows were given, and for no other; every other service's body names its service
// in the associated data, so it opens only in its own service's row.
import { createCipheriv, createDecipheriv, randomBytes, randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { LEGACY_SERVICE, ResponseKeyRing, StoredResponseUnreadableError, type RowIdentity } from '@retrysafe/store';

const key = { id: 'k1', key: randomBytes(32) };
const ring = new ResponseKeyRing([key]);
const plaintext = Buffer.from(JSON.stringify({ id: 'pay_1', amount: 1250 }));
const row = (service: string): RowIdentity => ({ principalId: '0b7d1c1e-8d36-4a52-9b53-2f1f7b0c6a11', service, scope: 'POST /api/v1/payments', key: 'order-17' });

/** AES-256-GCM as the store sealed before services: IV (12) | tag (16) | ciphertext, associated data [principal, scope, key]. */
function sealedBeforeServices(identity: RowIdentity): Buffer {
  const iv = randomBytes(12);
  const cipher = createCipheriv('aes-256-gcm', key.key, iv);
  cipher.setAAD(Buffer.from(JSON.stringify([identity.principalId, identity.scope, identity.key]), 'utf8'));
  const body = Buffer.concat([cipher.update(plaintext), cipher.final()]);
  return Buffer.concat([iv, cipher.getAuthTag(), body]);
}

describe('sealed responses and services', () => {
  it('opens a body sealed before services for the demo service, the one its rows were given', () => {
    expect(LEGACY_SERVICE).toBe('demo');
    const ciphertext = sealedBeforeServices(row('demo'));
    expect(ring.open({ keyId: 'k1', ciphertext }, row(LEGACY_SERVICE)).equals(plaintext)).toBe(true);
  });

  it('does not open a body sealed before services for any other service', () => {
    const ciphertext = sealedBeforeServices(row('demo'));
    expect(() => ring.open({ keyId: 'k1', ciphertext }, row('orders'))).toThrow(StoredResponseUnreadableError);
  });

  it('binds another service’s body to that service: it opens in its own row only', () => {
    const sealed = ring.seal(plaintext, row('orders'));
    expect(ring.open(sealed, row('orders')).equals(plaintext)).toBe(true);
    for (const other of ['billing', LEGACY_SERVICE]) expect(() => ring.open(sealed, row(other))).toThrow(StoredResponseUnreadableError);
    // And a demo body does not open as another service's.
    expect(() => ring.open(ring.seal(plaintext, row(LEGACY_SERVICE)), row('orders'))).toThrow(StoredResponseUnreadableError);
  });

  it('still binds every body to its principal, scope and key', () => {
    for (const service of [LEGACY_SERVICE, 'orders']) {
      const sealed = ring.seal(plaintext, row(service));
      for (const change of [{ principalId: randomUUID() }, { scope: 'POST /api/v1/refunds' }, { key: 'order-18' }]) {
        expect(() => ring.open(sealed, { ...row(service), ...change })).toThrow(StoredResponseUnreadableError);
      }
    }
  });
});

describe('sealed responses, known answers', () => {
  // Sealed by the release before the request path's CPU work (issue #12), under a fixed key:
  // stored responses must keep opening, and a new seal must have the same layout.
  const fixed = new ResponseKeyRing([{ id: 'k1', key: Buffer.alloc(32, 0x2a) }]);
  const body = Buffer.from('{"id":"pay_0123456789abcdef","status":"succeeded"}');
  const stored = {
    demo: 'Hlyp2VNte9Hn4nh0OspmY/RlkJOaLklAqk10EQAcpuxqtsevWa465xbCAQJpIhpQOkY/UxeADWYhw54ghV8y6bVdrQB8XLgmq0eJ37u/',
    orders: 'SbruYgU3Tbr0JTdBVQMuv8DPgCs0mPBjl67xIencnJ6vKr9iOQbCbbuwFK6NQPiH9CWb2dai5DNef9Hu2x8lVi6OjxMW0V2BaMnXoBCn',
  };

  it.each(Object.entries(stored))('opens a %s body sealed by the earlier release', (service, ciphertext) => {
    expect(fixed.open({ keyId: 'k1', ciphertext: Buffer.from(ciphertext, 'base64') }, row(service)).equals(body)).toBe(true);
  });

  it.each(Object.keys(stored))('seals a %s body as IV (12) | tag (16) | AES-256-GCM ciphertext with the row as associated data', (service) => {
    const sealed = fixed.seal(body, row(service));
    expect(sealed.keyId).toBe('k1');
    expect(sealed.ciphertext).toHaveLength(12 + 16 + body.length);
    const identity = row(service);
    const fields = service === LEGACY_SERVICE ? [identity.principalId, identity.scope, identity.key] : [identity.principalId, identity.scope, identity.key, service];
    const decipher = createDecipheriv('aes-256-gcm', Buffer.alloc(32, 0x2a), sealed.ciphertext.subarray(0, 12));
    decipher.setAAD(Buffer.from(JSON.stringify(fields), 'utf8'));
    decipher.setAuthTag(sealed.ciphertext.subarray(12, 28));
    expect(Buffer.concat([decipher.update(sealed.ciphertext.subarray(28)), decipher.final()]).equals(body)).toBe(true);
  });

  it('draws a fresh IV for every seal', () => {
    const ivs = new Set(Array.from({ length: 1000 }, () => fixed.seal(body, row('orders')).ciphertext.subarray(0, 12).toString('hex')));
    expect(ivs.size).toBe(1000);
  });

  it('never changes a sealed body afterwards (the IVs come from a pool that is refilled)', () => {
    const first = fixed.seal(body, row('orders'));
    const copy = Buffer.from(first.ciphertext);
    for (let i = 0; i < 1000; i += 1) fixed.seal(body, row('orders'));
    expect(first.ciphertext.equals(copy)).toBe(true);
    expect(fixed.open(first, row('orders')).equals(body)).toBe(true);
  });
});
