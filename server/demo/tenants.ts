// Demo tenants: each is a principal with an API key. Only a SHA-256 of the key is kept
// (the key is 256 random bits, so a fast hash is enough); the key is shown once.
import { createHash, randomBytes } from 'node:crypto';
import type { Queryable } from '@retrysafe/store/postgres';
import type { Principal } from '@retrysafe/store';

const KEY_PREFIX = 'rsk_';

function hashApiKey(apiKey: string): Buffer {
  return createHash('sha256').update(apiKey, 'utf8').digest();
}

export interface CreatedTenant {
  principalId: string;
  apiKey: string;
}

export async function createTenant(db: Queryable, name: string): Promise<CreatedTenant> {
  const apiKey = `${KEY_PREFIX}${randomBytes(32).toString('base64url')}`;
  // The tenant is a principal: it gets its display name in the same statement.
  const result = await db.query<{ id: string }>(
    `WITH tenant AS (INSERT INTO tenants (name, api_key_hash) VALUES ($1, $2) RETURNING id, name),
          named AS (INSERT INTO principal_names (principal_id, name) SELECT id, name FROM tenant)
     SELECT id FROM tenant`,
    [name, hashApiKey(apiKey)],
  );
  const row = result.rows[0];
  if (!row) throw new Error('tenant insert returned no row');
  return { principalId: row.id, apiKey };
}

/**
 * A new API key for an existing tenant, replacing its old one (only its hash is kept): the traffic
 * generator issues itself one for a staged incident's tenant, whose first key was never kept.
 */
export async function issueApiKey(db: Queryable, principalId: string): Promise<string> {
  const apiKey = `${KEY_PREFIX}${randomBytes(32).toString('base64url')}`;
  const result = await db.query('UPDATE tenants SET api_key_hash = $2 WHERE id = $1 AND revoked_at IS NULL', [principalId, hashApiKey(apiKey)]);
  if (result.rowCount !== 1) throw new Error(`no tenant ${principalId} to issue an API key for`);
  return apiKey;
}

/** `Authorization: Bearer <apiKey>` -> the tenant, unless missing, unknown or revoked. Unique index on api_key_hash. */
/** A tenant of the demo API: the principal and what its API key may do. */
export interface TenantPrincipal extends Principal {
  permissions: readonly string[];
}

export async function authenticateApiKey(db: Queryable, authorization: string | null): Promise<TenantPrincipal | null> {
  const match = /^Bearer ([A-Za-z0-9_-]{1,200})$/.exec(authorization ?? '');
  const apiKey = match?.[1];
  if (!apiKey?.startsWith(KEY_PREFIX)) return null;
  const result = await db.query<{ id: string; permissions: string[] }>({
    name: 'demo_authenticate',
    text: 'SELECT id, permissions FROM tenants WHERE api_key_hash = $1 AND revoked_at IS NULL',
    values: [hashApiKey(apiKey)],
  });
  const row = result.rows[0];
  return row ? { principalId: row.id, permissions: row.permissions } : null;
}
