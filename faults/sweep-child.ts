// One sweep run in a process of its own, so fault 7 can SIGKILL it mid-chunk. Prints the
// run's result as JSON. DATABASE_URL and SWEEP_CHUNK (rows per chunk) from the environment.
import { createPool } from '../db/client';
import { sweepOnce } from '../server/retention/sweeper';

const url = process.env.DATABASE_URL;
if (!url) throw new Error('DATABASE_URL is required');
const pool = createPool(url, { applicationName: 'faults-sweeper', max: 2 });
void sweepOnce(pool, 'manual', { chunkSize: Number(process.env.SWEEP_CHUNK ?? 500) })
  .then((result) => process.stdout.write(`${JSON.stringify(result)}\n`))
  .finally(() => pool.end());
