// Rows and stored response bytes per scope: exact when the sample covers the table, and an
// unbiased estimate from a page sample when it does not; the sampler stores them beside its
// minute, and the latest sample is read back through the primary key. Both layouts.
import { describe, expect, it } from 'vitest';
import { readLatestScopeFigures, sampleScopeFigures } from '../../server/metrics/scope-sample';
import { sampleStoreStats } from '../../server/metrics/sampler';
import { readStoreFigures } from '../../server/metrics/store-figures';
import { layouts, useTestDatabase } from '../helpers/database';

const ROWS = 20_000;

describe.each(layouts)('per-scope store figures (%s layout)', (layout) => {
  const db = useTestDatabase(layout);

  it('counts rows and response bytes per scope exactly when the table is small enough to read whole', async () => {
    // Interleaved scopes, so every page holds both: the demo's payments store 100-byte bodies, the
    // orders service's refunds 1,000-byte ones, and every tenth refund is a reference (no body).
    await db.pool.query(
      `INSERT INTO idempotency_keys (principal_id, service, scope, key, state, fingerprint, correlation_id, response_status,
         response_content_type, response_body, response_key_id, response_ref, completed_at, expires_at)
       SELECT gen_random_uuid(), CASE WHEN i % 2 = 0 THEN 'demo' ELSE 'orders' END,
              CASE WHEN i % 2 = 0 THEN 'POST /payments' ELSE 'POST /refunds' END, 'k' || i, 'completed',
              sha256(i::text::bytea), gen_random_uuid(), 201, 'application/json',
              CASE WHEN i % 2 = 0 THEN decode(repeat('ab', 100), 'hex') WHEN i % 20 = 1 THEN NULL ELSE decode(repeat('cd', 1000), 'hex') END,
              CASE WHEN i % 2 = 0 OR i % 20 <> 1 THEN 'k1' END,
              CASE WHEN i % 20 = 1 THEN 'ref-' || i END,
              now(), now() + interval '1 day' + (i % 3) * interval '1 day'
       FROM generate_series(1, $1::int) AS i`,
      [ROWS],
    );
    await db.pool.query('ANALYZE idempotency_keys');
    const figures = await readStoreFigures(db.pool);
    const exact = await sampleScopeFigures(db.pool, figures.tableBytes, 1_000_000);
    expect(exact).toEqual([
      { service: 'demo', scope: 'POST /payments', estimatedRows: ROWS / 2, responseBytes: (ROWS / 2) * 100, sampledFraction: 1 },
      { service: 'orders', scope: 'POST /refunds', estimatedRows: ROWS / 2, responseBytes: (ROWS / 2 - ROWS / 20) * 1000, sampledFraction: 1 },
    ]);
  });

  it('estimates them from a fraction of the pages within a quarter of the truth', async () => {
    const figures = await readStoreFigures(db.pool);
    const pages = Math.ceil(figures.tableBytes / 8192);
    expect(pages).toBeGreaterThan(400);
    const sampled = await sampleScopeFigures(db.pool, figures.tableBytes, Math.round(pages / 4));
    expect(sampled.map((figure) => [figure.service, figure.scope])).toEqual([
      ['demo', 'POST /payments'],
      ['orders', 'POST /refunds'],
    ]);
    const [payments, refunds] = sampled;
    expect(payments?.sampledFraction).toBeGreaterThan(0.2);
    expect(payments?.sampledFraction).toBeLessThan(0.3);
    expect(payments?.estimatedRows).toBeGreaterThan(0.75 * (ROWS / 2));
    expect(payments?.estimatedRows).toBeLessThan(1.25 * (ROWS / 2));
    expect(payments?.responseBytes).toBeGreaterThan(0.75 * (ROWS / 2) * 100);
    expect(payments?.responseBytes).toBeLessThan(1.25 * (ROWS / 2) * 100);
    expect(refunds?.responseBytes).toBeGreaterThan(0.75 * 9_000_000);
    expect(refunds?.responseBytes).toBeLessThan(1.25 * 9_000_000);
  });

  it('is stored with the minute sample and read back as the latest one', async () => {
    const sample = await sampleStoreStats(db.pool);
    expect(sample?.scopes.map((scope) => [scope.service, scope.scope])).toEqual([
      ['demo', 'POST /payments'],
      ['orders', 'POST /refunds'],
    ]);
    await db.pool.query(
      `INSERT INTO store_stats_scopes (sampled_at, service, scope, estimated_rows, response_bytes, sampled_fraction)
       VALUES (date_trunc('minute', now()) - interval '1 hour', 'demo', 'POST /payments', 1, 1, 1)`,
    );
    const latest = await readLatestScopeFigures(db.pool);
    expect(latest.map((figure) => [figure.service, figure.scope, figure.sampledAt.getTime()])).toEqual([
      ['demo', 'POST /payments', sample?.sampledAt.getTime()],
      ['orders', 'POST /refunds', sample?.sampledAt.getTime()],
    ]);
    const earlier = await readLatestScopeFigures(db.pool, new Date(Date.now() - 30 * 60_000));
    expect(earlier).toEqual([{ sampledAt: expect.any(Date) as Date, service: 'demo', scope: 'POST /payments', estimatedRows: 1, responseBytes: 1, sampledFraction: 1 }]);
  });
});
