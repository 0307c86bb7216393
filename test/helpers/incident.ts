// Traffic for the scripted incident: a tenant whose refunds come with concurrent duplicates
// (about 40% conflicts) and tenants sending clean payments, through the demo API over HTTP.
import type { CreatedTenant } from '../../server/demo/tenants';

export interface Sent {
  /** Status codes by count. */
  statuses: Map<number, number>;
  /** Requests sent. */
  sent: number;
}

function post(baseUrl: string, path: string, tenant: CreatedTenant, key: string, body: unknown): Promise<Response> {
  return fetch(`${baseUrl}${path}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${tenant.apiKey}`, 'idempotency-key': key, 'content-type': 'application/json' },
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(15_000),
  });
}

function count(sent: Sent, status: number): void {
  sent.sent += 1;
  sent.statuses.set(status, (sent.statuses.get(status) ?? 0) + 1);
}

export async function createPayment(baseUrl: string, tenant: CreatedTenant, key: string): Promise<string> {
  const response = await post(baseUrl, '/api/v1/payments', tenant, key, { amount: 10_000, currency: 'EUR' });
  if (response.status !== 201) throw new Error(`payment answered ${response.status}`);
  return ((await response.json()) as { id: string }).id;
}

/**
 * `keys` refunds, each sent once and, for two keys in three, once more at the same moment: the
 * duplicate meets the original still running (the processor takes its time), a 409. Expected
 * conflicts: 2/3 of the keys, so 2/5 = 40% of the claims. `servers` are used in turn.
 */
export async function refundsWithDuplicates(servers: string[], tenant: CreatedTenant, payment: string, keys: number, prefix: string): Promise<Sent> {
  const sent: Sent = { statuses: new Map(), sent: 0 };
  const batch = 5;
  for (let start = 0; start < keys; start += batch) {
    await Promise.all(
      Array.from({ length: Math.min(batch, keys - start) }, async (_, offset) => {
        const i = start + offset;
        const key = `${prefix}-${i}`;
        const copies = i % 3 === 0 ? 1 : 2;
        const responses = await Promise.all(
          Array.from({ length: copies }, (_, copy) => post(servers[(i + copy) % servers.length] ?? '', '/api/v1/refunds', tenant, key, { payment, amount: 1 })),
        );
        for (const response of responses) {
          count(sent, response.status);
          await response.arrayBuffer();
        }
      }),
    );
  }
  return sent;
}

/** `count` clean payments (each key once), `concurrency` at a time, over `servers` in turn. */
export async function cleanPayments(servers: string[], tenant: CreatedTenant, total: number, prefix: string, concurrency = 10): Promise<Sent> {
  const sent: Sent = { statuses: new Map(), sent: 0 };
  let next = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < total) {
        const i = next;
        next += 1;
        const response = await post(servers[i % servers.length] ?? '', '/api/v1/payments', tenant, `${prefix}-${i}`, { amount: 100 + i, currency: 'EUR' });
        count(sent, response.status);
        await response.arrayBuffer();
      }
    }),
  );
  return sent;
}
