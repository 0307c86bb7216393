// A bounded hostile-input run against the started server: fast-check generates every public and
// admin route's fields (NUL characters, lone surrogates, years 0 and 10000, huge strings, wrong
// types, extra fields, malformed JSON, wrong content types), at least 5,000 requests in all,
// sent by an admin session with a same-origin Origin (so the input reaches validation and the
// database) and by the demo API's tenant. No answer may be a 5xx, and the server is healthy
// and still answers correctly afterwards. A route with its own policy in code (service "orders",
// whose code differs from its published row) is registered first, so the retention review and
// the key lookup read its declared policy and scope too. Then a principal flooding new keys past
// its live-key quota is held to it exactly (429 with Retry-After, never a 5xx).
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTenant, type CreatedTenant } from '../../server/demo/tenants';
import { ensurePolicies, fieldsOf as policyFieldsOf, getPolicy } from '../../server/retention/policies';
import { defaultPolicyFields, paymentsPolicy, DEMO_SERVICE, PAYMENTS_ENDPOINT } from '../../server/demo/policies';
import { createTestStore } from '../../packages/store/test/helpers/store';
import { useTestDatabase } from '../helpers/database';
import { signInEveryRole } from '../helpers/operators';
import { startServer, type RunningServer } from '../helpers/server';

const hostileText = fc.oneof(
  { weight: 4, arbitrary: fc.string({ maxLength: 40 }) },
  { weight: 2, arbitrary: fc.string({ unit: 'grapheme', maxLength: 20 }) },
  {
    weight: 4,
    arbitrary: fc.constantFrom(
      '\u0000',
      'a\u0000b',
      '\ud800',
      'x\udc00y',
      '\ud83d',
      '0000-01-01T00:00:00Z',
      '10000-01-01T00:00:00Z',
      '2026-02-30T00:00:00Z',
      '-infinity',
      'NaN',
      "'; DROP TABLE operators; --",
      '%00',
      '../../etc/passwd',
      '00000000-0000-0000-0000-000000000000',
      '\u202e\u0000\u0007',
    ),
  },
  { weight: 1, arbitrary: fc.string({ minLength: 2_000, maxLength: 20_000, unit: fc.constantFrom('a', '\u00e9', '\u0000', '\ud83d\ude00') }) },
);
const hostileValue: fc.Arbitrary<unknown> = fc.oneof(
  { weight: 6, arbitrary: hostileText },
  { weight: 1, arbitrary: fc.integer() },
  { weight: 1, arbitrary: fc.constantFrom(0, -1, 2 ** 53, 1e308, -0, 0.5) },
  { weight: 1, arbitrary: fc.boolean() },
  { weight: 1, arbitrary: fc.constant(null) },
  { weight: 1, arbitrary: fc.array(hostileText, { maxLength: 3 }) },
  { weight: 1, arbitrary: fc.dictionary(hostileText, hostileText, { maxKeys: 3 }) },
);

/** An object over `fields`, each field valid-looking, hostile or absent, sometimes with an extra field. */
function fieldsOf(fields: Record<string, fc.Arbitrary<unknown>>): fc.Arbitrary<Record<string, unknown>> {
  const record: Record<string, fc.Arbitrary<unknown>> = {};
  for (const [name, valid] of Object.entries(fields)) record[name] = fc.oneof(valid, hostileValue);
  return fc
    .tuple(fc.record(record, { requiredKeys: [] }), fc.option(fc.tuple(hostileText, hostileValue), { freq: 5 }))
    .map(([value, extra]) => (extra ? { ...value, [extra[0]]: extra[1] } : value));
}

const uuid = fc.uuid();
/** A service name: the demo's, another valid one, or one the key table's check would refuse. */
const service = fc.constantFrom('demo', 'orders', 'Orders', 'a'.repeat(64), '-x');
const key = fc.string({ minLength: 1, maxLength: 20, unit: fc.constantFrom('a', 'b', '-', '1') });
const reason = fc.constant('hostile input run');

