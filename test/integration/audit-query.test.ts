// The audit log read by compliance: newest first, filtered, and paged by an exact keyset
// cursor, so no entry is skipped or repeated however close together entries were written.
import { describe, expect, it } from 'vitest';
import { auditQuerySchema, listAudit } from '../../server/audit/query';
import { useTestDatabase } from '../helpers/database';

describe('audit log query', () => {
  const db = useTestDatabase();

  it('pages through entries microseconds apart (and some at the same instant) without a gap or a repeat', async () => {
    await db.pool.query(
      `INSERT INTO audit_log (at, actor, action, target)
       SELECT timestamptz '2026-01-01 00:00:00.123456+00' + (n / 3) * interval '1 microsecond' + (n % 7) * interval '0.000001 s',
              CASE WHEN n % 2 = 0 THEN 'even@example.com' ELSE 'odd@example.com' END, 'test.page', jsonb_build_object('n', n)
       FROM generate_series(1, 250) AS n`,
    );
    const seen: string[] = [];
    let after: string | undefined;
    for (let page = 0; page < 20; page += 1) {
      const result = await listAudit(db.pool, auditQuerySchema.parse({ action: 'test.page', limit: 17, ...(after ? { after } : {}) }));
      seen.push(...result.entries.map((entry) => entry.id));
      if (!result.next) break;
      after = result.next;
    }
    expect(seen).toHaveLength(250);
    expect(new Set(seen).size).toBe(250);
    const { rows } = await db.pool.query<{ id: string }>("SELECT id FROM audit_log WHERE action = 'test.page' ORDER BY at DESC, id DESC");
    expect(seen).toEqual(rows.map((row) => row.id));
    const odd = await listAudit(db.pool, auditQuerySchema.parse({ actor: 'odd@example.com', action: 'test.page', limit: 500 }));
    expect(odd.entries).toHaveLength(125);
    expect(odd.next).toBeNull();
  });

  it('matches a whole action exactly, anything else as its start, and can leave sign-ins out', async () => {
    await db.pool.query(
      `INSERT INTO audit_log (at, actor, action, target) VALUES
         (now() - interval '5 s', 'a@example.com', 'auth.sign_in', '{}'), (now() - interval '4 s', 'a@example.com', 'auth.sign_in_failed', '{}'),
         (now() - interval '3 s', 'a@example.com', 'policy.change', '{}'), (now() - interval '2 s', 'a@example.com', 'policy.change_refused', '{}'),
         (now() - interval '1 s', 'a@example.com', 'key.lookup', '{}')`,
    );
    const actions = async (query: Record<string, string>) =>
      (await listAudit(db.pool, auditQuerySchema.parse({ actor: 'a@example.com', ...query }))).entries.map((entry) => entry.action);
    expect(await actions({ action: 'policy.' })).toEqual(['policy.change_refused', 'policy.change']);
    expect(await actions({ action: 'policy.change' })).toEqual(['policy.change']);
    expect(await actions({ action: 'auth.sign_in' })).toEqual(['auth.sign_in']);
    expect(await actions({ action: 'auth.sign_in_f' })).toEqual(['auth.sign_in_failed']);
    expect(await actions({ signIns: 'hide' })).toEqual(['key.lookup', 'policy.change_refused', 'policy.change']);
    expect(await actions({ action: 'auth.', signIns: 'hide' })).toEqual([]);
  });

  it('refuses a cursor it did not make', () => {
    expect(auditQuerySchema.safeParse({ after: "1; DROP TABLE audit_log" }).success).toBe(false);
  });
});
