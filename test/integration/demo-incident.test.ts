// The incident drill (#31 point 9): `npm run cli -- demo incident KIND --minutes N` stages an
// incident with a tenant of its own, which the real traffic generator (driving the demo API's
// handlers behind a loopback HTTP server, the store recording into the flow tables, on real
// Postgres) picks up and plays: the tenant's requests have the incident's outcomes, the overview's
// checks for that scope pend or fire, and its principals table names the tenant. Bad input is a
// usage error.
import { randomBytes } from 'node:crypto';
import { spawnSync } from 'node:child_process';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import pg from 'pg';
import { FlowRecorder, IdempotencyStore, ResponseKeyRing } from '@retrysafe/store';
import { describe, expect, it } from 'vitest';
import { createDemoApi } from '../../server/demo/api';
import { defaultPolicies, DEMO_SERVICE, paymentsPolicy, PAYMENTS_ENDPOINT, REFUNDS_ENDPOINT } from '../../server/demo/policies';
import { FakeProcessor } from '../../server/demo/processor';
import { TrafficGenerator } from '../../server/demo/traffic';
import { overviewQuery, readOverview, type Overview } from '../../server/metrics/overview';
import { createTestDatabase, useTestDatabase } from '../helpers/database';
import { newResponseKey, sleep } from '../../packages/store/test/helpers/store';

function cli(args: string[], env: Record<string, string>) {
  const result = spawnSync(process.execPath, ['--conditions=retrysafe-source', '--import', 'tsx', 'server/cli/main.ts', ...args], { env: { ...process.env, ...env }, encoding: 'utf8' });
  return { code: result.status, stdout: result.stdout, stderr: result.stderr };
}

interface Staged {
  incident: string;
  tenant: { principalId: string; name: string };
  until: string;
}

function stage(url: string, kind: string, minutes: number): Staged {
  const result = cli(['demo', 'incident', kind, '--minutes', String(minutes)], { DATABASE_URL: url });
  expect(result.stderr).not.toMatch(/error|usage/);
  expect(result.code).toBe(0);
  const lines = result.stdout.trim().split('\n');
  expect(lines).toHaveLength(1);
  const printed = JSON.parse(lines[0] ?? '') as Staged;
  expect(Object.keys(printed).sort()).toEqual(['incident', 'tenant', 'until']);
  expect(printed.incident).toBe(kind);
  expect(printed.tenant.principalId).toMatch(/^[0-9a-f-]{36}$/);
  // No API key is printed: the generator that plays the incident issues itself one.
  expect(result.stdout).not.toContain('rsk_');
  const left = new Date(printed.until).getTime() - Date.now();
  expect(left).toBeGreaterThan((minutes - 1) * 60_000);
  expect(left).toBeLessThanOrEqual(minutes * 60_000 + 5_000);
  return printed;
}

/**
 * The running server's demo, as in demo-traffic-quiet.test.ts: the demo API's handlers behind a
 * loopback server, the recorder flushing every second and the traffic generator, run for `ms`;
 * then the last flush and the overview of the last hour (the same evaluation the page reads).
 */
