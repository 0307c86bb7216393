// The scale bench's bulk loader (bench/scale-loader.ts) on a few thousand rows, in both layouts:
// the rows it writes through COPY ... FROM PROGRAM are rows the store reads (metadata), replays
// (same body: the sealed response, byte for byte; another body: a mismatch; a crashed claim: taken
// over) and the sweeper removes once expired; the key table's indexes come back as they were.
// With random keys (UUIDv4, the demo's) and time-ordered ones (UUIDv7, BENCH_SCALE_KEYS).
import { spawnSync } from 'node:child_process';
import { openSync, closeSync, readFileSync } from 'node:fs';
import { chmod, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { canonicalBody, fingerprint, FingerprintMismatchError, IdempotencyStore, ResponseKeyRing, type EndpointPolicy } from '@retrysafe/store';
import { PostgresKeyReads } from '@retrysafe/store/postgres';
import { keyTableIndexes, loadScaleRows, registerScalePolicies, writeLoaderSecrets } from '../../bench/scale-loader';
import { correlationOf, expiryOf, programArgs, Fingerprinter, isoOf, KEY_ORDERS, PIPE_BUF, printBatch, scaleRow as scaleRowOf, SCALE_SERVICE, splitRows, uuidV7, type KeyOrder, type LoaderSecrets, type RowBatch } from '../../bench/scale-rows';
import { sweepOnce } from '../../server/retention/sweeper';
import { createTestDatabase, layouts } from '../helpers/database';

const PRINCIPALS = 40;
const LIVE_ROWS = 3_000;
const EXPIRED_ROWS = 1_000;
const HOUR = 3_600_000;
const policy: EndpointPolicy = {
  scopeMode: 'endpoint',
  retryWindowMs: 2 * HOUR,
  retentionMs: 2 * HOUR,
  leaseMs: 30_000,
  lockTimeoutMs: 2_000,
  maxResponseBytes: 4_096,
  liveKeyQuota: 1_000_000,
};

/** A seed whose first rows hold at least one crashed claim and one failed request (about 1 in 1,000 each). */
function seedWithEveryState(rows: number): number {
  for (let seed = 1; ; seed += 1) {
    const states = new Set(Array.from({ length: rows }, (_, i) => scaleRowOf(seed, EXPIRED_ROWS + i, PRINCIPALS).state));
    if (states.has('in_progress') && states.has('failed')) return seed;
  }
}

/** A database of `layout` with the scale policies, a pool, and the loader's secrets in a folder the server can read. */
async function openLoaderFixture(layout: (typeof layouts)[number], connections: number) {
  const database = await createTestDatabase({ layout });
  const pool = new pg.Pool({ connectionString: database.url, max: connections });
  const dir = await mkdtemp(join(tmpdir(), 'retrysafe-scale-'));
  await chmod(dir, 0o711); // the database server's OS user reads the secrets file in it
  const { file: secretsFile, secrets } = await writeLoaderSecrets(dir);
  await registerScalePolicies(pool, policy);
  const close = async () => {
    await pool.end();
    await database.drop();
    await rm(dir, { recursive: true, force: true });
  };
  return { pool, dir, secretsFile, secrets, close };
}

const KEY_VERSION: Record<KeyOrder, string> = { random: '4', 'time-ordered': '7' };

describe.each(layouts.flatMap((layout) => KEY_ORDERS.map((keys) => [layout, keys] as const)))('scale loader, %s layout, %s keys', (layout, keys) => {
  const scaleRow = (seed: number, i: number, principals: number) => scaleRowOf(seed, i, principals, keys);
  let pool: pg.Pool;
  let secrets: LoaderSecrets;
  let secretsFile: string;
  let close: () => Promise<void>;
  const seed = seedWithEveryState(LIVE_ROWS);
  let indexesBefore: Awaited<ReturnType<typeof keyTableIndexes>>;
  let store: IdempotencyStore;
  let liveFrom = 0;

  beforeAll(async () => {
    ({ pool, secretsFile, secrets, close } = await openLoaderFixture(layout, 6));
    indexesBefore = await keyTableIndexes(pool);
    store = new IdempotencyStore({
      pool,
      service: SCALE_SERVICE,
      layout,
      fingerprintSecret: Buffer.from(secrets.fingerprintSecret, 'hex'),
      keyRing: new ResponseKeyRing([{ id: secrets.keyId, key: Buffer.from(secrets.key, 'hex') }]),
    });

    const { rows } = await pool.query<{ now: Date; day: Date }>("SELECT now(), date_trunc('day', now(), 'UTC') AS day");
    const now = rows[0]?.now.getTime() ?? Date.now();
    const day = rows[0]?.day.getTime() ?? now;
    // Expired rows: in the plain layout the last hour, in the partitioned one yesterday (a partition the sweeper drops whole).
    const expiredFrom = layout === 'partitioned' ? day - 20 * HOUR : now - HOUR - 60_000;
    if (layout === 'partitioned') {
      const from = new Date(day - 24 * HOUR).toISOString();
      const name = `idempotency_keys_p${from.slice(0, 10).replaceAll('-', '')}`;
      await pool.query(`CREATE TABLE retrysafe.${name} PARTITION OF retrysafe.idempotency_keys FOR VALUES FROM ('${from}') TO ('${new Date(day).toISOString()}')`);
    }
    const batch = (from: number, count: number, windowStartMs: number): RowBatch => ({
      seed, principals: PRINCIPALS, from, count, windowStartMs, windowMs: HOUR, retentionMs: policy.retentionMs, leaseMs: policy.leaseMs, keys,
    });
    await loadScaleRows(pool, { batch: batch(0, EXPIRED_ROWS, expiredFrom), secretsFile, streams: 2 });
    // Live rows: their expiries spread over the hour after the next minute.
    liveFrom = now + 60_000;
    const load = await loadScaleRows(pool, { batch: batch(EXPIRED_ROWS, LIVE_ROWS, liveFrom), secretsFile, streams: 2 });
    // The server is local here: the COPY backends' and row programs' CPU is read from /proc.
    expect(load.rowProgramCpuSeconds).toBeGreaterThan(0);
    expect(load.copyBackendCpuSeconds).toBeGreaterThanOrEqual(0);
  }, 120_000);

  afterAll(() => close());

  it('writes every row, in the demo proportions, and builds the indexes back as the migrations made them', async () => {
    const { rows } = await pool.query<{ rows: string; payments: string; principals: string; completed: string }>(
      `SELECT count(*) AS rows, count(*) FILTER (WHERE scope = 'POST /api/v1/payments') AS payments,
              count(DISTINCT principal_id) AS principals, count(*) FILTER (WHERE state = 'completed') AS completed
         FROM retrysafe.idempotency_keys`,
    );
    const counted = rows[0];
    expect(Number(counted?.rows)).toBe(EXPIRED_ROWS + LIVE_ROWS);
    const payments = Number(counted?.payments) / (EXPIRED_ROWS + LIVE_ROWS);
    expect(payments).toBeGreaterThan(0.65);
    expect(payments).toBeLessThan(0.79);
    expect(Number(counted?.principals)).toBeGreaterThan(PRINCIPALS / 2);
    expect(Number(counted?.completed)).toBeGreaterThan(0.99 * (EXPIRED_ROWS + LIVE_ROWS));
    expect(await keyTableIndexes(pool)).toEqual(indexesBefore);
    const { rows: valid } = await pool.query<{ invalid: string }>(
      `SELECT count(*) AS invalid FROM pg_index i JOIN pg_inherits h ON h.inhrelid = i.indrelid OR i.indrelid = 'retrysafe.idempotency_keys'::regclass
        WHERE NOT i.indisvalid AND (h.inhparent = 'retrysafe.idempotency_keys'::regclass OR i.indrelid = 'retrysafe.idempotency_keys'::regclass)`,
    );
    expect(Number(valid[0]?.invalid)).toBe(0);
  });

  it("writes each body's canonical JSON as the store computes it", () => {
    for (let i = 0; i < 200; i += 1) {
      const row = scaleRow(seed, i, PRINCIPALS);
      expect(row.canonicalBody).toBe(canonicalBody(row.body));
    }
  });

  it("fingerprints as the store does and writes its JSON as JSON.stringify would (the row program's shortcuts)", () => {
    const printer = new Fingerprinter(Buffer.from(secrets.fingerprintSecret, 'hex'));
    for (let i = 0; i < 500; i += 1) {
      const row = scaleRow(seed, i, PRINCIPALS);
      const expected = fingerprint(Buffer.from(secrets.fingerprintSecret, 'hex'), { method: 'POST', endpoint: row.scope, body: row.body });
      expect(printer.of(row.scope, row.canonicalBody).equals(expected)).toBe(true);
      if (row.response) expect(JSON.stringify(JSON.parse(row.response.toString()))).toBe(row.response.toString());
      expect(row.key).toMatch(new RegExp(`^(order|refund)-[0-9a-f]{8}-[0-9a-f]{4}-${KEY_VERSION[keys]}[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`));
    }
    if (keys === 'time-ordered') {
      // A later row's key carries a later instant (its first 48 bits), 1 ms a row: a principal's keys sort in the order they were made.
      const instant = (i: number) => Number.parseInt(scaleRow(seed, i, PRINCIPALS).key.replace(/^[a-z]+-/, '').replaceAll('-', '').slice(0, 12), 16);
      for (let i = 0; i < 500; i += 1) expect(instant(i + 1) - instant(i)).toBe(1);
      // And a new key made now sorts after every loaded one.
      const now = uuidV7(Date.now(), Buffer.alloc(12, 0xff));
      expect(Number.parseInt(now.replaceAll('-', '').slice(0, 12), 16)).toBeGreaterThan(instant(LIVE_ROWS + EXPIRED_ROWS));
      expect(now).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    }
    for (const ms of [0, 1, 999, 86_399_999, 1_700_000_000_000, 1_700_086_399_999, 1_709_251_200_000, 4_102_444_799_999]) expect(isoOf(ms)).toBe(new Date(ms).toISOString());
  });

  it('every column of a binary-COPY row reads back as the row program computed it', async () => {
    const ring = new ResponseKeyRing([{ id: secrets.keyId, key: Buffer.from(secrets.key, 'hex') }]);
    const printer = new Fingerprinter(Buffer.from(secrets.fingerprintSecret, 'hex'));
    let checked = 0;
    for (let n = 0; n < LIVE_ROWS; n += 97) {
      const i = EXPIRED_ROWS + n;
      const row = scaleRow(seed, i, PRINCIPALS);
      const { rows } = await pool.query<{
        principal_id: string; service: string; scope: string; key: string; state: string; fingerprint: Buffer; correlation_id: string;
        lease_expires_at: Date | null; response_status: number | null; response_content_type: string | null; response_body: Buffer | null;
        response_key_id: string | null; response_size: number | null; completed_at: Date | null; created_at: Date; expires_at: Date;
      }>('SELECT * FROM retrysafe.idempotency_keys WHERE principal_id = $1 AND scope = $2 AND key = $3', [row.principalId, row.scope, row.key]);
      const stored = rows[0];
      if (!stored) throw new Error(`row ${i} is missing`);
      expect({ principal: stored.principal_id, service: stored.service, scope: stored.scope, key: stored.key, state: stored.state }).toEqual({
        principal: row.principalId, service: SCALE_SERVICE, scope: row.scope, key: row.key, state: row.state,
      });
      expect(stored.fingerprint.equals(printer.of(row.scope, row.canonicalBody))).toBe(true);
      const created = stored.created_at.getTime();
      expect(stored.expires_at.getTime() - created).toBe(policy.retentionMs);
      expect(stored.expires_at.getTime()).toBeGreaterThanOrEqual(liveFrom);
      expect(stored.expires_at.getTime()).toBeLessThan(liveFrom + HOUR);
      expect(stored.correlation_id).toBe(correlationOf(seed, i, created));
      expect(stored.lease_expires_at?.getTime() ?? null).toBe(row.state === 'in_progress' ? created + policy.leaseMs : null);
      if (row.state === 'completed' && row.response) {
        expect({ status: stored.response_status, type: stored.response_content_type, size: stored.response_size, keyId: stored.response_key_id }).toEqual({
          status: 201, type: 'application/json', size: row.response.length, keyId: secrets.keyId,
        });
        expect(stored.completed_at?.getTime()).toBe(created + 40 + (i % 200));
        const opened = ring.open({ keyId: stored.response_key_id ?? '', ciphertext: stored.response_body ?? Buffer.alloc(0) }, { principalId: row.principalId, service: SCALE_SERVICE, scope: row.scope, key: row.key });
        expect(opened.equals(row.response)).toBe(true);
      } else {
        expect([stored.response_status, stored.response_body, stored.completed_at]).toEqual([null, null, null]);
      }
      checked += 1;
    }
    expect(checked).toBeGreaterThan(30);
  });

  it('rows the store reads: metadata as the key lookup shows it', async () => {
    const reads = new PostgresKeyReads(pool);
    const i = EXPIRED_ROWS + 10;
    const row = scaleRow(seed, i, PRINCIPALS);
    const [record] = await reads.keyRecords({ principalId: row.principalId, key: row.key, service: SCALE_SERVICE });
    expect(record).toMatchObject({ service: SCALE_SERVICE, scope: row.scope, state: row.state, responseSize: row.response?.length ?? null });
  });

  it('replays a completed row byte for byte, refuses another body, and takes over a crashed claim', async () => {
    const work = () => Promise.reject(new Error('a replay must not run the work'));
    let replayed = 0;
    let crashed = 0;
    for (let n = 0; n < LIVE_ROWS; n += 1) {
      const i = EXPIRED_ROWS + n;
      const row = scaleRow(seed, i, PRINCIPALS);
      const call = { principalId: row.principalId, endpoint: row.scope, method: 'POST', key: row.key, body: row.body, policy, mode: 'claim-first' as const };
      if (row.state === 'completed' && replayed < 50) {
        const outcome = await store.execute({ ...call, work });
        expect(outcome.replayed).toBe(true);
        expect(outcome.status).toBe(201);
        expect(outcome.body.equals(row.response ?? Buffer.alloc(0))).toBe(true);
        await expect(store.execute({ ...call, body: { ...row.body, amount: 1 }, work })).rejects.toBeInstanceOf(FingerprintMismatchError);
        replayed += 1;
      } else if (row.state === 'in_progress') {
        // Its lease ran out long ago: the retry takes the claim over and completes it.
        const outcome = await store.execute({ ...call, work: () => Promise.resolve({ status: 201, contentType: 'application/json', body: Buffer.from('{"retried":true}') }) });
        expect(outcome.replayed).toBe(false);
        crashed += 1;
      }
    }
    expect(replayed).toBe(50);
    expect(crashed).toBeGreaterThan(0);
  });

  it('the sweeper removes the expired rows and leaves the live ones', async () => {
    const result = await sweepOnce(pool, 'manual', { chunkSize: 500, minPauseMs: 0 });
    expect(result.status).toBe('completed');
    expect(result.rowsDeleted).toBe(EXPIRED_ROWS);
    const { rows } = await pool.query<{ left: string; expired: string }>(
      'SELECT count(*) AS left, count(*) FILTER (WHERE expires_at <= now()) AS expired FROM retrysafe.idempotency_keys',
    );
    expect(Number(rows[0]?.left)).toBe(LIVE_ROWS);
    expect(Number(rows[0]?.expired)).toBe(0);
  });
});

// A fresh load (the scale bench's first step, and any step whose rows already there are few):
// the key table emptied and the rows written by one COPY ... FREEZE a heap in one transaction,
// several printers sharing each COPY's pipe. The partitioned layout's window here crosses
// midnight UTC, so its rows go to two day partitions.
describe.each(layouts)('scale loader, fresh load, %s layout', (layout) => {
  const ROWS = 2_500;
  let pool: pg.Pool;
  let dir: string;
  let secretsFile: string;
  let secrets: LoaderSecrets;
  let close: () => Promise<void>;
  let batch: RowBatch;
  const seed = 7;

  beforeAll(async () => {
    ({ pool, dir, secretsFile, secrets, close } = await openLoaderFixture(layout, 4));
    const { rows } = await pool.query<{ tomorrow: Date }>("SELECT date_trunc('day', now(), 'UTC') + interval '1 day' AS tomorrow");
    const midnight = rows[0]?.tomorrow.getTime() ?? 0;
    batch = { seed, principals: PRINCIPALS, from: 0, count: ROWS, windowStartMs: midnight - HOUR / 2, windowMs: HOUR, retentionMs: policy.retentionMs, leaseMs: policy.leaseMs };
    // Rows already there (appended): a fresh load replaces them.
    await loadScaleRows(pool, { batch: { ...batch, seed: seed + 1, count: 300 }, secretsFile, streams: 2 });
  }, 120_000);

  afterAll(() => close());

  const heaps = async () =>
    (
      await pool.query<{ name: string; rows: string; pages: number; visible: number }>(
        `SELECT c.relname AS name, (SELECT count(*) FROM retrysafe.idempotency_keys k WHERE k.tableoid = c.oid) AS rows, c.relpages AS pages, c.relallvisible AS visible
           FROM pg_class c
          WHERE c.oid IN (SELECT relid FROM pg_partition_tree('retrysafe.idempotency_keys') WHERE isleaf) OR (c.oid = 'retrysafe.idempotency_keys'::regclass AND c.relkind = 'r')
          ORDER BY c.relname`,
      )
    ).rows;

  it('a failing row program fails the load and leaves the rows and indexes that were there', async () => {
    const before = await heaps();
    expect(before.reduce((sum, heap) => sum + Number(heap.rows), 0)).toBe(300);
    const indexes = await keyTableIndexes(pool);
    const broken = join(dir, 'broken.json');
    await writeFile(broken, '{"not":"secrets"}', { mode: 0o644 });
    await expect(loadScaleRows(pool, { batch, secretsFile: broken, streams: 3, fresh: true })).rejects.toThrow();
    expect(await heaps()).toEqual(before);
    expect(await keyTableIndexes(pool)).toEqual(indexes);
  });

  it('writes exactly the batch, each row in its place, every heap page all-visible', async () => {
    const load = await loadScaleRows(pool, { batch, secretsFile, streams: 3, fresh: true });
    expect(load.mode).toBe('fresh');
    const loaded = await heaps();
    expect(loaded.reduce((sum, heap) => sum + Number(heap.rows), 0)).toBe(ROWS);
    if (layout === 'partitioned') expect(loaded.filter((heap) => Number(heap.rows) > 0).length).toBe(2);
    for (const heap of loaded) expect(heap.visible).toBe(heap.pages);
    // Three printers interleaved their rows in one pipe: every row once, none cut or lost.
    const { rows } = await pool.query<{ principal_id: string; scope: string; key: string; expires_at: Date }>('SELECT principal_id, scope, key, expires_at FROM retrysafe.idempotency_keys');
    const stored = new Map(rows.map((row) => [`${row.principal_id} ${row.scope} ${row.key}`, row.expires_at.getTime()]));
    expect(stored.size).toBe(ROWS);
    for (let n = 0; n < ROWS; n += 1) {
      const row = scaleRowOf(seed, n, PRINCIPALS);
      expect(stored.get(`${row.principalId} ${row.scope} ${row.key}`)).toBe(expiryOf(batch, n));
    }
  });

  it('replays a fresh-loaded row', async () => {
    const store = new IdempotencyStore({
      pool,
      service: SCALE_SERVICE,
      layout,
      fingerprintSecret: Buffer.from(secrets.fingerprintSecret, 'hex'),
      keyRing: new ResponseKeyRing([{ id: secrets.keyId, key: Buffer.from(secrets.key, 'hex') }]),
    });
    const n = Array.from({ length: ROWS }, (_, i) => i).find((i) => scaleRowOf(seed, i, PRINCIPALS).state === 'completed') ?? 0;
    const row = scaleRowOf(seed, n, PRINCIPALS);
    const outcome = await store.execute({
      principalId: row.principalId, endpoint: row.scope, method: 'POST', key: row.key, body: row.body, policy, mode: 'claim-first',
      work: () => Promise.reject(new Error('a replay must not run the work')),
    });
    expect(outcome.replayed).toBe(true);
    expect(outcome.body.equals(row.response ?? Buffer.alloc(0))).toBe(true);
  });

  it("a printer sharing a pipe writes whole rows of at most PIPE_BUF bytes a write (a pipe's atomic writes), and all its slice's rows", () => {
    let rowsSeen = 0;
    const slice = { from: 40, count: 300 };
    printBatch({ ...batch, slice }, secrets, (chunk) => {
      expect(chunk.length).toBeLessThanOrEqual(PIPE_BUF);
      // Walk the chunk as binary COPY tuples (a field count, then each field's length and bytes): it ends on a tuple's end.
      let at = 0;
      while (at < chunk.length) {
        const fields = chunk.readInt16BE(at);
        expect(fields).toBe(16);
        at += 2;
        for (let field = 0; field < fields; field += 1) {
          const length = chunk.readInt32BE(at);
          at += 4 + Math.max(0, length);
        }
        rowsSeen += 1;
      }
      expect(at).toBe(chunk.length);
    }, 'rows');
    expect(rowsSeen).toBe(slice.count);
    // Split among printers: contiguous, in order, none empty, every row once.
    const runs = splitRows(40, 300, 7);
    expect(runs.map((run) => run.from)).toEqual(runs.map((_, n) => 40 + runs.slice(0, n).reduce((sum, run) => sum + run.count, 0)));
    expect(runs.reduce((sum, run) => sum + run.count, 0)).toBe(300);
    expect(splitRows(0, 2, 5)).toEqual([{ from: 0, count: 1 }, { from: 1, count: 1 }]);
  });

  it('several printers refuse standard output that is not a pipe (a file keeps an offset for each writer: they would overwrite each other)', () => {
    const file = join(dir, 'rows.bin');
    const out = openSync(file, 'w');
    try {
      const run = spawnSync(process.execPath, ['--conditions=retrysafe-source', '--import', 'tsx', 'bench/scale-rows.ts', ...programArgs({ ...batch, count: 20 }, secretsFile, 2)], { stdio: ['ignore', out, 'pipe'] });
      expect(run.status).toBe(1);
      expect(run.stderr.toString()).toContain('several printers need standard output to be a pipe');
    } finally {
      closeSync(out);
    }
    expect(readFileSync(file).length).toBe(0);
  });
});
