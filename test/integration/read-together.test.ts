// readTogether: a dashboard answer's independent reads run at once on a pool (the overview takes
// about as long as its slowest read), one after another on a single client.
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { readTogether } from '../../server/metrics/read-together';
import { useTestDatabase } from '../helpers/database';

const LOCK = 7_340_211;

describe('readTogether', () => {
  const db = useTestDatabase();

  it('runs the reads at once on a pool: the first waits for a lock that only the second releases', async () => {
    const holder = new pg.Client({ connectionString: db.url });
    await holder.connect();
    // A statement timeout, so that reads run one after another fail rather than wait for ever.
    const pool = new pg.Pool({ connectionString: db.url, max: 4, options: '-c statement_timeout=5000' });
    try {
      await holder.query('SELECT pg_advisory_lock($1)', [LOCK]);
      const [first, second] = await readTogether(pool, [
        async () => (await pool.query<{ got: string }>("SELECT pg_advisory_xact_lock($1)::text || 'first' AS got", [LOCK])).rows[0]?.got,
        async () => {
          const { rows } = await pool.query<{ n: number }>('SELECT 2 AS n');
          await holder.query('SELECT pg_advisory_unlock($1)', [LOCK]);
          return rows[0]?.n;
        },
      ]);
      // One after the other, the first would wait until its statement timeout.
      expect([first, second]).toEqual(['first', 2]);
    } finally {
      await pool.end();
      await holder.end();
    }
  });

  it('runs them one after another, in order, on a single client', async () => {
    const client = new pg.Client({ connectionString: db.url });
    await client.connect();
    try {
      const order: string[] = [];
      const results = await readTogether(client, [
        async () => {
          order.push('a start');
          const { rows } = await client.query<{ n: number }>('SELECT 1 AS n, pg_sleep(0.05)');
          order.push('a end');
          return rows[0]?.n;
        },
        () => {
          order.push('b start');
          return Promise.resolve('b');
        },
      ]);
      expect(results).toEqual([1, 'b']);
      expect(order).toEqual(['a start', 'a end', 'b start']);
    } finally {
      await client.end();
    }
  });
});