interface Case {
  method: 'GET' | 'POST' | 'PATCH';
  path: string;
  as: 'admin' | 'tenant';
  query?: Record<string, unknown>;
  body?: { contentType: string; text: string };
}

/** A JSON body: usually the generated object, sometimes broken JSON, another content type or a bare value. */
function bodyOf(fields: fc.Arbitrary<Record<string, unknown>>): fc.Arbitrary<{ contentType: string; text: string }> {
  return fc.oneof(
    { weight: 8, arbitrary: fields.map((value) => ({ contentType: 'application/json', text: JSON.stringify(value) })) },
    { weight: 1, arbitrary: fc.string({ maxLength: 60 }).map((text) => ({ contentType: 'application/json', text: `{${text}` })) },
    { weight: 1, arbitrary: fields.map((value) => ({ contentType: 'text/plain', text: JSON.stringify(value) })) },
    { weight: 1, arbitrary: hostileValue.map((value) => ({ contentType: 'application/json', text: JSON.stringify(value) })) },
  );
}

const queryCase = (path: string, fields: Record<string, fc.Arbitrary<unknown>>): fc.Arbitrary<Case> =>
  fieldsOf(fields).map((query) => ({ method: 'GET', path, as: 'admin', query }));
const bodyCase = (method: 'POST' | 'PATCH', path: string | fc.Arbitrary<string>, fields: Record<string, fc.Arbitrary<unknown>>, as: Case['as'] = 'admin'): fc.Arbitrary<Case> =>
  fc.tuple(typeof path === 'string' ? fc.constant(path) : path, bodyOf(fieldsOf(fields))).map(([concrete, body]) => ({ method, path: concrete, as, body }));

const instant = fc.date({ min: new Date('2020-01-01'), max: new Date('2030-01-01'), noInvalidDate: true }).map((date) => date.toISOString());

