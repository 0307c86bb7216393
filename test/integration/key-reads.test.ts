// The dashboard's seam to the key records (KeyRecordReads, @retrysafe/store): one contract,
// passed by PostgresKeyReads on the dashboard's restricted role and by a second backend kept in
// memory (written here, used only here: not a stand-in for Postgres but another store). The
// second backend drives the same server/ functions the dashboard's routes call (lookups, the
// key list, the correlation lookup, the release, each audited in the dashboard's database),
// and server/ reads no key row of its own outside Postgres monitoring and maintenance.
import { randomUUID } from 'node:crypto';
import { readdir, readFile } from 'node:fs/promises';
import { join, relative, resolve } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  namePrincipal,
  type CorrelationRecord,
  type KeyCursor,
  type KeyIdentity,
  type KeyListQuery,
  type KeyLookupQuery,
  type KeyPage,
  type KeyRecord,
  type KeyRecordReads,
  type KeyState,
  type StaleClaim,
  type StaleClaimRelease,
  type StaleClaimReleaser,
} from '@retrysafe/store';
import { keyReadStatementTexts, PostgresKeyReads, principalKeysStatement } from '@retrysafe/store/postgres';
import { CORRELATION_INDEX_PREDICATE, PRINCIPAL_CREATED_INDEX_PREDICATE } from '@retrysafe/store/index-predicates';
import { keyListSchema, listPrincipalKeys, listStaleClaims, lookUpKey, type KeyAccess } from '../../server/idempotency/key-metadata';
import { lookUpCorrelation } from '../../server/idempotency/correlation';
import { ClaimNotStaleError, releaseStaleClaim, withAuditedRelease } from '../../server/retention/stale-claims';
import { ensurePolicies } from '../../server/retention/policies';
import { DEMO_SERVICE, defaultPolicyFields, PAYMENTS_ENDPOINT, REFUNDS_ENDPOINT } from '../../server/demo/policies';
import { useTestDatabase } from '../helpers/database';
import { principal } from '../../packages/store/test/helpers/store';

const PAYMENTS = PAYMENTS_ENDPOINT;
const REFUNDS = REFUNDS_ENDPOINT;
const FINGERPRINT_HEX = 'ab'.repeat(32);

/** A key as a test puts it into a backend: what the request path would have left behind. */
interface SeedKey extends KeyIdentity {
  state: KeyState;
  correlationId: string;
  createdAt: Date;
  expiresAt: Date;
  /** In progress only: when its lease ends (or ended). */
  leaseExpiresAt?: Date;
  statusCode?: number;
}

interface ContractBackend {
  reads: KeyRecordReads;
  seed(keys: SeedKey[]): Promise<void>;
  name(principalId: string, name: string): Promise<void>;
}

const MINUTE = 60_000;
const ago = (ms: number) => new Date(Date.now() - ms);
const seedKey = (fields: Partial<SeedKey> & KeyIdentity): SeedKey => ({
  state: 'completed',
  correlationId: randomUUID(),
  createdAt: ago(MINUTE),
  expiresAt: new Date(Date.now() + 86_400_000),
  statusCode: 201,
  ...fields,
  ...(fields.state === 'in_progress' ? { statusCode: undefined, leaseExpiresAt: fields.leaseExpiresAt ?? new Date(Date.now() + MINUTE) } : {}),
});

/**
 * A second backend: key records in a map, with the seam's semantics (scoped to a principal,
 * live keys newest first with a keyset cursor, stale claims oldest lease first, the release of
 * a stale claim). It has no audit log of its own, so a release says it was not audited.
 */
class InMemoryKeyReads implements KeyRecordReads {
  readonly rows: SeedKey[] = [];
  readonly names = new Map<string, string>();

  keyRecords(query: KeyLookupQuery): Promise<KeyRecord[]> {
    const found = this.rows.filter((row) => row.principalId === query.principalId && row.key === query.key && (query.service === undefined || row.service === query.service));
    found.sort((a, b) => compare(a.service, b.service) || compare(a.scope, b.scope) || b.expiresAt.getTime() - a.expiresAt.getTime());
    return Promise.resolve(found.map(toRecord));
  }

