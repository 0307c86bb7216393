// An orders service that puts its endpoint behind Retrysafe, as an outside team would: only the
// @retrysafe/store tarball and express are installed. Run with `node server.mjs`.
//   DATABASE_URL              the Retrysafe database (migrated by `npx retrysafe migrate` or the Retrysafe server), required
//   PORT                      default 3100
//   SERVICE                   this service's name on the dashboard, default "orders"
//   IDEMPOTENCY_SECRET        request-fingerprint key (HMAC), at least 16 bytes, required
//   RESPONSE_ENCRYPTION_KEYS  "id:base64key,..." (32-byte keys), the first encrypts, required
import { randomUUID } from 'node:crypto';
import express from 'express';
import { createRetrysafe, jsonResult } from '@retrysafe/store';
import { idempotent, problemErrors } from '@retrysafe/store/express';

const { DATABASE_URL, PORT = '3100', SERVICE = 'orders', IDEMPOTENCY_SECRET, RESPONSE_ENCRYPTION_KEYS } = process.env;
for (const [name, value] of Object.entries({ DATABASE_URL, IDEMPOTENCY_SECRET, RESPONSE_ENCRYPTION_KEYS })) {
  if (!value) throw new Error(`${name} is required`);
}

const HOUR = 3_600_000;
const retrysafe = await createRetrysafe({
  connectionString: DATABASE_URL,
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
  mode: 'claim-first',
  maxBodyBytes: 16_384,
  input: order,
  // A stand-in: `Authorization: Bearer <principal UUID>`. A real service puts its own authentication here.
  authenticate: (req) => {
    const token = /^Bearer (\S+)$/.exec(req.headers.authorization ?? '')?.[1];
    return token && UUID.test(token) ? { principalId: token.toLowerCase() } : null;
  },
  work: async ({ sku, quantity }) => jsonResult(201, { id: randomUUID(), sku, quantity }),
}));
app.use(problemErrors());

const server = app.listen(Number(PORT), '127.0.0.1', () => console.log(`orders service "${SERVICE}" on http://127.0.0.1:${PORT}`));
for (const signal of ['SIGINT', 'SIGTERM']) {
  process.once(signal, () => server.close(() => void retrysafe.stop().finally(() => process.exit(0))));
}
