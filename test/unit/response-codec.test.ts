// Stored responses and services: a body sealed before services existed (associated data
// [principal, scope, key], as the store wrote it until migration 0016) still opens for the demo
// service those rows were given, and for no other; every other service's body names its service
// in the associated data, so it opens only in its own service's row.
import { createCipheriv, randomBytes, randomUUID } from 'node:crypto';
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