  principalKeys(query: KeyListQuery): Promise<KeyPage> {
    const newestFirst = (a: SeedKey, b: SeedKey) => compareDesc(positionOf(a), positionOf(b));
    const matches = this.rows
      .filter((row) => row.principalId === query.principalId && row.expiresAt.getTime() > Date.now())
      .filter((row) => (query.service === undefined || row.service === query.service) && (query.scope === undefined || row.scope === query.scope) && (query.state === undefined || row.state === query.state))
      .filter((row) => query.after === undefined || compareDesc(positionOf(row), query.after) > 0)
      .sort(newestFirst);
    const page = matches.slice(0, query.limit);
    const last = page.at(-1);
    return Promise.resolve({
      keys: page.map((row) => ({ service: row.service, scope: row.scope, key: row.key, state: row.state, statusCode: row.statusCode ?? null, createdAt: row.createdAt.toISOString(), expiresAt: row.expiresAt.toISOString() })),
      next: matches.length > query.limit && last ? positionOf(last) : null,
      searchedBackTo: null,
    });
  }

  correlationRecords(correlationId: string): Promise<CorrelationRecord[]> {
    const found = this.rows.filter((row) => row.correlationId === correlationId).sort((a, b) => b.createdAt.getTime() - a.createdAt.getTime());
    return Promise.resolve(found.slice(0, 20).map((row) => ({ principalId: row.principalId, principalName: this.names.get(row.principalId) ?? null, key: row.key, ...toRecord(row) })));
  }

  staleClaims(limit: number, service?: string): Promise<StaleClaim[]> {
    const stale = this.rows.filter((row) => isStale(row) && (service === undefined || row.service === service)).sort((a, b) => (a.leaseExpiresAt?.getTime() ?? 0) - (b.leaseExpiresAt?.getTime() ?? 0));
    return Promise.resolve(
      stale.slice(0, limit).map((row) => ({
        principalId: row.principalId,
        service: row.service,
        scope: row.scope,
        key: row.key,
        createdAt: row.createdAt.toISOString(),
        leaseExpiredAt: (row.leaseExpiresAt ?? row.createdAt).toISOString(),
        pastLeaseSeconds: Math.round((Date.now() - (row.leaseExpiresAt?.getTime() ?? 0)) / 1000),
        attempts: 1,
        correlationId: row.correlationId,
      })),
    );
  }

  releaseStaleClaim(id: KeyIdentity, by: StaleClaimReleaser): Promise<StaleClaimRelease> {
    if (by.reason.trim() === '') return Promise.reject(new RangeError('a reason is required'));
    const row = this.rows.find((candidate) => candidate.principalId === id.principalId && candidate.service === id.service && candidate.scope === id.scope && candidate.key === id.key);
    if (!row || !isStale(row)) return Promise.resolve({ released: false });
    row.state = 'failed';
    delete row.leaseExpiresAt;
    return Promise.resolve({ released: true, audited: false });
  }
}

const compare = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);
const positionOf = (row: SeedKey): KeyCursor => ({ createdAtMicros: String(BigInt(row.createdAt.getTime()) * 1000n), service: row.service, scope: row.scope, key: row.key });
/** Negative when `a` comes first newest first (it is later in (created, service, scope, key)). */
function compareDesc(a: KeyCursor, b: KeyCursor): number {
  const micros = BigInt(b.createdAtMicros) - BigInt(a.createdAtMicros);
  if (micros !== 0n) return micros < 0n ? -1 : 1;
  return compare(b.service, a.service) || compare(b.scope, a.scope) || compare(b.key, a.key);
}
const isStale = (row: SeedKey) => row.state === 'in_progress' && row.leaseExpiresAt !== undefined && row.leaseExpiresAt.getTime() < Date.now();

