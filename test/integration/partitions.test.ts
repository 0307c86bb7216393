// The partitioned layout: keys partitioned by expires_at day, where Postgres cannot enforce
// one row per scoped key across partitions. The claim function's advisory lock does.
import { randomBytes, randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { partitionedStatements, partitionedStatementTexts } from '@retrysafe/store/postgres';
import { changePolicy, ensurePolicies } from '../../server/retention/policies';
import { DEMO_SERVICE } from '../../server/demo/policies';
import { listPartitions } from '../../server/retention/partitions';
import { shortSweepTexts, sweepOnce } from '../../server/retention/sweeper';
import { readKeyTableExpiry, walkLagText } from '../../server/metrics/key-table-expiry';
import { readCapacity } from '../../server/metrics/capacity';
import { readBaseline } from '../../server/metrics/sampler';
import { readStoreFigures } from '../../server/metrics/store-figures';
import { useTestDatabase } from '../helpers/database';
import { explainPrepared } from '../../packages/store/test/helpers/plan';
import { principalKeysStatement } from '@retrysafe/store/postgres';
import { keyListSchema, listPrincipalKeys, type KeyList } from '../../server/idempotency/key-metadata';
import { postgresKeyAccess } from '../helpers/key-access';
import { createTestStore, jsonResult, principal, sleep, testPolicy } from '../../packages/store/test/helpers/store';

const DAY_MS = 86_400_000;

/** Yesterday's day partition (UTC), made by hand as an ended partition the sweeper has not dropped yet; returns its name. */
async function attachYesterday(pool: pg.Pool, yesterday: Date, today: Date): Promise<string> {
  const name = `idempotency_keys_p${yesterday.toISOString().slice(0, 10).replaceAll('-', '')}`;
  await pool.query(`CREATE TABLE ${name} PARTITION OF idempotency_keys FOR VALUES FROM ('${yesterday.toISOString()}') TO ('${today.toISOString()}') WITH (autovacuum_enabled = false)`);
  return name;
}

describe('partitioned layout', () => {
  const db = useTestDatabase('partitioned');
  const clients: pg.Client[] = [];

  beforeAll(async () => {
    // The file fills and empties today's partition more than once; an autovacuum truncating it
    // between tests would leave it analysed at 0 pages, and a plan test would read a Seq Scan of
    // an empty table (the flake overview-series.test.ts pinned). Plans here are of young or
    // loaded tables as the tests make them, not as autovacuum last saw them.
    for (const partition of await listPartitions(db.pool)) await db.pool.query(`ALTER TABLE ${partition.name} SET (autovacuum_enabled = false)`);
    for (let i = 0; i < 64; i += 1) {
      const client = new pg.Client({ connectionString: db.url });
      await client.connect();
      clients.push(client);
    }
  });
  afterAll(async () => {
    await Promise.all(clients.map((client) => client.end()));
  });

  it('is installed partitioned, with day partitions created ahead', async () => {
    const { rows } = await db.pool.query<{ relkind: string }>("SELECT relkind FROM pg_class WHERE oid = 'idempotency_keys'::regclass");
    expect(rows[0]?.relkind).toBe('p');
    const partitions = await listPartitions(db.pool);
    expect(partitions.length).toBeGreaterThanOrEqual(4);
    expect(partitions.every((partition) => /^idempotency_keys_p\d{8}$/.test(partition.name))).toBe(true);
  });

  it('grants exactly one of 64 claims of one key while expires_at crosses partition boundaries', async () => {
    // One-second partitions around now + 30 days, so the claims' expiries straddle several.
    const { rows } = await db.pool.query<{ t0: Date }>("SELECT date_trunc('second', now() + interval '30 days') AS t0");
    const t0 = rows[0]?.t0;
    if (!t0) throw new Error('no clock');
    for (let i = -1; i < 6; i += 1) {
      const from = new Date(t0.getTime() + i * 1000).toISOString();
      const to = new Date(t0.getTime() + (i + 1) * 1000).toISOString();
      await db.pool.query(`CREATE TABLE idempotency_keys_s${i + 1} PARTITION OF idempotency_keys FOR VALUES FROM ('${from}') TO ('${to}')`);
    }
    const p = principal();
    const fingerprint = randomBytes(32);
    const results = await Promise.all(
      clients.map(async (client, index) => {
        await sleep((index % 16) * 150); // 16 waves over 2.4 s: the boundary passes mid-burst
        // Each claim in a transaction, the winner holding it open a while (as transactional
        // mode does while its work runs): only the lock keeps the others from inserting too.
        await client.query('BEGIN');
        const result = await partitionedStatements.claim(client, {
          principalId: p,
          service: 'demo',
          scope: 'POST /x',
          key: 'k',
          fingerprint,
          correlationId: randomUUID(),
          leaseMs: 30_000,
          retentionMs: 30 * DAY_MS,
        });
        if (result.claimed) await sleep(400);
        await client.query('COMMIT');
        return result;
      }),
    );
    expect(results.filter((result) => result.claimed)).toHaveLength(1);
    for (const result of results) {
      if (!result.claimed) expect(result.existing?.state).toBe('in_progress');
    }
    const { rows: stored } = await db.pool.query('SELECT tableoid::regclass::text AS partition FROM idempotency_keys WHERE principal_id = $1', [p]);
    expect(stored).toHaveLength(1);
  });

  it('grants one claim per service of one principal, scope and key, claimed at once by two services', async () => {
    const p = principal();
    const results = await Promise.all(
      clients.slice(0, 32).map((client, index) =>
        partitionedStatements.claim(client, {
          principalId: p,
          service: index % 2 === 0 ? 'demo' : 'orders',
          scope: 'POST /x',
          key: 'k',
          fingerprint: randomBytes(32),
          correlationId: randomUUID(),
          leaseMs: 30_000,
          retentionMs: DAY_MS,
        }),
      ),
    );
    expect(results.filter((result) => result.claimed)).toHaveLength(2);
    const { rows } = await db.pool.query<{ service: string }>('SELECT service FROM idempotency_keys WHERE principal_id = $1 ORDER BY service', [p]);
    expect(rows).toEqual([{ service: 'demo' }, { service: 'orders' }]);
  });

  it('finds a retry`s original in an earlier partition than a new claim would go to', async () => {
    const { store } = createTestStore(db.pool, { layout: 'partitioned' });
    const p = principal();
    const call = {
      principalId: p,
      key: 'k',
      endpoint: 'POST /payments',
      method: 'POST',
      body: { amount: 3 },
      policy: { ...testPolicy, retentionMs: 26 * 3_600_000 },
      mode: 'claim-first' as const,
      work: () => Promise.resolve(jsonResult(201, { first: true })),
    };
    const original = await store.execute(call);
    // The original was claimed "yesterday": it expires within the hour, in today's partition,
    // while a claim made now would expire in tomorrow's.
    await db.pool.query(
      "UPDATE idempotency_keys SET created_at = now() - interval '25 hours', expires_at = now() + interval '50 minutes' WHERE principal_id = $1",
      [p],
    );
    const retry = await store.execute({ ...call, work: () => Promise.reject(new Error('must not run')) });
    expect(retry.replayed).toBe(true);
    expect(retry.body.equals(original.body)).toBe(true);
    const { rows } = await db.pool.query('SELECT 1 FROM idempotency_keys WHERE principal_id = $1', [p]);
    expect(rows).toHaveLength(1);
  });

  it('drops only partitions whose every row is past its expiry, with the evidence', async () => {
    const { rows: days } = await db.pool.query<{ yesterday: Date; today: Date }>(
      "SELECT date_trunc('day', now(), 'UTC') - interval '1 day' AS yesterday, date_trunc('day', now(), 'UTC') AS today",
    );
    const yesterday = days[0]?.yesterday;
    const today = days[0]?.today;
    if (!yesterday || !today) throw new Error('no clock');
    const name = await attachYesterday(db.pool, yesterday, today);
    const old = principal();
    await db.pool.query(
      `INSERT INTO idempotency_keys (principal_id, service, scope, key, state, fingerprint, correlation_id, response_status, response_content_type,
         response_ref, completed_at, created_at, expires_at)
       SELECT $1, 'demo', 'POST /payments', 'old-' || i, 'completed', decode(repeat('ab', 32), 'hex'), gen_random_uuid(), 201, 'application/json', 'ref',
              $2::timestamptz - interval '2 days', $2::timestamptz - interval '2 days', $2::timestamptz + (i % 3600) * interval '1 second'
       FROM generate_series(1, 500) AS i`,
      [old, yesterday.toISOString()],
    );
    const live = principal();
    await createTestStore(db.pool, { layout: 'partitioned' }).store.execute({
      principalId: live,
      key: 'live',
      endpoint: 'POST /payments',
      method: 'POST',
      body: {},
      policy: { ...testPolicy, retentionMs: 60_000 },
      mode: 'claim-first',
      work: () => Promise.resolve(jsonResult(201, {})),
    });
    const result = await sweepOnce(db.pool, 'manual');
    expect(result.status).toBe('completed');
    expect(result.partitionsDropped).toEqual([name]);
    expect(result.rowsDeleted).toBe(500);
    expect(result.scopes.find((scope) => scope.scope === 'POST /payments')).toMatchObject({ service: 'demo', rowsDeleted: 500 });
    expect(result.scopes.find((scope) => scope.scope === 'POST /payments')?.minAgeSeconds).toBeGreaterThan(2 * 86_400);
    // The first of them expired a second into yesterday: dropped with its partition, a day or more later.
    const late = result.scopes.find((scope) => scope.scope === 'POST /payments')?.maxPastExpirySeconds ?? 0;
    expect(late).toBeGreaterThan(86_400 - 2);
    expect(late).toBeLessThan(2 * 86_400);
    expect((await db.pool.query('SELECT 1 FROM idempotency_keys WHERE principal_id = $1', [old])).rowCount).toBe(0);
    expect((await db.pool.query('SELECT 1 FROM idempotency_keys WHERE principal_id = $1', [live])).rowCount).toBe(1);
    expect((await listPartitions(db.pool)).some((partition) => partition.name === name)).toBe(false);
  });

  it('measures cleanup lag from the partitions\' ends: a row past its expiry in a partition that has not ended is on time', async () => {
    // A row expiring at the start of today's partition: past its expiry, and kept by design until
    // the partition ends tonight (a day partition is dropped whole). Counted from the row's own
    // expiry, the cleanup-lag alert (an hour) fired 23 hours a day in this layout.
    const { rows: clock } = await db.pool.query<{ today: Date; yesterday: Date; now: Date }>(
      "SELECT date_trunc('day', now(), 'UTC') AS today, date_trunc('day', now(), 'UTC') - interval '1 day' AS yesterday, now() AS now",
    );
    const { today, yesterday, now } = clock[0] ?? {};
    if (!today || !yesterday || !now) throw new Error('no clock');
    const owner = principal();
    // Promised two days: such a row leaves with its partition (one promised less than a day is
    // the sweeper's to delete within a sweep, below).
    const insert = (expiresAt: Date) =>
      db.pool.query(
        `INSERT INTO idempotency_keys (principal_id, service, scope, key, state, fingerprint, correlation_id, created_at, expires_at)
         VALUES ($1, 'demo', 'POST /lag', $2, 'failed', decode(repeat('ab', 32), 'hex'), gen_random_uuid(), $3::timestamptz - interval '2 days', $3)`,
        [owner, `lag-${expiresAt.getTime()}`, expiresAt.toISOString()],
      );
    await insert(new Date(today.getTime() + 1));
    // A sweep walks past it (where a policy promises less than a day, the walk's lag counts too).
    await sweepOnce(db.pool, 'manual');
    expect((await db.pool.query('SELECT 1 FROM idempotency_keys WHERE principal_id = $1', [owner])).rowCount).toBe(1);
    expect((await readStoreFigures(db.pool)).cleanupLagSeconds).toBe(0);
    // A partition that ended at midnight and is still here: the cleanup is behind by as long.
    const name = await attachYesterday(db.pool, yesterday, today);
    try {
      await insert(new Date(yesterday.getTime() + 3_600_000));
      const lag = (await readStoreFigures(db.pool)).cleanupLagSeconds;
      const sinceMidnight = (Date.now() - today.getTime()) / 1000;
      expect(lag).toBeGreaterThan(sinceMidnight - 30);
      expect(lag).toBeLessThan(sinceMidnight + 30);
      // The baseline keeps counting a partition that ended within the grace (its drop is due
      // with the next sweep: at midnight the store would otherwise read 1.9x its baseline until
      // then), and stops past it, where a late drop is the cleanup lag's to report.
      const within = await readKeyTableExpiry(db.pool, Math.ceil(sinceMidnight) + 60);
      expect(within.keptFrom.getTime()).toBe(yesterday.getTime());
      if (sinceMidnight > 120) expect((await readKeyTableExpiry(db.pool, Math.floor(sinceMidnight) - 60)).keptFrom.getTime()).toBe(today.getTime());
    } finally {
      await db.pool.query(`DROP TABLE ${name}`);
      await db.pool.query('DELETE FROM idempotency_keys WHERE principal_id = $1', [owner]);
    }
  });

  it('counts in the baseline the keys whose partition has not ended: those created since the current partition began, less the retention', async () => {
    const service = 'baseline-partitioned';
    const fields = { scopeMode: 'endpoint', retryWindowSeconds: 3_600, leaseMs: 10_000, lockTimeoutMs: 1_000, maxResponseBytes: 4_096, liveKeyQuota: 1_000 } as const;
    await ensurePolicies(db.pool, service, { 'POST /b': { ...fields, retentionSeconds: 93_600 }, 'POST /short': { ...fields, retentionSeconds: 7_200 } }, 'system');
    // Retention 26 h. Kept: claimed a minute ago (5), and a day and 110 min before midnight (7),
    // whose rows expire after midnight, in today's partition. Gone: claimed a day and 130 min
    // before midnight (11), in yesterday's partition, which has ended. Read as rate x retention
    // alone, the 7 were left out.
    // Retention 2 h, under a partition's width: the sweeper deletes such keys within a sweep of
    // their expiry, so only the last 2 h count (5), not the 7 claimed 3 h before midnight.
    await db.pool.query(
      `INSERT INTO flow_counts_minute (minute, service, scope, outcome, count) VALUES
         (date_trunc('minute', now()) - interval '1 minute', $1, 'POST /b', 'new', 5),
         (date_trunc('day', now(), 'UTC') - interval '1 day 110 minutes', $1, 'POST /b', 'new', 7),
         (date_trunc('day', now(), 'UTC') - interval '1 day 130 minutes', $1, 'POST /b', 'new', 11),
         (date_trunc('minute', now()) - interval '1 minute', $1, 'POST /short', 'new', 5),
         (least(date_trunc('day', now(), 'UTC'), date_trunc('minute', now()) - interval '3 hours'), $1, 'POST /short', 'new', 7)`,
      [service],
    );
    const expiry = await readKeyTableExpiry(db.pool);
    expect(expiry).toMatchObject({ layout: 'partitioned', keptPastExpirySeconds: 86_400, sweptBelowSeconds: 86_400 });
    const baseline = (await readBaseline(db.pool, expiry.keptFrom, expiry.sweptBelowSeconds)).filter((scope) => scope.service === service);
    expect(baseline).toEqual([
      { service, scope: 'POST /b', retentionSeconds: 93_600, newKeys: 12 },
      { service, scope: 'POST /short', retentionSeconds: 7_200, newKeys: 5 },
    ]);
    // The capacity forecast: the 26 h scope peaks a partition's width higher, the 2 h one does not.
    // Half the last hour's new keys each: 0.5 x (26 h + a day) + 0.5 x 2 h = 93,600 s of them.
    // The forecast is rounded to whole rows, so it is compared in rows, within the rounding's half
    // row (as a ratio, that half row was up to 6 s of the 10 keys' 60 to 120 s window).
    const capacity = await readCapacity(db.pool, { service });
    expect(Math.abs(capacity.steadyStateRows - capacity.newKeysPerSecond * 93_600)).toBeLessThanOrEqual(0.5 + 1e-9);
  });

  it('deletes the keys promised less than a day within a sweep of their expiry, and leaves the rest for their partition', async () => {
    const service = 'short-partitioned';
    await ensurePolicies(
      db.pool,
      service,
      { 'POST /s': { scopeMode: 'endpoint', retryWindowSeconds: 300, retentionSeconds: 600, leaseMs: 10_000, lockTimeoutMs: 1_000, maxResponseBytes: 4_096, liveKeyQuota: 1_000 } },
      'system',
    );
    const owner = principal();
    // 300 keys promised 10 min and 300 promised 2 days, expired over the last 30 s (in today's
    // partition, which has not ended), interleaved; and one of each not expired yet.
    const insert = (promise: string, count: number, expiresIn: string) =>
      db.pool.query(
        `INSERT INTO idempotency_keys (principal_id, service, scope, key, state, fingerprint, correlation_id, created_at, expires_at)
         SELECT $1, $2, 'POST /s', $3 || '-' || i, 'failed', decode(repeat('ab', 32), 'hex'), gen_random_uuid(),
                e - $4::interval, e
         FROM generate_series(1, $5::int) AS i,
              LATERAL (SELECT greatest(now() - i * interval '100 ms' + $6::interval, date_trunc('day', now(), 'UTC') + i * interval '1 microsecond') AS e) x`,
        [owner, service, promise.replace(' ', ''), promise, count, expiresIn],
      );
    await insert('10 minutes', 300, '0 s');
    await insert('2 days', 300, '0 s');
    await insert('10 minutes', 1, '5 minutes');
    await insert('2 days', 1, '5 minutes');
    const left = async () => {
      const { rows } = await db.pool.query<{ promise: string; live: boolean; n: number }>(
        `SELECT split_part(key, '-', 1) AS promise, expires_at > now() AS live, count(*)::int AS n FROM idempotency_keys
         WHERE principal_id = $1 GROUP BY 1, 2 ORDER BY 1, 2`,
        [owner],
      );
      return rows;
    };
    // Chunks of 100 index entries: the walk crosses the long promises' entries without deleting
    // them. A run's budget counts the entries walked: this one stops after 300 of the 600, and the
    // next goes on from where it ended.
    const options = { chunkSize: 100, minPauseMs: 0, pauseFactor: 0 };
    const budgeted = await sweepOnce(db.pool, 'manual', { ...options, maxRowsPerRun: 250 });
    expect(budgeted).toMatchObject({ status: 'completed', stopReason: 'row-budget', chunks: 3 });
    // Half the entries walked: the next one the walk has not passed expired about 15 s ago, and
    // the cleanup lag says so (today's partition has not ended, so only the walk is behind).
    const behind = (await readStoreFigures(db.pool)).cleanupLagSeconds;
    expect(behind).toBeGreaterThan(5);
    expect(behind).toBeLessThan(60);
    const first = await sweepOnce(db.pool, 'manual', options);
    expect(first).toMatchObject({ status: 'completed', stopReason: 'caught-up' });
    expect(first.chunks).toBeGreaterThanOrEqual(3);
    expect(await left()).toEqual([
      { promise: '10minutes', live: true, n: 1 },
      { promise: '2days', live: false, n: 300 },
      { promise: '2days', live: true, n: 1 },
    ]);
    const evidence = first.scopes.find((scope) => scope.service === service);
    const before = budgeted.scopes.find((scope) => scope.service === service)?.rowsDeleted ?? 0;
    expect(before).toBeGreaterThan(100);
    expect(evidence).toMatchObject({ scope: 'POST /s', rowsDeleted: 300 - before, retryWindowSeconds: 300 });
    expect(evidence?.minAgeSeconds).toBeGreaterThanOrEqual(600);
    expect(budgeted.scopes.find((scope) => scope.service === service)?.maxPastExpirySeconds).toBeGreaterThan(29);
    expect(evidence?.maxPastExpirySeconds).toBeLessThan(120);
    const { rows: walked } = await db.pool.query<{ swept_through: Date | null; latest: Date }>(
      `SELECT r.swept_through, (SELECT max(expires_at) FROM idempotency_keys WHERE expires_at < now()) AS latest FROM sweep_runs r WHERE r.id = $1`,
      [first.runId],
    );
    expect(walked[0]?.swept_through).not.toBeNull();
    expect(walked[0]?.swept_through?.getTime()).toBeGreaterThanOrEqual(walked[0]?.latest.getTime() ?? Infinity);
    expect((await readStoreFigures(db.pool)).cleanupLagSeconds).toBeLessThan(5);

    // The next run walks on from there: one more expired key, one short chunk.
    await insert('10 minutes', 1, '-1 second');
    await db.pool.query(`UPDATE idempotency_keys SET expires_at = now() - interval '1 ms', created_at = now() - interval '10 minutes 1 ms' WHERE principal_id = $1 AND key = '10minutes-1' AND expires_at < now()`, [owner]);
    const second = await sweepOnce(db.pool, 'manual', options);
    expect(second.chunks).toBe(1);
    expect(second.scopes.find((scope) => scope.service === service)).toMatchObject({ rowsDeleted: 1 });
    expect((await left()).filter((row) => row.promise === '10minutes')).toEqual([{ promise: '10minutes', live: true, n: 1 }]);
    await db.pool.query('DELETE FROM idempotency_keys WHERE principal_id = $1', [owner]);
  });

  it('gives up a drop that waits on an older transaction, records why, and finishes it at the next run', async () => {
    const { rows: days } = await db.pool.query<{ yesterday: Date; today: Date }>(
      "SELECT date_trunc('day', now(), 'UTC') - interval '1 day' AS yesterday, date_trunc('day', now(), 'UTC') AS today",
    );
    const { yesterday, today } = days[0] ?? {};
    if (!yesterday || !today) throw new Error('no clock');
    const name = await attachYesterday(db.pool, yesterday, today);
    await db.pool.query(
      `INSERT INTO idempotency_keys (principal_id, service, scope, key, state, fingerprint, correlation_id, created_at, expires_at)
       SELECT $1, 'demo', 'POST /payments', 'held-' || i, 'failed', decode(repeat('ab', 32), 'hex'), gen_random_uuid(), $2::timestamptz - interval '1 day', $2::timestamptz + interval '1 hour'
       FROM generate_series(1, 20) AS i`,
      [principal(), yesterday.toISOString()],
    );
    // A transaction that read the key table (as a pg_dump does for its whole run), held 8 s.
    const holder = clients[0];
    if (!holder) throw new Error('no client');
    await holder.query('BEGIN');
    await holder.query('SELECT count(*) FROM idempotency_keys');
    let holderDone = false;
    const released = sleep(8_000).then(async () => {
      await holder.query('COMMIT');
      holderDone = true;
    });
    try {
      const waiting = await sweepOnce(db.pool, 'manual', { detachTimeoutMs: 1_000 });
      // Without a budget the run waited for the holder (8 s), and every run after it was skipped.
      expect(holderDone).toBe(false);
      expect(waiting).toMatchObject({ status: 'failed', partitionsDropped: [] });
      expect(waiting.error).toMatch(new RegExp(`^the drop of partition ${name} waited over \\d+ s for transactions older than it to end`));
      expect((await listPartitions(db.pool)).find((partition) => partition.name === name)?.detachPending).toBe(true);
      const { rows: recorded } = await db.pool.query<{ status: string; error: string }>('SELECT status, error FROM sweep_runs WHERE id = $1', [waiting.runId]);
      expect(recorded[0]).toEqual({ status: 'failed', error: waiting.error });
    } finally {
      await released;
    }
    const finished = await sweepOnce(db.pool, 'manual');
    expect(finished).toMatchObject({ status: 'completed', partitionsDropped: [name], rowsDeleted: 20 });
    expect((await listPartitions(db.pool)).some((partition) => partition.name === name)).toBe(false);
  }, 60_000);

  it('creates partitions beyond a longer retention as soon as the policy changes', async () => {
    const endpoint = 'POST /api/partitioned-policy';
    const fields = { scopeMode: 'endpoint' as const, retryWindowSeconds: 86_400, retentionSeconds: 93_600, leaseMs: 30_000, lockTimeoutMs: 5_000, maxResponseBytes: 4_096, liveKeyQuota: 1_000 };
    await ensurePolicies(db.pool, DEMO_SERVICE, { [endpoint]: fields }, 'system');
    await changePolicy(db.pool, { service: DEMO_SERVICE, endpoint, fields: { ...fields, retentionSeconds: 12 * 86_400 }, actor: 'admin', reason: 'longer margin', expectedVersion: 1 });
    const { rows } = await db.pool.query<{ covered: boolean }>(
      "SELECT max(upper) > now() + interval '12 days' AS covered FROM (SELECT (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'TO \\(''([^'']+)''\\)'))[1]::timestamptz AS upper FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = 'idempotency_keys'::regclass AND c.relname LIKE 'idempotency_keys_p%') p",
    );
    expect(rows[0]?.covered).toBe(true);
  });

  it('makes a partition ahead while a claim\'s transaction is open, without waiting for it or holding up the claims after it', async () => {
    // The partition of the day after tomorrow (empty, and inside any horizon) goes, so the next ensure makes it again.
    const inTwoDays = Date.now() + 2 * DAY_MS;
    const ahead = (await listPartitions(db.pool)).find((partition) => partition.lowerBound.getTime() <= inTwoDays && inTwoDays < partition.upperBound.getTime());
    if (!ahead) throw new Error('no partition');
    await db.pool.query(`DROP TABLE ${ahead.name}`);
    const [holder, maker, claimer] = clients;
    if (!holder || !maker || !claimer) throw new Error('no clients');
    const claim = (client: pg.Client, key: string) =>
      partitionedStatements.claim(client, { principalId: principal(), service: 'demo', scope: 'POST /held', key, fingerprint: randomBytes(32), correlationId: randomUUID(), leaseMs: 30_000, retentionMs: 3_600_000 });
    // A transactional-mode claim: its transaction stays open while its handler runs.
    await holder.query('BEGIN');
    await claim(holder, 'held');
    try {
      await maker.query("SET lock_timeout = '3s'");
      await maker.query('BEGIN');
      const { rows } = await maker.query<{ created: number }>('SELECT retrysafe_ensure_partitions() AS created');
      expect(rows[0]?.created).toBe(1);
      // While the maker's transaction is open, another claim goes through.
      await claimer.query("SET statement_timeout = '3s'");
      expect((await claim(claimer, 'meanwhile')).claimed).toBe(true);
      await maker.query('COMMIT');
    } finally {
      await maker.query('ROLLBACK').catch(() => undefined);
      await maker.query('RESET lock_timeout');
      await claimer.query('RESET statement_timeout');
      await holder.query('COMMIT');
    }
    // The new partition carries the parent's indexes and CHECK constraints, as one made by PARTITION OF would.
    const { rows: shape } = await db.pool.query<{ name: string; indexes: number; checks: number }>(
      `SELECT c.relname AS name, (SELECT count(*)::int FROM pg_index x WHERE x.indrelid = c.oid) AS indexes,
              (SELECT count(*)::int FROM pg_constraint k WHERE k.conrelid = c.oid AND k.contype = 'c') AS checks
       FROM pg_class c WHERE c.relname = ANY($1) ORDER BY c.relname = $2`,
      [[ahead.name, 'idempotency_keys'], ahead.name],
    );
    expect(shape).toEqual([
      { name: 'idempotency_keys', indexes: expect.any(Number) as number, checks: expect.any(Number) as number },
      { name: ahead.name, indexes: shape[0]?.indexes, checks: shape[0]?.checks },
    ]);
    expect(shape[0]?.indexes).toBeGreaterThanOrEqual(5);
    expect((await listPartitions(db.pool)).find((partition) => partition.name === ahead.name)).toMatchObject({ lowerBound: ahead.lowerBound, upperBound: ahead.upperBound });
  });

  it('probes only the partitions that can hold a live row, through their primary keys', async () => {
    const client = await db.pool.connect();
    try {
      const nodes = await explainPrepared(client, partitionedStatementTexts.readKey, [randomUUID(), 'POST /x', 'k', 'demo']);
      expect(nodes.filter((node) => node['Node Type'] === 'Seq Scan')).toEqual([]);
      const scanned = nodes.filter((node) => node['Relation Name']?.startsWith('idempotency_keys_'));
      expect(scanned.length).toBeGreaterThan(0);
      for (const node of scanned) expect(node['Index Name']).toMatch(/pkey$/);
    } finally {
      client.release();
    }
  });

  it('lists a principal\'s keys newest first across day partitions, from their recent-keys indexes', async () => {
    const tenant = principal();
    // Retentions of 1 to 3 days put the keys in different partitions; creation order interleaves them.
    await db.pool.query(
      `INSERT INTO idempotency_keys (principal_id, service, scope, key, state, fingerprint, correlation_id, response_status, completed_at, response_ref, created_at, expires_at)
       SELECT $1, 'demo', 'POST /x', 'p-' || lpad(i::text, 2, '0'), 'completed', decode(repeat('ab', 32), 'hex'), gen_random_uuid(), 201, now(), 'ref',
              now() - interval '1 hour' + i * interval '1 second', now() + (1 + i % 3) * interval '1 day'
       FROM generate_series(1, 30) AS i`,
      [tenant],
    );
    const list = { principalId: tenant, reason: 'ticket 12', limit: 12 };
    const seen: string[] = [];
    let after: KeyList['after'];
    do {
      const page = await listPrincipalKeys(postgresKeyAccess(db.pool), keyListSchema.parse({ ...list, after }), 'ops@example.com');
      seen.push(...page.keys.map((key) => key.key));
      after = page.next ?? undefined;
    } while (after);
    expect(seen).toEqual(Array.from({ length: 30 }, (_, index) => `p-${String(30 - index).padStart(2, '0')}`));
    const statement = principalKeysStatement(keyListSchema.parse(list));
    const client = await db.pool.connect();
    try {
      const nodes = await explainPrepared(client, statement.text, statement.values);
      const scanned = nodes.filter((node) => node['Relation Name']?.startsWith('idempotency_keys_'));
      expect(scanned.length).toBeGreaterThan(1);
      for (const node of scanned) expect(node['Index Name']).toMatch(/principal_id_created_at_idx$/);
      expect(nodes.some((node) => node['Node Type'] === 'Merge Append')).toBe(true);
    } finally {
      client.release();
    }
  });

  it('ends the walk at a locked short-promise row without failing the run, and deletes it at the next run', async () => {
    const service = 'short-partitioned';
    const owner = principal();
    await db.pool.query(
      `INSERT INTO idempotency_keys (principal_id, service, scope, key, state, fingerprint, correlation_id, created_at, expires_at)
       SELECT $1, $2, 'POST /s', 'locked-' || i, 'failed', decode(repeat('ab', 32), 'hex'), gen_random_uuid(), e - interval '10 minutes', e
       FROM generate_series(1, 3) AS i, LATERAL (SELECT greatest(now() - i * interval '1 ms', date_trunc('day', now(), 'UTC') + i * interval '1 microsecond') AS e) x`,
      [owner, service],
    );
    // A transactional request that began before its key expired still holds it.
    const holder = clients[0];
    if (!holder) throw new Error('no client');
    await holder.query('BEGIN');
    try {
      await holder.query("SELECT 1 FROM idempotency_keys WHERE principal_id = $1 AND key = 'locked-2' FOR UPDATE", [owner]);
      const blocked = await sweepOnce(db.pool, 'manual', { lockTimeoutMs: 100 });
      expect(blocked).toMatchObject({ status: 'completed', stopReason: 'caught-up' });
      expect((await db.pool.query('SELECT 1 FROM idempotency_keys WHERE principal_id = $1', [owner])).rowCount).toBe(3);
    } finally {
      await holder.query('ROLLBACK');
    }
    const next = await sweepOnce(db.pool, 'manual');
    expect(next.scopes.find((scope) => scope.service === service)).toMatchObject({ rowsDeleted: 3 });
    expect((await db.pool.query('SELECT 1 FROM idempotency_keys WHERE principal_id = $1', [owner])).rowCount).toBe(0);
  });

  // The walk's statements, on a young table and on 200,000 keys expired today (a day's partition
  // that has not ended) beside 100,000 sweep runs, each plan custom and generic: the expiry index
  // for the walk (index only) and the lag, the primary key for the delete, the runs' partial
  // index for the cursor; no whole scan of a key partition or of the runs.
  it('walks, deletes and measures the lag of short promises by index, on young and large tables', async () => {
    const client = await db.pool.connect();
    const checkPlans = async () => {
      const from = new Date(Date.now() - 3_600_000).toISOString();
      const statements: [string, string, unknown[], RegExp][] = [
        ['walk', shortSweepTexts.walk, [500, from], /expires_at_idx|expiry_idx/],
        ['chunk', shortSweepTexts.chunk, [from, new Date().toISOString(), 86_400], /expires_at_idx|expiry_idx/],
        ['cursor', shortSweepTexts.cursor, [], /^sweep_runs_swept_through_idx$/],
        ['walk lag', walkLagText, [86_400], /expires_at_idx|expiry_idx/],
        ['short policy', shortSweepTexts.shortPolicy, [86_400], /./],
      ];
      for (const mode of ['force_custom_plan', 'force_generic_plan'] as const) {
        for (const [name, text, values, index] of statements) {
          const nodes = await explainPrepared(client, text, values, mode);
          const scans = nodes.filter((node) => /^(idempotency_keys|sweep_runs)/.test(node['Relation Name'] ?? ''));
          expect({ name, mode, seq: scans.filter((node) => node['Node Type'] === 'Seq Scan').map((node) => node['Relation Name']) }).toEqual({ name, mode, seq: [] });
          if (name !== 'short policy') expect({ name, mode, indexed: scans.some((node) => index.test(node['Index Name'] ?? '')) }).toEqual({ name, mode, indexed: true });
        }
      }
    };
    const owner = principal();
    try {
      await checkPlans();
      await db.pool.query(
        `INSERT INTO idempotency_keys (principal_id, service, scope, key, state, fingerprint, correlation_id, created_at, expires_at)
         SELECT $1, 'demo', 'POST /plans', 'p-' || i, 'failed', decode(repeat('ab', 32), 'hex'), gen_random_uuid(), e - interval '2 days', e
         FROM generate_series(1, 200000) AS i,
              LATERAL (SELECT date_trunc('day', now(), 'UTC') + (now() - date_trunc('day', now(), 'UTC')) * (i / 200001.0) AS e) x`,
        [owner],
      );
      await db.pool.query(
        `INSERT INTO sweep_runs (trigger, status, started_at, finished_at, swept_through)
         SELECT 'schedule', 'completed', now() - i * interval '1 minute', now() - i * interval '1 minute', CASE WHEN i % 1000 = 0 THEN now() - i * interval '1 minute' END
         FROM generate_series(1, 100000) AS i`,
      );
      await db.pool.query('ANALYZE idempotency_keys');
      await db.pool.query('ANALYZE sweep_runs');
      await checkPlans();
    } finally {
      await db.pool.query('DELETE FROM idempotency_keys WHERE principal_id = $1', [owner]);
      await db.pool.query("DELETE FROM sweep_runs WHERE trigger = 'schedule' AND started_at < now() - interval '30 seconds' AND chunks = 0");
      client.release();
    }
  });
});
