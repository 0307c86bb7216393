// An orders service that puts its endpoint behind Retrysafe, as an outside team would: only the
// @retrysafe/store tarball and express are installed (and mysql2 for BACKEND=mysql, redis for
// BACKEND=redis). Run with `node server.mjs`.
//   DATABASE_URL              the Retrysafe database (migrated by `npx retrysafe migrate` or the Retrysafe server), required
//   PORT                      default 3100
//   SERVICE                   this service's name on the dashboard, default "orders"
//   IDEMPOTENCY_SECRET        request-fingerprint key (HMAC), at least 16 bytes, required
//   RESPONSE_ENCRYPTION_KEYS  "id:base64key,..." (32-byte keys), the first encrypts, required
//   BACKEND                   where the keys live: "postgres" (default; the order is only answered),
//                             "mysql" (the order row and its key in MySQL/MariaDB, one transaction) or
//                             "redis" (the key in Redis, the order row in Postgres: no shared transaction,
//                             so the order is made idempotent by its key, and a reconciler checks the two agree)
//   MYSQL_URL                 with BACKEND=mysql: mysql://user:password@host:3306/database, the service's own
//                             database, migrated by `npx retrysafe migrate --mysql "$MYSQL_URL"`; required there
//   REDIS_URL                 with BACKEND=redis: redis://host:6379 (noeviction); required there
//   LEASE_MS                  how long an attempt holds its key before a retry may take it over, default 30000
//   RECONCILE_INTERVAL_MS     with BACKEND=redis: how often the reconciler runs, default 60000
// See README.md beside this file.
import { randomUUID } from 'node:crypto';
import express from 'express';
import { createRetrysafe, jsonResult, parseIdempotencyKey } from '@retrysafe/store';
import { idempotent, problemErrors } from '@retrysafe/store/express';

const { DATABASE_URL, PORT = '3100', SERVICE = 'orders', IDEMPOTENCY_SECRET, RESPONSE_ENCRYPTION_KEYS, BACKEND = 'postgres', MYSQL_URL, REDIS_URL } = process.env;
if (BACKEND !== 'postgres' && BACKEND !== 'mysql' && BACKEND !== 'redis') throw new Error(`BACKEND must be postgres, mysql or redis, not ${BACKEND}`);
const required = { DATABASE_URL, IDEMPOTENCY_SECRET, RESPONSE_ENCRYPTION_KEYS, ...(BACKEND === 'mysql' ? { MYSQL_URL } : {}), ...(BACKEND === 'redis' ? { REDIS_URL } : {}) };
for (const [name, value] of Object.entries(required)) {
  if (!value) throw new Error(`${name} is required`);
}

// BACKEND=mysql: the service's own MySQL/MariaDB pool (mysql2, loaded only here), its orders table
// beside Retrysafe's key table, and the same pool for the keys.
const orders = BACKEND === 'mysql' ? await openMysqlOrders(MYSQL_URL) : null;
// BACKEND=redis: the service's own orders table in Postgres (pg comes with @retrysafe/store).
const pgOrders = BACKEND === 'redis' ? await openPostgresOrders(DATABASE_URL) : null;
const milliseconds = (name, fallback) => {
  const value = Number(process.env[name] ?? fallback);
  if (!Number.isSafeInteger(value) || value < 1) throw new Error(`${name} must be a whole number of milliseconds`);
  return value;
};
const leaseMs = milliseconds('LEASE_MS', 30_000);

const HOUR = 3_600_000;
const retrysafe = await createRetrysafe({
  connectionString: DATABASE_URL, // policies, flow metrics, quota and evidence: always Postgres
  ...(orders ? { mysql: { pool: orders.pool } } : {}),
  // The key in Redis, the order in Postgres: the reconciler (one instance at a time) samples the
  // keys and asks the orders table whether each one's order exists; the Retrysafe dashboard shows
  // completed keys without their order, and claims past their lease (with or without one).
  ...(pgOrders
    ? { redis: { url: REDIS_URL, reconcile: { effectExists: (query) => pgOrders.exists(query), intervalMs: milliseconds('RECONCILE_INTERVAL_MS', 60_000), settleMs: 1_000 } } }
    : {}),
  service: SERVICE,
  fingerprintSecret: IDEMPOTENCY_SECRET,
  responseKeys: RESPONSE_ENCRYPTION_KEYS,
  // The published promise: retries are safe for 24 hours; keys are kept 2 hours longer.
  policies: {
    'POST /orders': { scopeMode: 'endpoint', retryWindowMs: 24 * HOUR, retentionMs: 26 * HOUR, leaseMs, lockTimeoutMs: 5_000, maxResponseBytes: 4_096, liveKeyQuota: 100_000 },
  },
});

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
// Any validator with safeParse (zod, valibot...) or a Standard Schema works; this one is by hand.
const order = {
  safeParse(value) {
    const issues = [];
    if (typeof value?.sku !== 'string' || value.sku.length < 1 || value.sku.length > 64) issues.push({ path: ['sku'], message: 'must be 1 to 64 characters' });
    if (!Number.isSafeInteger(value?.quantity) || value.quantity < 1) issues.push({ path: ['quantity'], message: 'must be a positive integer' });
    return issues.length ? { success: false, error: { issues } } : { success: true, data: { sku: value.sku, quantity: value.quantity } };
  },
};