function toRecord(row: SeedKey): KeyRecord {
  const leasePassed = row.state === 'in_progress' && row.leaseExpiresAt && row.leaseExpiresAt.getTime() < Date.now() ? (Date.now() - row.leaseExpiresAt.getTime()) / 1000 : null;
  return {
    service: row.service,
    scope: row.scope,
    state: row.state,
    statusCode: row.statusCode ?? null,
    contentType: row.state === 'completed' ? 'application/json' : null,
    responseSize: row.state === 'completed' ? 2 : null,
    storedAs: row.state === 'completed' ? 'reference' : null,
    correlationId: row.correlationId,
    createdAt: row.createdAt.toISOString(),
    completedAt: row.state === 'completed' ? row.createdAt.toISOString() : null,
    expiresAt: row.expiresAt.toISOString(),
    secondsLeft: Math.max(0, Math.round((row.expiresAt.getTime() - Date.now()) / 1000)),
    leaseExpiresAt: row.leaseExpiresAt?.toISOString() ?? null,
    leasePassedSeconds: leasePassed,
    fingerprintPrefix: FINGERPRINT_HEX.slice(0, 8),
    attempts: 1,
    takeovers: 0,
  };
}

// The types are the guarantee that a body cannot reach the dashboard: a record with bytes in
// any field is not a KeyRecord (npm run typecheck fails if this ever compiles).
export const withBody = (record: KeyRecord): KeyRecord => {
  // @ts-expect-error a Buffer is not key metadata, under any name
  const leaked: KeyRecord = { ...record, responseBody: Buffer.from('{"card":"4111"}') };
  return leaked;
};

