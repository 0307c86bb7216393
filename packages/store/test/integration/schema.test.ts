// The table refuses rows that break the store's invariants, whatever the application does.
import { randomBytes, randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { useTestDatabase } from '../helpers/database';

type Row = Record<string, unknown>;

describe('idempotency_keys constraints', () => {
  const db = useTestDatabase();

  const valid = (): Row => ({
    principal_id: randomUUID(),
    service: 'demo',
    scope: 'POST /api/v1/payments',
    key: 'k-1',
    state: 'in_progress',
    fingerprint: randomBytes(32),
    correlation_id: randomUUID(),
    lease_expires_at: new Date(Date.now() + 30_000),
    expires_at: new Date(Date.now() + 86_400_000),
  });

  const insert = (row: Row) => {
    const columns = Object.keys(row);
    return db.pool.query(
      `INSERT INTO idempotency_keys (${columns.join(', ')}) VALUES (${columns.map((_, i) => `$${i + 1}`).join(', ')})`,
      Object.values(row),
    );
  };

  it('accepts a well-formed in-progress claim', async () => {
    await expect(insert(valid())).resolves.toBeDefined();
  });

  it.each([
    ['an empty key', { key: '' }, 'idempotency_keys_key_length'],
    ['a 256-byte key', { key: 'k'.repeat(256) }, 'idempotency_keys_key_length'],
    ['an unknown state', { state: 'done' }, 'idempotency_keys_state'],
    ['a fingerprint that is not 32 bytes', { fingerprint: randomBytes(16) }, 'idempotency_keys_fingerprint_size'],
    ['an in-progress claim without a lease', { lease_expires_at: null }, 'idempotency_keys_in_progress_has_lease'],
    ['a completed row without a response', { state: 'completed' }, 'idempotency_keys_completed_has_response'],
    ['an expiry before creation', { expires_at: new Date(Date.now() - 1_000) }, 'idempotency_keys_expiry_after_creation'],
    ['a body without its key id', { response_body: randomBytes(40) }, 'idempotency_keys_body_has_key_id'],
    ['an impossible status code', { response_status: 42 }, 'idempotency_keys_response_status'],
    ['a service name with capitals and a space', { service: 'Orders Service' }, 'idempotency_keys_service_name'],
    ['an empty service name', { service: '' }, 'idempotency_keys_service_name'],
    ['a 64-character service name', { service: 's'.repeat(64) }, 'idempotency_keys_service_name'],
  ])('refuses %s', async (_name, change, constraint) => {
    await expect(insert({ ...valid(), ...change })).rejects.toMatchObject({ code: '23514', constraint });
  });

  it('refuses a second row for the same principal, service, scope and key', async () => {
    const row = valid();
    await insert(row);
    await expect(insert({ ...row, fingerprint: randomBytes(32) })).rejects.toMatchObject({
      code: '23505',
      constraint: 'idempotency_keys_pkey',
    });
  });

  it('accepts the same principal, scope and key in another service', async () => {
    const row = valid();
    await insert(row);
    await expect(insert({ ...row, service: 'orders', fingerprint: randomBytes(32) })).resolves.toBeDefined();
  });

  it('refuses a row without a service (no default: nothing is stored without naming its service)', async () => {
    const { service: _service, ...row } = valid();
    await expect(insert(row)).rejects.toMatchObject({ code: '23502', column: 'service' });
  });
});