const cases: Record<string, fc.Arbitrary<Case>> = {
  'POST /api/v1/payments': bodyCase('POST', '/api/v1/payments', { amount: fc.integer({ min: 1, max: 10_000 }), currency: fc.constantFrom('EUR', 'USD'), description: fc.string({ maxLength: 20 }) }, 'tenant'),
  'POST /api/v1/refunds': bodyCase('POST', '/api/v1/refunds', { payment: uuid, amount: fc.integer({ min: 1, max: 100 }) }, 'tenant'),
  'GET /api/admin/audit': queryCase('/api/admin/audit', { actor: fc.string({ maxLength: 10 }), action: fc.constantFrom('key.lookup', 'sign_in'), from: instant, to: instant, after: fc.string({ maxLength: 30 }), limit: fc.integer({ min: 1, max: 500 }), format: fc.constantFrom('json', 'csv') }),
  'GET /api/admin/overview': queryCase('/api/admin/overview', { range: fc.constantFrom('1h', '6h', '24h', '7d', '30d'), service, scope: fc.constantFrom('POST /api/v1/payments', 'intent') }),
  'GET /api/admin/stale-claims': queryCase('/api/admin/stale-claims', { limit: fc.integer({ min: 1, max: 500 }) }),
  'GET /api/admin/retention': queryCase('/api/admin/retention', { service }),
  'GET /api/admin/retention/export': queryCase('/api/admin/retention/export', { what: fc.constantFrom('policies', 'history', 'evidence', 'store'), range: fc.constantFrom('24h', '7d', '30d'), service }),
  'POST /api/admin/keys/lookup': bodyCase('POST', '/api/admin/keys/lookup', { principalId: uuid, service, key, reason }),
  'POST /api/admin/keys/list': bodyCase('POST', '/api/admin/keys/list', {
    principalId: uuid,
    reason,
    service,
    scope: fc.constantFrom('POST /api/v1/payments', 'intent'),
    state: fc.constantFrom('in_progress', 'completed', 'failed'),
    after: fc.record({ createdAtMicros: fc.string({ maxLength: 20 }), service, scope: hostileText, key }),
    limit: fc.integer({ min: 1, max: 200 }),
  }),
  'POST /api/admin/keys/correlation': bodyCase('POST', '/api/admin/keys/correlation', { correlationId: uuid, reason }),
  'POST /api/admin/keys/unrecorded': bodyCase('POST', '/api/admin/keys/unrecorded', { reason, service, minutes: fc.integer({ min: -5, max: 50_000 }), limit: fc.integer({ min: 0, max: 600 }) }),
  'POST /api/admin/keys/reconcile': bodyCase('POST', '/api/admin/keys/reconcile', { reason, service, scope: fc.oneof(hostileText, fc.constant('POST /orders')), kind: fc.constantFrom('effect_missing', 'stale_claim', 'other'), limit: fc.integer({ min: 0, max: 600 }) }),
  'GET /api/admin/principals': queryCase('/api/admin/principals', { name: fc.oneof(fc.string({ maxLength: 20 }), uuid), limit: fc.integer({ min: 1, max: 50 }) }),
  'POST /api/admin/stale-claims/release': bodyCase('POST', '/api/admin/stale-claims/release', { principalId: uuid, service, scope: fc.constant('POST /api/v1/refunds'), key, reason }),
  'POST /api/admin/policies': bodyCase('POST', '/api/admin/policies', {
    service,
    endpoint: fc.constantFrom('POST /api/v1/nowhere', 'no such endpoint'),
    expectedVersion: fc.integer({ min: 1, max: 5 }),
    fields: fc.dictionary(fc.constantFrom('retentionSeconds', 'retryWindowSeconds', 'liveKeyQuota', 'scopeMode'), hostileValue, { maxKeys: 3 }),
    reason,
    acknowledgeBreakingChange: fc.boolean(),
  }),
  'POST /api/admin/operators': bodyCase('POST', '/api/admin/operators', { email: fc.emailAddress(), password: fc.string({ minLength: 1, maxLength: 20 }), role: fc.constantFrom('viewer', 'operator', 'root'), name: fc.string({ maxLength: 20 }) }),
  'PATCH /api/admin/operators/[id]': bodyCase(
    'PATCH',
    fc
      .oneof(
        // Every byte percent-encoded, cut at 100 bytes (so sometimes mid-character), and encodings that are not UTF-8 at all.
        hostileText.map((id) => [...Buffer.from(id, 'utf8').subarray(0, 100)].map((byte) => `%${byte.toString(16).padStart(2, '0')}`).join('') || 'x'),
        fc.constantFrom('%ff', '%c3', '%f0%9f', 'a%e9b', '%2e%2e%2f', '%'),
      )
      .map((id) => `/api/admin/operators/${id}`),
    { role: fc.constantFrom('viewer', 'admin', 'god'), disabled: fc.boolean(), reason },
  ),
};
cases['POST /api/admin/operators/[id]/password'] = bodyCase(
  'POST',
  fc.oneof(hostileText.map((id) => `/api/admin/operators/${encodeURIComponent(id.replace(/[\ud800-\udfff]/g, '')).slice(0, 200) || 'x'}/password`), fc.constant('/api/admin/operators/%ff/password')),
  { reason },
);
// The signed-in admin's own password: never the right current one, so nothing changes.
cases['POST /api/account/password'] = bodyCase('POST', '/api/account/password', { currentPassword: fc.string({ minLength: 12, maxLength: 20 }).map((text) => `not-${text}`), newPassword: fc.string({ minLength: 1, maxLength: 40 }), confirmation: fc.string({ maxLength: 40 }) });
// Sign-in with generated credentials: never a real operator's, so it is 401, 429 (locked or busy) or 400.
cases['POST /api/auth/sign-in'] = bodyCase('POST', '/api/auth/sign-in', { email: fc.oneof(fc.emailAddress(), fc.constant('admin@test.example')), password: fc.string({ maxLength: 30 }) }, 'admin');
const RUNS_PER_ROUTE = 300; // 18 routes: 5,400 requests

/** A header value fetch can send: printable ASCII. */
const headerText = fc.string({ maxLength: 60, unit: fc.constantFrom('a', 'f', '0', '9', '-', '$', '_', ' ', '/', ':', '.', '"') });

