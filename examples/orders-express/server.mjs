// An orders service that puts its endpoint behind Retrysafe, as an outside team would: only the
// @retrysafe/store tarball and express are installed (and mysql2 for BACKEND=mysql). Run with `node server.mjs`.
//   DATABASE_URL              the Retrysafe database (migrated by `npx retrysafe migrate` or the Retrysafe server), required
//   PORT                      default 3100
//   SERVICE                   this service's name on the dashboard, default "orders"
//   IDEMPOTENCY_SECRET        request-fingerprint key (HMAC), at least 16 bytes, required
//   RESPONSE_ENCRYPTION_KEYS  "id:base64key,..." (32-byte keys), the first encrypts, required
//   BACKEND                   where the keys live: "postgres" (default; the order is only answered) or
//                             "mysql" (the order row and its key in MySQL/MariaDB, one transaction)
//   MYSQL_URL                 with BACKEND=mysql: mysql://user:password@host:3306/database, the service's own
//                             database, migrated by `npx retrysafe migrate --mysql "$MYSQL_URL"`; required there
// See README.md beside this file.
import { randomUUID } from 'node:crypto';
import express from 'express';
import { createRetrysafe, jsonResult } from '@retrysafe/store';
import { idempotent, problemErrors } from '@retrysafe/store/express';

const { DATABASE_URL, PORT = '3100', SERVICE = 'orders', IDEMPOTENCY_SECRET, RESPONSE_ENCRYPTION_KEYS, BACKEND = 'postgres', MYSQL_URL } = process.env;
if (BACKEND !== 'postgres' && BACKEND !== 'mysql') throw new Error(`BACKEND must be postgres or mysql, not ${BACKEND}`);
const required = { DATABASE_URL, IDEMPOTENCY_SECRET, RESPONSE_ENCRYPTION_KEYS, ...(BACKEND === 'mysql' ? { MYSQL_URL } : {}) };
for (const [name, value] of Object.entries(required)) {
  if (!value) throw new Error(`${name} is required`);
}

// BACKEND=mysql: the service's own MySQL/MariaDB pool (mysql2, loaded only here), its orders table
// beside Retrysafe's key table, and the same pool for the keys.
const orders = BACKEND === 'mysql' ? await openMysqlOrders(MYSQL_URL) : null;

const HOUR = 3_600_000;
const retrysafe = await createRetrysafe({
  connectionString: DATABASE_URL, // policies, flow metrics, quota and evidence: always Postgres
  ...(orders ? { mysql: { pool: orders.pool } } : {}),
  service: SERVICE,
  fingerprintSecret: IDEMPOTENCY_SECRET,
  responseKeys: RESPONSE_ENCRYPTION_KEYS,
  // The published promise: retries are safe for 24 hours; keys are kept 2 hours longer.
  policies: {
    'POST /orders': { scopeMode: 'endpoint', retryWindowMs: 24 * HOUR, retentionMs: 26 * HOUR, leaseMs: 30_000, lockTimeoutMs: 5_000, maxResponseBytes: 4_096, liveKeyQuota: 100_000 },
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
  work: async ({ sku, quantity }, principal, { db }) => {
    const id = randomUUID();
    if (orders) await orders.insert(db, { id, principalId: principal.principalId, sku, quantity });
    return jsonResult(201, { id, sku, quantity });
  },
}));
app.use(problemErrors());

const server = app.listen(Number(PORT), '127.0.0.1', () => console.log(`orders service "${SERVICE}" (${BACKEND}) on http://127.0.0.1:${PORT}`));
for (const signal of ['SIGINT', 'SIGTERM']) {
  process.once(signal, () => server.close(() => void retrysafe.stop().then(() => orders?.pool.end()).finally(() => process.exit(0))));
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