async function playDemo(pool: pg.Pool, options: { tickMs: number; ms: number }): Promise<Overview> {
  const recorder = new FlowRecorder(pool, { flushIntervalMs: 1_000 });
  const store = new IdempotencyStore({ pool, service: DEMO_SERVICE, fingerprintSecret: randomBytes(32), keyRing: new ResponseKeyRing([newResponseKey()]), observer: recorder });
  const policyFor = (endpoint: string) => defaultPolicies[endpoint] ?? paymentsPolicy;
  const api = createDemoApi({ store, pool, processor: new FakeProcessor({ latencyMs: 40, failureRate: 0.02 }), policyFor });
  const server: Server = createServer((incoming, outgoing) => {
    const chunks: Buffer[] = [];
    incoming.on('data', (chunk: Buffer) => chunks.push(chunk));
    incoming.on('end', () => {
      const request = new Request(`http://127.0.0.1${incoming.url ?? '/'}`, {
        method: incoming.method ?? 'GET',
        headers: Object.entries(incoming.headers).flatMap(([name, value]) => (typeof value === 'string' ? [[name, value] as [string, string]] : [])),
        body: Buffer.concat(chunks),
      });
      const handler = incoming.url === '/api/v1/refunds' ? api.refunds : api.payments;
      void handler(request).then(async (response) => {
        outgoing.writeHead(response.status, Object.fromEntries(response.headers));
        outgoing.end(Buffer.from(await response.arrayBuffer()));
      });
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  recorder.start();
  const traffic = new TrafficGenerator({ baseUrl: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, pool, store, policyFor, tickMs: options.tickMs, incidentPollMs: 1_000 });
  try {
    await traffic.start();
    await sleep(options.ms);
  } finally {
    traffic.stop();
    // The held slow claims and their retries end within the lock timeout and a bit.
    await sleep(8_000);
    await recorder.stop();
    await new Promise((resolve) => server.close(resolve));
  }
  return readOverview(pool, overviewQuery.parse({ range: '1h' }), undefined, 3_600);
}

/** The tenant's outcomes per scope, as the recorder's principal counters hold them. */
async function outcomesOf(pool: pg.Pool, principalId: string): Promise<Record<string, Record<string, number>>> {
  const { rows } = await pool.query<{ scope: string; outcome: string; count: string }>(
    `SELECT scope, outcome, sum(count) AS count FROM principal_flow_minute WHERE principal_id = $1 AND service = $2 AND scope <> '*' GROUP BY scope, outcome`,
    [principalId, DEMO_SERVICE],
  );
  const outcomes: Record<string, Record<string, number>> = {};
  for (const row of rows) (outcomes[row.scope] ??= {})[row.outcome] = Number(row.count);
  return outcomes;
}

function notOk(overview: Overview, name: string, scope: string) {
  return overview.checks.find((check) => check.name === name && check.scope === scope && (check.state === 'pending' || check.state === 'firing'));
}

describe('npm run cli -- demo incident', () => {
  const db = useTestDatabase();

  it('refuses an unknown incident, minutes outside 1..60 and a missing --minutes as usage errors, staging nothing', async () => {
    for (const [args, message] of [
      [['demo', 'incident', 'meteor-strike', '--minutes', '5'], /incident meteor-strike must be one of noisy-tenant, key-reuse, slow-claims/],
      [['demo', 'incident', 'noisy-tenant', '--minutes', '0'], /--minutes 0 must be 1 to 60/],
      [['demo', 'incident', 'noisy-tenant', '--minutes', '61'], /--minutes 61 must be 1 to 60/],
      [['demo', 'incident', 'key-reuse', '--minutes', '1.5'], /--minutes 1.5 must be a whole number/],
      [['demo', 'incident', 'slow-claims'], /--minutes is required/],
      [['demo', 'incident', 'slow-claims', '--hours', '1'], /unexpected argument --hours/],
      [['demo', 'outage'], /usage: demo incident noisy-tenant\|key-reuse\|slow-claims --minutes N/],
    ] as const) {
      const result = cli([...args], { DATABASE_URL: db.url });
      expect(result.code, args.join(' ')).toBe(2);
      expect(result.stdout).toBe('');
      expect(result.stderr).toMatch(message);
    }
    const { rows } = await db.pool.query<{ n: string }>('SELECT count(*) AS n FROM demo_incidents');
    expect(Number(rows[0]?.n)).toBe(0);
  });

  it('noisy-tenant: its tenant double-submits refunds and reuses payment keys; conflict and mismatch checks pend or fire, naming it', { timeout: 120_000 }, async () => {
    const staged = stage(db.url, 'noisy-tenant', 5);
    expect(staged.tenant.name).toBe('Drill: noisy tenant');
    // Five times the server's pace, as the quiet demo's test runs it.
    const overview = await playDemo(db.pool, { tickMs: 50, ms: 25_000 });

    const outcomes = await outcomesOf(db.pool, staged.tenant.principalId);
    expect(outcomes[REFUNDS_ENDPOINT]?.conflict ?? 0).toBeGreaterThan(20);
    expect(outcomes[PAYMENTS_ENDPOINT]?.mismatch ?? 0).toBeGreaterThan(20);
    expect(notOk(overview, 'conflict_rate', REFUNDS_ENDPOINT), JSON.stringify(overview.checks)).toBeDefined();
    expect(notOk(overview, 'mismatch_rate', PAYMENTS_ENDPOINT), JSON.stringify(overview.checks)).toBeDefined();
    // The principals behind the trouble: the drill's tenant first, by name.
    expect(overview.principals.principals[0]).toMatchObject({ principalId: staged.tenant.principalId, name: 'Drill: noisy tenant' });
  });

  it('key-reuse and slow-claims: 422s on payments, and claims held past the lock timeout; mismatch and claim p99 checks pend or fire, naming each tenant', { timeout: 150_000 }, async () => {
    // A database of its own: the noisy tenant's minutes would explain any check here.
    const other = await createTestDatabase();
    const pool = new pg.Pool({ connectionString: other.url, max: 40 });
    try {
      const reuse = stage(other.url, 'key-reuse', 2);
      const slow = stage(other.url, 'slow-claims', 2);
      expect(reuse.tenant.name).toBe('Drill: key reuse');
      expect(slow.tenant.name).toBe('Drill: slow claims');
      // The server's own pace: a held claim's slow replay is a share of the payments' minute.
      const overview = await playDemo(pool, { tickMs: 250, ms: 30_000 });

      const reused = await outcomesOf(pool, reuse.tenant.principalId);
      expect(reused[PAYMENTS_ENDPOINT]?.mismatch ?? 0).toBeGreaterThan(10);
      expect(reused[PAYMENTS_ENDPOINT]?.conflict ?? 0).toBe(0);
      // Each held claim's first retry waited the lock timeout out: a 409 of the slow tenant's.
      const slowed = await outcomesOf(pool, slow.tenant.principalId);
      expect(slowed[PAYMENTS_ENDPOINT]?.conflict ?? 0).toBeGreaterThanOrEqual(2);
      expect(slowed[PAYMENTS_ENDPOINT]?.mismatch ?? 0).toBe(0);
      // Its second retry waited seconds for the held claim and was replayed.
      const { rows } = await pool.query<{ n: string }>("SELECT count(*) AS n FROM idempotency_keys WHERE principal_id = $1 AND key LIKE 'drill-slow-%' AND state = 'completed'", [slow.tenant.principalId]);
      expect(Number(rows[0]?.n)).toBeGreaterThanOrEqual(2);

      expect(notOk(overview, 'mismatch_rate', PAYMENTS_ENDPOINT), JSON.stringify(overview.checks)).toBeDefined();
      const p99 = notOk(overview, 'claim_p99', PAYMENTS_ENDPOINT);
      expect(p99, JSON.stringify(overview.checks)).toBeDefined();
      expect(p99?.value).toMatch(/^\d+ ms/);
      expect(Number.parseInt(p99?.value ?? '0', 10)).toBeGreaterThan(1_000);
      const named = overview.principals.principals.map((principal) => principal.name);
      expect(named).toEqual(expect.arrayContaining(['Drill: key reuse', 'Drill: slow claims']));
    } finally {
      await pool.end();
      await other.drop();
    }
  });
});
