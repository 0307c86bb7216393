// The dashboard on a hot standby (DASHBOARD_READ_URL), against a real streaming replica
// (test/helpers/replica.ts: a primary of its own and `pg_basebackup -R`): its reads go to the
// standby (a key the primary has and the paused standby has not replayed is not found, and the
// connections are on the standby), every write goes to the primary (the lookup's audit row), a
// lookup whose audit write fails returns nothing, the overview and /api/metrics show the
// standby's lag and alert over the threshold, and a read URL that is not a standby is refused in
// one line naming DASHBOARD_READ_URL.
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { migrateDatabase } from '../../db/migrate';
import { DASHBOARD_LOGIN, DASHBOARD_ROLE, ensureDashboardLogin } from '../../db/dashboard-access';
import { checkReadReplica, createDashboardPools, createReplicaLagReader, DASHBOARD_READ_APPLICATION, dashboardReadUrl, type DashboardPools } from '../../server/dashboard-pools';
import { lookUpKey } from '../../server/idempotency/key-metadata';
import { releaseStaleClaim } from '../../server/retention/stale-claims';
import { exportAudit } from '../../server/audit/export';
import { exportRetention } from '../../server/retention/export';
import { ensurePolicies } from '../../server/retention/policies';
import { DEMO_SERVICE, defaultPolicyFields, PAYMENTS_ENDPOINT } from '../../server/demo/policies';
import { readOverview } from '../../server/metrics/overview';
import { thresholdsWith } from '../../server/metrics/alerts';
import { createPrometheusMetrics } from '../../server/metrics/prometheus';
import { readReplicaLag } from '../../server/metrics/replica-lag';
import { findReplicaBinaries, startStreamingReplica, type StreamingReplica } from '../helpers/replica';
import { createTestStore, jsonResult, principal, testPolicy } from '../../packages/store/test/helpers/store';
import { withDatabase } from '../../packages/store/test/helpers/database-url';
import { testSecrets } from '../helpers/server';
import { readEnvironment } from '../../server/config';
import { createServerRuntime } from '../../server/runtime';
import { createOperatorAuth } from '../../server/auth/operator-auth';

const binaries = findReplicaBinaries();
if (!('dir' in binaries)) process.stdout.write(`SKIPPED: the dashboard-on-a-standby tests need PostgreSQL's binaries: ${binaries.missing}\n`);