/** The behaviour every KeyRecordReads has, whatever keeps the keys. */
function keyReadsContract(backendName: string, make: () => ContractBackend) {
  describe(`KeyRecordReads contract: ${backendName}`, () => {
    let backend: ContractBackend;
    beforeAll(() => {
      backend = make();
    });

    it("finds each service's and scope's record of a principal's key, metadata only; a foreign key is as absent as a key never used", async () => {
      const owner = principal();
      const completed = seedKey({ principalId: owner, service: DEMO_SERVICE, scope: PAYMENTS, key: 'order-1' });
      await backend.seed([
        completed,
        seedKey({ principalId: owner, service: DEMO_SERVICE, scope: REFUNDS, key: 'order-1', state: 'in_progress' }),
        seedKey({ principalId: owner, service: 'orders', scope: PAYMENTS, key: 'order-1', statusCode: 200 }),
      ]);
      const records = await backend.reads.keyRecords({ principalId: owner, key: 'order-1' });
      expect(records.map((record) => [record.service, record.scope, record.state, record.statusCode])).toEqual([
        [DEMO_SERVICE, PAYMENTS, 'completed', 201],
        [DEMO_SERVICE, REFUNDS, 'in_progress', null],
        ['orders', PAYMENTS, 'completed', 200],
      ]);
      expect(records[0]).toMatchObject({ correlationId: completed.correlationId, storedAs: 'reference', fingerprintPrefix: 'abababab', attempts: 1, takeovers: 0, leasePassedSeconds: null });
      expect(records[0]?.secondsLeft).toBeGreaterThan(86_000);
      for (const record of records) for (const value of Object.values(record)) expect(value === null || ['string', 'number', 'boolean'].includes(typeof value)).toBe(true);
      expect((await backend.reads.keyRecords({ principalId: owner, key: 'order-1', service: 'orders' })).map((record) => record.service)).toEqual(['orders']);
      const foreign = await backend.reads.keyRecords({ principalId: principal(), key: 'order-1' });
      const absent = await backend.reads.keyRecords({ principalId: owner, key: 'never-used' });
      expect(foreign).toEqual([]);
      expect(absent).toEqual(foreign);
    });

    it("lists a principal's live keys newest first, filtered, a page at a time by keyset cursor", async () => {
      const tenant = principal();
      const base = Date.now() - 3_600_000;
      // 25 keys a millisecond apart; every fifth in refunds, every tenth running, k-07 expired.
      await backend.seed(
        Array.from({ length: 25 }, (_, index) => {
          const i = index + 1;
          return seedKey({
            principalId: tenant,
            service: DEMO_SERVICE,
            scope: i % 5 === 0 ? REFUNDS : PAYMENTS,
            key: `k-${String(i).padStart(2, '0')}`,
            state: i % 10 === 0 ? 'in_progress' : 'completed',
            createdAt: new Date(base + i),
            expiresAt: i === 7 ? ago(1_000) : new Date(Date.now() + 86_400_000),
          });
        }),
      );
      const list = (fields: Partial<KeyListQuery>) => backend.reads.principalKeys({ principalId: tenant, limit: 10, ...fields });
      const seen: string[] = [];
      let after: KeyCursor | undefined;
      let pages = 0;
      do {
        const page = await list({ after });
        seen.push(...page.keys.map((key) => key.key));
        after = page.next ?? undefined;
        pages += 1;
      } while (after && pages < 10);
      expect(seen).toEqual(Array.from({ length: 25 }, (_, index) => 25 - index).filter((i) => i !== 7).map((i) => `k-${String(i).padStart(2, '0')}`));
      expect(pages).toBe(3);
      const first = await list({});
      expect(first.keys[0]).toMatchObject({ service: DEMO_SERVICE, scope: REFUNDS, key: 'k-25', state: 'completed', statusCode: 201 });
      expect(first.next).toEqual({ createdAtMicros: String(BigInt(base + 16) * 1000n), service: DEMO_SERVICE, scope: PAYMENTS, key: 'k-16' });
      expect(first.searchedBackTo).toBeNull();
      expect((await list({ state: 'in_progress' })).keys.map((key) => key.key)).toEqual(['k-20', 'k-10']);
      expect((await list({ scope: REFUNDS, state: 'completed' })).keys.map((key) => key.key)).toEqual(['k-25', 'k-15', 'k-05']);
      expect((await list({ service: 'orders' })).keys).toEqual([]);
      expect((await backend.reads.principalKeys({ principalId: principal(), limit: 10 })).keys).toEqual([]);
    });

    it('finds the key of a correlation id across the store, with its principal and name', async () => {
      const tenant = principal();
      const correlationId = randomUUID();
      await backend.name(tenant, 'Correlated Contract Co');
      await backend.seed([seedKey({ principalId: tenant, service: 'orders', scope: REFUNDS, key: 'refund-42', correlationId })]);
      const records = await backend.reads.correlationRecords(correlationId);
      expect(records).toHaveLength(1);
      expect(records[0]).toMatchObject({ principalId: tenant, principalName: 'Correlated Contract Co', service: 'orders', scope: REFUNDS, key: 'refund-42', state: 'completed', correlationId });
      expect(await backend.reads.correlationRecords(randomUUID())).toEqual([]);
    });

    it('lists stale claims oldest lease first and releases one, once, only when it is stale', async () => {
      const tenant = principal();
      await backend.seed([
        ...[1, 2, 3].map((minutes) => seedKey({ principalId: tenant, service: DEMO_SERVICE, scope: REFUNDS, key: `crashed-${minutes}`, state: 'in_progress', leaseExpiresAt: ago(minutes * MINUTE) })),
        seedKey({ principalId: tenant, service: DEMO_SERVICE, scope: REFUNDS, key: 'running', state: 'in_progress' }),
        seedKey({ principalId: tenant, service: DEMO_SERVICE, scope: REFUNDS, key: 'done' }),
        seedKey({ principalId: tenant, service: 'orders', scope: REFUNDS, key: 'crashed-orders', state: 'in_progress', leaseExpiresAt: ago(2.5 * MINUTE) }),
      ]);
      const mine = (claims: StaleClaim[]) => claims.filter((claim) => claim.principalId === tenant);
      expect(mine(await backend.reads.staleClaims(500)).map((claim) => claim.key)).toEqual(['crashed-3', 'crashed-orders', 'crashed-2', 'crashed-1']);
      expect(mine(await backend.reads.staleClaims(500, 'orders')).map((claim) => claim.key)).toEqual(['crashed-orders']);
      const stale = mine(await backend.reads.staleClaims(500, DEMO_SERVICE));
      expect(stale.map((claim) => claim.key)).toEqual(['crashed-3', 'crashed-2', 'crashed-1']);
      expect(stale[0]).toMatchObject({ service: DEMO_SERVICE, scope: REFUNDS, attempts: 1 });
      expect(stale[0]?.pastLeaseSeconds).toBeGreaterThan(170);
      const id = { principalId: tenant, service: DEMO_SERVICE, scope: REFUNDS, key: 'crashed-1' };
      const by = { actor: 'ops@example.com', reason: 'processor confirmed the failure' };
      await expect(backend.reads.releaseStaleClaim({ ...id, service: 'orders' }, by)).resolves.toEqual({ released: false });
      await expect(backend.reads.releaseStaleClaim({ ...id, key: 'running' }, by)).resolves.toEqual({ released: false });
      await expect(backend.reads.releaseStaleClaim({ ...id, key: 'done' }, by)).resolves.toEqual({ released: false });
      await expect(backend.reads.releaseStaleClaim({ ...id, principalId: principal() }, by)).resolves.toEqual({ released: false });
      await expect(backend.reads.releaseStaleClaim(id, { ...by, reason: '  ' })).rejects.toBeDefined();
      await expect(backend.reads.releaseStaleClaim(id, by)).resolves.toMatchObject({ released: true });
      await expect(backend.reads.releaseStaleClaim(id, by)).resolves.toEqual({ released: false });
      expect((await backend.reads.keyRecords({ principalId: tenant, key: 'crashed-1' })).map((record) => [record.state, record.leaseExpiresAt])).toEqual([['failed', null]]);
      expect(mine(await backend.reads.staleClaims(500, DEMO_SERVICE)).map((claim) => claim.key)).toEqual(['crashed-3', 'crashed-2']);
    });
  });
}