/**
 * What a page sees as a server action or RSC request (server/action-screen.ts): a POST with
 * Next-Action, a multipart POST, or `RSC: 1`, from this origin, another one, `null` or none, with
 * action ids real, made up or malformed and bodies well-formed or broken.
 */
interface ActionCase {
  method: 'GET' | 'POST';
  path: string;
  origin: 'same' | 'evil' | 'null' | 'broken' | 'none';
  /** 'real' (the sign-in action's), 'none' (no Next-Action), or the header's value. */
  actionId: string;
  rsc: boolean;
  signedIn: boolean;
  accept: string;
  body?: { contentType: string; text: string };
}

const multipartPart = (name: string, value: string) => `--hostile-boundary-3f\r\nContent-Disposition: form-data; name="${name}"\r\n\r\n${value}\r\n`;
const actionBody: fc.Arbitrary<{ contentType: string; text: string }> = fc.oneof(
  hostileText.map((text) => ({ contentType: 'multipart/form-data; boundary=hostile-boundary-3f', text })),
  fc.tuple(headerText, hostileText).map(([id, value]) => ({ contentType: 'multipart/form-data; boundary=hostile-boundary-3f', text: `${multipartPart(`$ACTION_ID_${id}`, '')}${multipartPart('email', value)}--hostile-boundary-3f--\r\n` })),
  fc.tuple(headerText, hostileText).map(([id, value]) => ({
    contentType: 'multipart/form-data; boundary=hostile-boundary-3f',
    text: `${multipartPart('$ACTION_REF_1', '')}${multipartPart('$ACTION_1:0', JSON.stringify({ id, bound: '$@1' }))}${multipartPart('$ACTION_1:1', value)}--hostile-boundary-3f--\r\n`,
  })),
  hostileValue.map((value) => ({ contentType: 'text/plain;charset=UTF-8', text: JSON.stringify([value]) })),
  hostileText.map((text) => ({ contentType: 'text/plain;charset=UTF-8', text })),
);
const actionCase: fc.Arbitrary<ActionCase> = fc.record({
  method: fc.constantFrom('GET', 'POST', 'POST', 'POST'),
  path: fc.constantFrom('/login', '/', '/keys', '/claims'),
  origin: fc.constantFrom('same', 'same', 'evil', 'null', 'broken', 'none'),
  actionId: fc.oneof(fc.constantFrom('real', 'none'), headerText),
  rsc: fc.boolean(),
  signedIn: fc.boolean(),
  accept: fc.constantFrom('text/html', 'text/x-component', 'application/json', '*/*'),
  body: fc.option(actionBody, { nil: undefined }),
});
const ACTION_RUNS = 600;