describe.skipIf(!('dir' in binaries))('the dashboard on a hot standby', () => {
  let replica: StreamingReplica;
  let owner: pg.Pool;
  let ownerStandby: pg.Pool;
  let dashboardUrl: string;
  let pools: DashboardPools;
  // What beforeAll got to start, for afterAll to stop (it may have failed half-way).
  const started: { pools?: DashboardPools; owner?: pg.Pool; ownerStandby?: pg.Pool; replica?: StreamingReplica } = {};
  let store: ReturnType<typeof createTestStore>['store'];
  const tenant = principal();
  const standbyAddress = () => `postgres://127.0.0.1:${replica.replicaPort}`;
  let primaryOwnerUrl = '';
  const ownerUrl = () => primaryOwnerUrl;

  const use = (key: string) =>
    store.execute({
      principalId: tenant,
      key,
      endpoint: PAYMENTS_ENDPOINT,
      method: 'POST',
      body: { amount: 100 },
      policy: testPolicy,
      mode: 'claim-first',
      work: () => Promise.resolve(jsonResult(201, { id: key })),
    });
  const auditReasons = async (db: pg.Pool) =>
    (await db.query<{ reason: string }>("SELECT reason FROM retrysafe_server.audit_log WHERE action = 'key.lookup' ORDER BY id")).rows.map((row) => row.reason);

  beforeAll(async () => {
    if (!('dir' in binaries)) return;
    replica = started.replica = await startStreamingReplica(binaries);
    const admin = new pg.Client({ connectionString: replica.primaryAdminUrl });
    await admin.connect();
    await admin.query('CREATE DATABASE retrysafe');
    const ownerUrl = withDatabase(replica.primaryAdminUrl, 'retrysafe');
    primaryOwnerUrl = ownerUrl;
    await migrateDatabase(ownerUrl);
    dashboardUrl = await ensureDashboardLogin(admin, ownerUrl, 'dashboard-password-for-the-standby');
    await admin.end();
    owner = started.owner = new pg.Pool({ connectionString: ownerUrl, max: 4, options: '-c search_path=retrysafe,retrysafe_demo,retrysafe_server' });
    ownerStandby = started.ownerStandby = new pg.Pool({ connectionString: withDatabase(replica.replicaAdminUrl, 'retrysafe'), max: 2 });
    // The last test stops the primary: its idle connections' termination is expected there.
    for (const pool of [owner, ownerStandby]) pool.on('error', () => undefined);
    await ensurePolicies(owner, DEMO_SERVICE, defaultPolicyFields, 'test');
    store = createTestStore(owner).store;
    await use('seen-by-both');
    await replica.waitForReplay();
    // The standby given by its address alone: the dashboard's role and database are inherited.
    pools = started.pools = createDashboardPools({ databaseUrl: dashboardUrl, readUrl: standbyAddress() });
  });
  afterAll(async () => {
    await started.pools?.end();
    await started.owner?.end();
    await started.ownerStandby?.end();
    await started.replica?.stop();
  });

  it('reads key records on the standby and writes the lookup\'s audit row on the primary', async () => {
    expect(await lookUpKey(pools.keys, { principalId: tenant, key: 'seen-by-both', reason: 'replicated key' }, 'ops@example.com')).toHaveLength(1);
    await replica.pauseReplay();
    try {
      await use('primary-only');
      expect((await owner.query("SELECT 1 FROM idempotency_keys WHERE key = 'primary-only'")).rowCount).toBe(1);
      // The standby has not replayed the key: the dashboard does not see it, so it read there.
      expect(await lookUpKey(pools.keys, { principalId: tenant, key: 'primary-only', reason: 'while replay is paused' }, 'ops@example.com')).toEqual([]);
      // Its audit row is on the primary, and not (yet) on the paused standby: it was written there.
      expect(await auditReasons(owner)).toEqual(['replicated key', 'while replay is paused']);
      expect(await auditReasons(ownerStandby)).not.toContain('while replay is paused');
      const { rows: details } = await owner.query<{ details: unknown }>("SELECT details FROM audit_log WHERE reason = 'while replay is paused'");
      expect(details[0]?.details).toEqual({ records: 0, attempts: 0 });
      // The dashboard's read connections are the standby's, as its role; the primary has none.
      const application = async (db: pg.Pool) =>
        (await db.query<{ usename: string }>('SELECT usename FROM pg_stat_activity WHERE application_name = $1', [DASHBOARD_READ_APPLICATION])).rows.map((row) => row.usename);
      expect(new Set(await application(ownerStandby))).toEqual(new Set([DASHBOARD_LOGIN]));
      expect(await application(owner)).toEqual([]);
    } finally {
      await replica.resumeReplay();
    }
    await replica.waitForReplay();
    expect(await lookUpKey(pools.keys, { principalId: tenant, key: 'primary-only', reason: 'after replay' }, 'ops@example.com')).toHaveLength(1);
  });

  it('lists stale claims from the standby and releases one on the primary', async () => {
    await owner.query(
      `INSERT INTO idempotency_keys (principal_id, service, scope, key, state, fingerprint, correlation_id, lease_expires_at, expires_at)
       VALUES ($1, 'demo', 'POST /a', 'crashed-1', 'in_progress', decode(repeat('ab', 32), 'hex'), gen_random_uuid(), now() - interval '1 minute', now() + interval '1 day')`,
      [tenant],
    );
    await replica.waitForReplay();
    const id = { principalId: tenant, service: DEMO_SERVICE, scope: 'POST /a', key: 'crashed-1' };
    expect((await pools.keys.reads.staleClaims(10)).map((claim) => claim.key)).toEqual(['crashed-1']);
    await releaseStaleClaim(pools.keys, id, 'ops@example.com', 'processor confirmed failure');
    expect((await owner.query<{ state: string }>("SELECT state FROM idempotency_keys WHERE key = 'crashed-1'")).rows[0]?.state).toBe('failed');
    expect((await owner.query("SELECT 1 FROM audit_log WHERE action = 'stale_claim.release'")).rowCount).toBe(1);
  });

  it('shows the standby\'s lag on the overview and in /api/metrics, and alerts over the threshold', async () => {
    const thresholds = thresholdsWith({ replicaLagSeconds: 1 });
    const metrics = createPrometheusMetrics(owner, thresholds, { replicaLag: pools.replicaLag });
    await expect.poll(async () => (await readReplicaLag(pools.pool, pools.readPool)).bytes, { timeout: 10_000 }).toBe(0);
    const caughtUp = await readOverview(pools.readPool, { range: '1h' }, thresholds, 60, { replicaLag: pools.replicaLag });
    expect(caughtUp.replica).toMatchObject({ inRecovery: true, replayPaused: false, bytes: 0, seconds: 0, thresholdSeconds: 1 });
    expect(caughtUp.checks.find((check) => check.name === 'replica_lag')).toMatchObject({ firing: false, value: 'caught up' });

    await replica.pauseReplay();
    try {
      await use('while-paused');
      // The standby's last replayed commit is now over the 1 s threshold old, and it is behind.
      await new Promise((done) => setTimeout(done, 1_500));
      const behind = await readOverview(pools.readPool, { range: '1h' }, thresholds, 60, { replicaLag: pools.replicaLag });
      expect(behind.replica).toMatchObject({ inRecovery: true, replayPaused: true });
      expect(behind.replica?.bytes).toBeGreaterThan(0);
      expect(behind.replica?.seconds).toBeGreaterThan(1);
      expect(behind.alerts.map((alert) => alert.name)).toContain('replica_lag');
      expect(behind.checks.find((check) => check.name === 'replica_lag')).toMatchObject({ firing: true, severity: 'warning', storeWide: true });
      const text = await metrics.registry.metrics();
      expect(text).toMatch(/^retrysafe_dashboard_replica_lag_seconds \d+(\.\d+)?$/m);
      expect(Number(/^retrysafe_dashboard_replica_lag_seconds (\S+)$/m.exec(text)?.[1])).toBeGreaterThan(1);
      expect(Number(/^retrysafe_dashboard_replica_lag_bytes (\S+)$/m.exec(text)?.[1])).toBeGreaterThan(0);
      expect(text).toMatch(/^retrysafe_dashboard_replica_in_recovery 1$/m);
      expect(text).toContain('retrysafe_alert_firing{name="replica_lag",severity="warning"} 1');
      // The server's own reader (server/runtime-services.ts) from the environment, on the owner's pool.
      const reader = createReplicaLagReader({ DASHBOARD_READ_URL: standbyAddress(), DASHBOARD_DATABASE_URL: dashboardUrl }, owner);
      try {
        expect(await reader?.read()).toMatchObject({ inRecovery: true, replayPaused: true });
      } finally {
        await reader?.end();
      }
    } finally {
      await replica.resumeReplay();
    }
    await replica.waitForReplay();
    await expect.poll(async () => (await readReplicaLag(pools.pool, pools.readPool)).seconds, { timeout: 10_000 }).toBe(0);
  });

  it('the server runtime closes its pools on the standby too: none left there or on the primary after stop()', async () => {
    // Every pool of the server names itself retrysafe-*; so does this file's own `pools` (the
    // dashboard's, made in beforeAll), whose connections are told apart as those open before.
    const backends = async (db: pg.Pool) =>
      (
        await db.query<{ pid: number; name: string }>("SELECT pid, application_name AS name FROM pg_stat_activity WHERE datname = 'retrysafe' AND application_name LIKE 'retrysafe-%'")
      ).rows;
    const before = new Set([...(await backends(owner)), ...(await backends(ownerStandby))].map((backend) => backend.pid));
    const serverConnections = async (db: pg.Pool) => {
      const counts: Record<string, number> = {};
      for (const backend of await backends(db)) if (!before.has(backend.pid)) counts[backend.name] = (counts[backend.name] ?? 0) + 1;
      return Object.fromEntries(Object.entries(counts).sort(([a], [b]) => a.localeCompare(b)));
    };
    const runtime = createServerRuntime({
      environment: readEnvironment({ NODE_ENV: 'test', ...testSecrets, DATABASE_URL: ownerUrl(), DASHBOARD_DATABASE_URL: dashboardUrl, DASHBOARD_READ_URL: standbyAddress(), DEMO_TRAFFIC: '0' }),
      operatorAuth: (pool, settings) => createOperatorAuth({ pool, secret: settings.authSecret, baseURL: settings.publicUrl }),
    });
    try {
      // The standby's lag for /api/metrics (its own pool there) and the dashboard's reads there.
      const services = await runtime.services();
      expect(await services.prometheus.registry.metrics()).toMatch(/^retrysafe_dashboard_replica_in_recovery 1$/m);
      await runtime.dashboard().pools.readPool.query('SELECT 1');
      await runtime.dashboard().pools.pool.query('SELECT 1');
      expect(Object.keys(await serverConnections(ownerStandby))).toEqual([DASHBOARD_READ_APPLICATION, 'retrysafe-metrics-standby']);
      expect(Object.keys(await serverConnections(owner))).toEqual(expect.arrayContaining(['retrysafe-app', 'retrysafe-dashboard', 'retrysafe-store']));
    } finally {
      await runtime.stop();
    }
    for (const db of [owner, ownerStandby]) await expect.poll(() => serverConnections(db), { timeout: 5_000 }).toEqual({});
  });

  it('refuses a read URL that is not a standby in one line naming DASHBOARD_READ_URL, at once', async () => {
    await expect(checkReadReplica(standbyAddress(), dashboardUrl)).resolves.toBeUndefined();
    const started = Date.now();
    const primaryAddress = `postgres://127.0.0.1:${replica.primaryPort}`;
    const refusal = await checkReadReplica(primaryAddress, dashboardUrl).then(() => null, (error: unknown) => error as Error);
    expect(refusal?.message).toMatch(/^DASHBOARD_READ_URL \(127\.0\.0\.1:\d+\/retrysafe\) is not in recovery: it must be a hot standby of the primary/);
    expect(refusal?.message).not.toContain('\n');
    expect(refusal?.message).not.toContain('dashboard-password');
    // A role on the standby that may read response bodies (the owner's) is refused too.
    const asOwner = new URL(standbyAddress());
    asOwner.username = 'postgres';
    asOwner.password = replica.password;
    await expect(checkReadReplica(asOwner.toString(), dashboardUrl)).rejects.toThrow(/^DASHBOARD_READ_URL \(.*\): its role may select response bodies/);
    // Nothing listening: the same one line, not a long wait.
    const closed = `postgres://127.0.0.1:1`;
    await expect(checkReadReplica(closed, dashboardUrl)).rejects.toThrow(/^DASHBOARD_READ_URL \(127\.0\.0\.1:1\/retrysafe\): cannot reach the standby/);
    expect(Date.now() - started).toBeLessThan(10_000);
    // The read URL inherits the dashboard's credentials and database only when it names none.
    expect(new URL(dashboardReadUrl('postgres://reader:pw@standby:5433/other', dashboardUrl)).username).toBe('reader');
    expect(new URL(dashboardReadUrl('postgres://standby:5433', dashboardUrl)).username).toBe(DASHBOARD_LOGIN);
  });

  it('stops `npm start` at once on a read URL that is not a standby, with that one line last', async () => {
    const started = Date.now();
    const child = spawn(process.execPath, ['--conditions=retrysafe-source', '--import', 'tsx', 'scripts/start.ts'], {
      env: {
        ...process.env,
        DATABASE_URL: withDatabase(replica.primaryAdminUrl, 'retrysafe'),
        DASHBOARD_DATABASE_URL: dashboardUrl,
        DASHBOARD_READ_URL: `postgres://127.0.0.1:${replica.primaryPort}`,
        AUTH_SECRET: randomBytes(32).toString('hex'),
        IDEMPOTENCY_SECRET: randomBytes(32).toString('hex'),
        RESPONSE_ENCRYPTION_KEYS: `k1:${randomBytes(32).toString('base64')}`,
        DEMO_TRAFFIC: '0',
        PORT: '1',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
    const code = await new Promise<number | null>((done) => child.once('exit', done));
    const lines = output.trim().split('\n');
    expect(code, output).toBe(1);
    expect(lines.at(-2)).toMatch(/^\[retrysafe\] Start failed: DASHBOARD_READ_URL \(127\.0\.0\.1:\d+\/retrysafe\) is not in recovery: it must be a hot standby of the primary/);
    expect(lines.at(-1)).toBe('[retrysafe] Stopped');
    expect(output).not.toContain('Starting the server');
    expect(Date.now() - started).toBeLessThan(25_000);
  });

  it('exports the audit log and the retention review from the standby, audits each on the primary, and returns nothing when that audit row cannot be written', async () => {
    const exportPools = { read: pools.readPool, write: pools.pool };
    const exportRows = async (db: pg.Pool) => Number((await db.query<{ n: string }>("SELECT count(*) AS n FROM retrysafe_server.audit_log WHERE action IN ('audit.export', 'retention.export')")).rows[0]?.n);
    await replica.waitForReplay();
    await replica.pauseReplay();
    try {
      // Written on the primary while the standby does not replay: an audit row and a new service's policies.
      expect(await lookUpKey(pools.keys, { principalId: tenant, key: 'seen-by-both', reason: 'primary only, for the export' }, 'ops@example.com')).toHaveLength(1);
      await ensurePolicies(owner, 'exports-primary-only', defaultPolicyFields, 'test');
      const exportsBefore = await exportRows(owner);
      // Read on the standby: neither is in the exports.
      const auditCsv = await exportAudit(exportPools, 'compliance@example.com', { limit: 100 });
      expect(auditCsv).toContain('replicated key');
      expect(auditCsv).not.toContain('primary only, for the export');
      expect(await exportRetention(exportPools, 'compliance@example.com', 'history')).not.toContain('exports-primary-only');
      await expect(exportRetention(exportPools, 'compliance@example.com', 'policies', 'exports-primary-only')).rejects.toMatchObject({ code: 'UNKNOWN_SERVICE' });
      // Each export that returned was audited on the primary (the paused standby has not seen it).
      expect(await exportRows(owner)).toBe(exportsBefore + 2);
      expect(await exportRows(ownerStandby)).toBe(0);
    } finally {
      await replica.resumeReplay();
    }
    await replica.waitForReplay();
    expect(await exportRetention(exportPools, 'compliance@example.com', 'policies', 'exports-primary-only')).toContain('exports-primary-only');
    // The audit insert refused by the primary: the export returns nothing.
    await owner.query(`REVOKE INSERT ON retrysafe_server.audit_log FROM ${DASHBOARD_ROLE}`);
    try {
      await expect(exportAudit(exportPools, 'compliance@example.com', { limit: 100 })).rejects.toMatchObject({ code: '42501' });
      await expect(exportRetention(exportPools, 'compliance@example.com', 'evidence')).rejects.toMatchObject({ code: '42501' });
    } finally {
      await owner.query(`GRANT INSERT ON retrysafe_server.audit_log TO ${DASHBOARD_ROLE}`);
    }
  });

  it('returns nothing when the lookup\'s audit row cannot be written on the primary', async () => {
    const lookup = { principalId: tenant, key: 'seen-by-both', reason: 'audit refused' };
    // The audit insert refused by the primary (the dashboard role's grant taken away).
    await owner.query(`REVOKE INSERT ON retrysafe_server.audit_log FROM ${DASHBOARD_ROLE}`);
    try {
      await expect(lookUpKey(pools.keys, lookup, 'ops@example.com')).rejects.toMatchObject({ code: '42501' });
    } finally {
      await owner.query(`GRANT INSERT ON retrysafe_server.audit_log TO ${DASHBOARD_ROLE}`);
    }
    // The primary gone: the standby still answers its reads, but the lookup answers nothing.
    await replica.stopPrimary();
    expect(await pools.keys.reads.keyRecords({ principalId: tenant, key: 'seen-by-both' })).toHaveLength(1);
    await expect(lookUpKey(pools.keys, { ...lookup, reason: 'primary down' }, 'ops@example.com')).rejects.toThrow();
  });
});