describe('the key records seam', () => {
  const db = useTestDatabase();
  let dashboard: pg.Pool;
  const memory = new InMemoryKeyReads();

  beforeAll(async () => {
    dashboard = new pg.Pool({ connectionString: db.dashboardUrl, max: 2 });
    // The Postgres lookup probes each known (service, scope): both services know both endpoints.
    for (const service of [DEMO_SERVICE, 'orders']) await ensurePolicies(db.pool, service, defaultPolicyFields, 'test');
  });
  afterAll(async () => {
    await dashboard.end();
  });

  // Seeded by the owner, read through the dashboard's role: its grants suffice for every read and
  // the release (the server's audited function: the store's own it may not execute).
  keyReadsContract('PostgresKeyReads on the dashboard role', () => ({
    reads: withAuditedRelease(new PostgresKeyReads(dashboard), dashboard),
    name: (principalId, name) => namePrincipal(db.pool, principalId, name),
    seed: async (keys) => {
      for (const key of keys) {
        await db.pool.query(
          `INSERT INTO idempotency_keys (principal_id, service, scope, key, state, fingerprint, correlation_id, lease_expires_at, response_status,
             response_content_type, response_size, response_ref, completed_at, created_at, expires_at)
           VALUES ($1, $2, $3, $4, $5, decode($6, 'hex'), $7, $8, $9, $10, $11, $12, $13, $14, $15)`,
          [
            key.principalId, key.service, key.scope, key.key, key.state, FINGERPRINT_HEX, key.correlationId, key.leaseExpiresAt ?? null, key.statusCode ?? null,
            key.state === 'completed' ? 'application/json' : null, key.state === 'completed' ? 2 : null, key.state === 'completed' ? 'ref' : null,
            key.state === 'completed' ? key.createdAt : null, key.createdAt, key.expiresAt,
          ],
        );
      }
    },
  }));

  keyReadsContract('a second backend, in memory', () => ({
    reads: memory,
    name: (principalId, name) => Promise.resolve(void memory.names.set(principalId, name)),
    seed: (keys) => Promise.resolve(void memory.rows.push(...keys.map((key) => ({ ...key })))),
  }));

  it("drives the dashboard's server/ functions from the second backend, each audited in the dashboard's database", async () => {
    const reads = new InMemoryKeyReads();
    const access: KeyAccess = { reads, audit: dashboard };
    const tenant = principal();
    const correlationId = randomUUID();
    reads.rows.push(
      seedKey({ principalId: tenant, service: 'orders', scope: PAYMENTS, key: 'order-9', correlationId }),
      seedKey({ principalId: tenant, service: 'orders', scope: REFUNDS, key: 'stuck', state: 'in_progress', leaseExpiresAt: ago(MINUTE) }),
    );
    const records = await lookUpKey(access, { principalId: tenant, key: 'order-9', reason: 'customer asks about order 9' }, 'ops@example.com');
    expect(records.map((record) => [record.service, record.scope, record.correlationId])).toEqual([['orders', PAYMENTS, correlationId]]);
    const page = await listPrincipalKeys(access, keyListSchema.parse({ principalId: tenant, reason: 'browsing the tenant', service: 'orders' }), 'ops@example.com');
    expect(page.keys.map((key) => key.key)).toEqual(['stuck', 'order-9']);
    expect((await lookUpCorrelation(access, { correlationId, reason: 'quoted in ticket 5' }, 'ops@example.com')).records.map((record) => record.key)).toEqual(['order-9']);
    expect((await listStaleClaims(access, 10)).map((claim) => [claim.key, claim.releasable])).toEqual([['stuck', true]]);
    const stuck = { principalId: tenant, service: 'orders', scope: REFUNDS, key: 'stuck' };
    await releaseStaleClaim(access, stuck, 'ops@example.com', 'the processor never answered');
    await expect(releaseStaleClaim(access, stuck, 'ops@example.com', 'again')).rejects.toBeInstanceOf(ClaimNotStaleError);
    const { rows } = await db.pool.query<{ actor: string; action: string; reason: string; target: Record<string, unknown>; details: Record<string, unknown> | null }>(
      "SELECT actor, action, reason, target, details FROM audit_log WHERE target->>'principalId' = $1 OR target->>'correlationId' = $2 ORDER BY id",
      [tenant, correlationId],
    );
    expect(rows.map((row) => [row.actor, row.action, row.reason])).toEqual([
      ['ops@example.com', 'key.lookup', 'customer asks about order 9'],
      ['ops@example.com', 'key.list', 'browsing the tenant'],
      ['ops@example.com', 'key.correlation_lookup', 'quoted in ticket 5'],
      // The backend could not audit the release itself, so server/ wrote the row, once.
      ['ops@example.com', 'stale_claim.release', 'the processor never answered'],
    ]);
    expect(rows[0]?.details).toEqual({ records: 1, attempts: 0 });
    expect(rows[1]?.details).toMatchObject({ service: 'orders', keys: 2 });
    expect(rows[3]?.target).toEqual(stuck);
  });

  it('leaves no key-record SQL in server/ or app/ outside Postgres monitoring and maintenance', async () => {
    const root = resolve(import.meta.dirname, '../..');
    const sources = async (dir: string): Promise<string[]> => {
      const entries = await readdir(join(root, dir), { withFileTypes: true, recursive: true });
      return entries.filter((entry) => entry.isFile() && /\.tsx?$/.test(entry.name)).map((entry) => relative(root, join(entry.parentPath, entry.name)));
    };
    const files = [...(await sources('server')), ...(await sources('app'))];
    const readingKeys: string[] = [];
    for (const file of files) if (/\bidempotency_keys\b/.test(await readFile(join(root, file), 'utf8'))) readingKeys.push(file);
    // Monitoring (series, catalog statistics, stale counts), retention sweeps and partitions, and
    // the owner's key rotation: Postgres's own, not the dashboard's reads of key records; and the
    // start-up check that a standby's dashboard role cannot read response bodies (a privilege, no rows).
    expect(readingKeys.sort()).toEqual(
      [
        'server/dashboard-pools.ts',
        'server/idempotency/key-rotation.ts',
        'server/metrics/alerts.ts',
        'server/metrics/capacity.ts',
        'server/metrics/key-table-expiry.ts',
        'server/metrics/overview.ts',
        'server/metrics/principals.ts',
        'server/metrics/scope-sample.ts',
        'server/metrics/store-figures.ts',
        'server/retention/partitions.ts',
        'server/retention/stale-claims.ts',
        'server/retention/sweeper.ts',
      ].sort(),
    );
    // The package states the dashboard indexes' predicates as the schema defines them (the plan tests prove the indexes serve them).
    expect(keyReadStatementTexts.correlationRecords).toContain(CORRELATION_INDEX_PREDICATE);
    expect(principalKeysStatement({ principalId: randomUUID(), limit: 1 }).text).toContain(PRINCIPAL_CREATED_INDEX_PREDICATE);
    // The dashboard's key reads in server/ know the seam only, not the Postgres backend.
    for (const file of ['server/idempotency/key-metadata.ts', 'server/idempotency/correlation.ts']) {
      expect(await readFile(join(root, file), 'utf8')).not.toMatch(/from '(pg|@retrysafe\/store\/postgres)'/);
    }
  });
});