const app = express();
app.post('/orders', express.json({ limit: '16kb' }), idempotent(retrysafe.store, {
  endpoint: 'POST /orders',
  method: 'POST',
  // With MySQL the claim, the order row and the completion commit together (or not at all):
  // `db` is the mysql2 connection of the claim's transaction.
  mode: orders ? 'transactional' : 'claim-first',
  maxBodyBytes: 16_384,
  input: order,
  // A stand-in: `Authorization: Bearer <principal UUID>`. A real service puts its own authentication here.
  authenticate: (req) => {
    const token = /^Bearer (\S+)$/.exec(req.headers.authorization ?? '')?.[1];
    return token && UUID.test(token) ? { principalId: token.toLowerCase() } : null;
  },
  work: async ({ sku, quantity }, principal, { db, correlationId }, req) => {
    if (pgOrders) {
      // Idempotent towards its own table: an attempt that made the order and died before its
      // completion reached Redis leaves the order; the retry that takes the key over answers it.
      const parsed = parseIdempotencyKey(req.get('idempotency-key'));
      if (!parsed.ok) throw new Error(parsed.detail); // the adapter checked it already
      const made = await pgOrders.make({ id: randomUUID(), principalId: principal.principalId, key: parsed.key, correlationId, sku, quantity });
      return jsonResult(201, { id: made.id, sku: made.sku, quantity: made.quantity });
    }
    const id = randomUUID();
    if (orders) await orders.insert(db, { id, principalId: principal.principalId, sku, quantity });
    return jsonResult(201, { id, sku, quantity });
  },
}));
app.use(problemErrors());

const server = app.listen(Number(PORT), '127.0.0.1', () => console.log(`orders service "${SERVICE}" (${BACKEND}) on http://127.0.0.1:${PORT}`));
for (const signal of ['SIGINT', 'SIGTERM']) {
  process.once(signal, () => server.close(() => void retrysafe.stop().then(() => Promise.all([orders?.pool.end(), pgOrders?.pool.end()])).finally(() => process.exit(0))));
}

async function openMysqlOrders(uri) {
  const { default: mysql } = await import('mysql2/promise');
  const { MYSQL_POOL_SETTINGS } = await import('@retrysafe/store/mysql');
  const pool = mysql.createPool({ uri, connectionLimit: 16, connectTimeout: 5_000, ...MYSQL_POOL_SETTINGS });
  // The service's own table; a real service has its own migrations for it.
  await pool.query(
    `CREATE TABLE IF NOT EXISTS orders (
       id CHAR(36) PRIMARY KEY,
       principal_id CHAR(36) NOT NULL,
       sku VARCHAR(64) NOT NULL,
       quantity INT NOT NULL,
       created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
     ) ENGINE = InnoDB`,
  );
  return {
    pool,
    insert: (db, row) => db.execute('INSERT INTO orders (id, principal_id, sku, quantity) VALUES (?, ?, ?, ?)', [row.id, row.principalId, row.sku, row.quantity]),
  };
}

async function openPostgresOrders(connectionString) {
  const { default: pg } = await import('pg');
  const pool = new pg.Pool({ connectionString, max: 8, connectionTimeoutMillis: 5_000, application_name: 'orders-example' });
  // The service's own table (schema orders_example); a real service has its own migrations for it.
  // One order per (principal, idempotency key): the effect itself refuses a second order.
  await pool.query(
    `CREATE SCHEMA IF NOT EXISTS orders_example;
     CREATE TABLE IF NOT EXISTS orders_example.orders (
       id uuid PRIMARY KEY,
       principal_id uuid NOT NULL,
       idempotency_key text NOT NULL,
       correlation_id text NOT NULL UNIQUE,
       sku text NOT NULL,
       quantity integer NOT NULL,
       created_at timestamptz NOT NULL DEFAULT now(),
       UNIQUE (principal_id, idempotency_key)
     )`,
  );
  return {
    pool,
    /** Makes the order, or finds the one an earlier attempt under this key made. */
    async make(row) {
      const inserted = await pool.query(
        `INSERT INTO orders_example.orders (id, principal_id, idempotency_key, correlation_id, sku, quantity) VALUES ($1, $2, $3, $4, $5, $6)
         ON CONFLICT (principal_id, idempotency_key) DO NOTHING RETURNING id, sku, quantity`,
        [row.id, row.principalId, row.key, row.correlationId, row.sku, row.quantity],
      );
      if (inserted.rows[0]) return inserted.rows[0];
      const found = await pool.query('SELECT id, sku, quantity FROM orders_example.orders WHERE principal_id = $1 AND idempotency_key = $2', [row.principalId, row.key]);
      return found.rows[0];
    },
    /**
     * effectExists: the order of this key, by the attempt's correlation id or, after a takeover
     * (a new attempt, a new correlation id, the order found rather than made), by the key.
     */
    async exists({ principalId, key, correlationId }) {
      const { rowCount } = await pool.query('SELECT 1 FROM orders_example.orders WHERE correlation_id = $1 OR (principal_id = $2 AND idempotency_key = $3) LIMIT 1', [correlationId, principalId, key]);
      return rowCount > 0;
    },
  };
}