describe('hostile input against the running server', () => {
  const db = useTestDatabase();
  let server: RunningServer | undefined;
  let adminCookie = '';
  let tenant: CreatedTenant;
  let sent = 0;
  const serverErrors: string[] = [];

  beforeAll(async () => {
    server = await startServer(db.url, { DEMO_TRAFFIC: '0' });
    adminCookie = (await signInEveryRole(db, server.baseUrl, 'hostile.example')).get('admin') ?? '';
    tenant = await createTenant(db.pool, 'hostile tenant');
    // "orders": a published payments policy, and a route whose code keeps keys under intent scope for less.
    const published = defaultPolicyFields[PAYMENTS_ENDPOINT];
    if (!published) throw new Error('no default payments policy');
    await ensurePolicies(db.pool, 'orders', { [PAYMENTS_ENDPOINT]: published }, 'system');
    const orders = createTestStore(db.pool, { service: 'orders' }).store;
    expect(await orders.registerRoutePolicy(PAYMENTS_ENDPOINT, { ...paymentsPolicy, scopeMode: 'intent', retentionMs: paymentsPolicy.retryWindowMs }, true)).toBe(true);
  });
  afterAll(async () => {
    await server?.stop();
  });

  async function send(test: Case, idempotencyKey: string): Promise<number> {
    const base = server?.baseUrl ?? '';
    const url = new URL(test.path, base);
    for (const [name, value] of Object.entries(test.query ?? {})) url.searchParams.set(name, typeof value === 'string' ? value : JSON.stringify(value));
    const headers: Record<string, string> =
      test.as === 'admin' ? { cookie: adminCookie, origin: base, 'sec-fetch-site': 'same-origin' } : { authorization: `Bearer ${tenant.apiKey}`, 'idempotency-key': idempotencyKey };
    if (test.body) headers['content-type'] = test.body.contentType;
    const response = await fetch(url, { method: test.method, headers, body: test.body?.text, redirect: 'manual' });
    await response.arrayBuffer();
    sent += 1;
    if (response.status >= 500) serverErrors.push(`${test.method} ${url.pathname} -> ${response.status}: ${(test.body?.text ?? url.search).slice(0, 200)}`);
    return response.status;
  }

  it(`answers ${RUNS_PER_ROUTE * Object.keys(cases).length} generated requests over every route without a 5xx`, { timeout: 900_000 }, async () => {
    let counter = 0;
    await Promise.all(
      Object.values(cases).map((arbitrary) =>
        fc.assert(
          fc.asyncProperty(arbitrary, async (test) => {
            counter += 1;
            await send(test, `hostile-${counter}`); // a 5xx is collected, with its input, and the run goes on
          }),
          { numRuns: RUNS_PER_ROUTE, endOnFailure: true },
        ),
      ),
    );
    // On a failure, the server's last output says why.
    expect(serverErrors, serverErrors.length > 0 ? (server?.output() ?? '').slice(-4_000) : undefined).toEqual([]);
    expect(sent).toBeGreaterThanOrEqual(5_000);
  });

  it(`answers ${ACTION_RUNS} generated server action and RSC requests without a 5xx, printing only JSON lines`, { timeout: 600_000 }, async () => {
    const base = server?.baseUrl ?? '';
    const before = (server?.output() ?? '').length;
    const html = await (await fetch(`${base}/login`)).text();
    const descriptor = /name="\$ACTION_1:0" value="([^"]*)"/.exec(html)?.[1]?.replaceAll('&quot;', '"') ?? '{}';
    const realId = String((JSON.parse(descriptor) as { id?: unknown }).id);
    const faults: string[] = [];
    await fc.assert(
      fc.asyncProperty(actionCase, async (test) => {
        const headers: Record<string, string> = { accept: test.accept };
        const origin = { same: base, evil: 'http://evil.example', null: 'null', broken: 'http://', none: undefined }[test.origin];
        if (origin !== undefined) headers.origin = origin;
        if (test.actionId !== 'none') headers['next-action'] = test.actionId === 'real' ? realId : test.actionId;
        if (test.rsc) headers.rsc = '1';
        if (test.signedIn) headers.cookie = adminCookie;
        const body = test.method === 'POST' ? test.body : undefined;
        if (body) headers['content-type'] = body.contentType;
        const response = await fetch(`${base}${test.path}`, { method: test.method, headers, body: body?.text, redirect: 'manual' });
        await response.arrayBuffer();
        if (response.status >= 500) faults.push(`${test.method} ${test.path} ${JSON.stringify(headers).slice(0, 300)} -> ${response.status}: ${(body?.text ?? '').slice(0, 200)}`);
      }),
      { numRuns: ACTION_RUNS, endOnFailure: true },
    );
    expect(faults, faults.length > 0 ? (server?.output() ?? '').slice(-4_000) : undefined).toEqual([]);
    const printed = (server?.output() ?? '').slice(before).split('\n').filter((line) => line.trim() !== '');
    const notJson = printed.filter((line) => {
      try {
        JSON.parse(line);
        return false;
      } catch {
        return true;
      }
    });
    expect(notJson).toEqual([]);
  });

  it('is healthy afterwards, and still serves a real payment and its replay', async () => {
    const base = server?.baseUrl ?? '';
    expect((await fetch(`${base}/api/health`)).status).toBe(200);
    const pay = () =>
      fetch(`${base}/api/v1/payments`, {
        method: 'POST',
        headers: { authorization: `Bearer ${tenant.apiKey}`, 'idempotency-key': 'after-the-storm', 'content-type': 'application/json' },
        body: JSON.stringify({ amount: 100, currency: 'EUR' }),
      });
    const first = await pay();
    const replay = await pay();
    expect(first.status).toBe(201);
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(await replay.text()).toBe(await first.text());
    // Failures are one JSON line each, never Next's multi-line print of a raw error.
    expect(server?.output() ?? '').not.toMatch(/⨯|at async|\n\s+at /);
  });

  it('holds a flooding principal to its live-key quota exactly: 100 concurrent new keys under a quota of 30 are 30 x 201 and 70 x 429 with Retry-After, never a 500', async () => {
    const base = server?.baseUrl ?? '';
    const QUOTA = 30;
    // An admin sets the payments endpoint's quota, as on the retention page.
    const current = await getPolicy(db.pool, DEMO_SERVICE, PAYMENTS_ENDPOINT);
    if (!current) throw new Error('no payments policy');
    const changed = await fetch(`${base}/api/admin/policies`, {
      method: 'POST',
      headers: { cookie: adminCookie, origin: base, 'sec-fetch-site': 'same-origin', 'content-type': 'application/json' },
      body: JSON.stringify({ service: DEMO_SERVICE, endpoint: PAYMENTS_ENDPOINT, expectedVersion: current.version, fields: { ...policyFieldsOf(current), liveKeyQuota: QUOTA }, reason: 'quota flood' }),
    });
    expect(changed.status).toBe(200);
    const pay = (apiKey: string, key: string) =>
      fetch(`${base}/api/v1/payments`, {
        method: 'POST',
        headers: { authorization: `Bearer ${apiKey}`, 'idempotency-key': key, 'content-type': 'application/json' },
        body: JSON.stringify({ amount: 100, currency: 'EUR' }),
      });
    // The server reads policies every few seconds: a probe tenant's new keys find when the quota is in force.
    const probe = await createTenant(db.pool, 'quota probe');
    for (let n = 0; ; n += 1) {
      const status = (await pay(probe.apiKey, `probe-${n}`)).status;
      if (status === 429) break;
      expect(status).toBe(201);
      expect(n).toBeLessThan(300);
      await new Promise((done) => setTimeout(done, 50));
    }
    const flooder = await createTenant(db.pool, 'quota flooder');
    const keys = Array.from({ length: 100 }, (_, i) => `flood-${i}`);
    // A loaded server may shed some of the 100 with 503 and Retry-After (its pool's wait is
    // bounded): a client retries those, as told; the quota's count must still come out exact.
    const unavailable: (string | null)[] = [];
    const answers = await Promise.all(
      keys.map(async (key) => {
        for (let attempt = 0; ; attempt += 1) {
          const response = await pay(flooder.apiKey, key);
          await response.arrayBuffer();
          const retryAfter = response.headers.get('retry-after');
          if (response.status !== 503 || attempt === 20) return { key, status: response.status, retryAfter };
          unavailable.push(retryAfter);
          await new Promise((done) => setTimeout(done, 250 + Math.random() * 500));
        }
      }),
    );
    expect(unavailable.every((retryAfter) => Number(retryAfter) >= 1)).toBe(true);
    const count = (status: number) => answers.filter((answer) => answer.status === status).length;
    expect([count(201), count(429)]).toEqual([QUOTA, 100 - QUOTA]);
    expect(answers.filter((answer) => answer.status === 429).every((answer) => Number(answer.retryAfter) >= 1)).toBe(true);
    // Existing keys still replay over the quota.
    const replays = await Promise.all(answers.filter((answer) => answer.status === 201).map((answer) => pay(flooder.apiKey, answer.key)));
    expect(replays.every((replay) => replay.status === 201 && replay.headers.get('idempotent-replayed') === 'true')).toBe(true);
  });
});
