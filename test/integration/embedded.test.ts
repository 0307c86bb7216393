// The embedded cluster is shared by local processes: the first starts it, others join,
// the last to leave stops it, and its data outlives every restart.
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { chmod, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { acquireEmbeddedPostgres } from '../../db/embedded';

interface Holder {
  child: ChildProcess;
  info: { port: number; startedHere: boolean };
}

function hold(dir: string): Promise<Holder> {
  const child = spawn(process.execPath, ['--import', 'tsx', 'test/fixtures/hold-embedded.ts', dir], {
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  return new Promise((ready, fail) => {
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => {
      output += chunk.toString();
      if (output.includes('\n')) ready({ child, info: JSON.parse(output) as Holder['info'] });
    });
    child.once('exit', (code) => fail(new Error(`holder exited with ${code}`)));
  });
}

const exited = (child: ChildProcess) => new Promise((done) => child.once('exit', done));

async function query(url: string, text: string): Promise<pg.QueryResult> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return await client.query(text);
  } finally {
    await client.end();
  }
}

describe('embedded Postgres lifecycle', () => {
  let dir = '';
  afterAll(async () => {
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('is started once, shared, stopped by the last process out, and keeps its data', async () => {
    dir = await mkdtemp(join(tmpdir(), 'retrysafe-embedded-'));
    await chmod(dir, 0o755);
    const pidFile = join(dir, 'postgres', 'postmaster.pid');

    const first = await acquireEmbeddedPostgres({ dir });
    expect(first.startedHere).toBe(true);
    await query(first.url, 'CREATE TABLE kept (v text); INSERT INTO kept VALUES ($$survives$$)');

    // Another process joins the running server instead of starting a second one.
    const other = await hold(dir);
    expect(other.info).toEqual({ port: first.port, startedHere: false });
    other.child.stdin?.end();
    await exited(other.child);
    await expect(query(first.url, 'SELECT 1')).resolves.toBeDefined();

    await first.release();
    expect(existsSync(pidFile)).toBe(false);

    // A restart reuses the data folder.
    const second = await acquireEmbeddedPostgres({ dir });
    expect(second.startedHere).toBe(true);
    const { rows } = await query(second.url, 'SELECT v FROM kept');
    expect(rows).toEqual([{ v: 'survives' }]);

    // A process that leaves while another still holds the cluster does not stop it;
    // a holder killed with SIGKILL does not keep it alive forever.
    const killed = await hold(dir);
    expect(killed.info.startedHere).toBe(false);
    await second.release();
    expect(existsSync(pidFile)).toBe(true);
    killed.child.kill('SIGKILL');
    await exited(killed.child);
    const third = await acquireEmbeddedPostgres({ dir });
    expect(third.startedHere).toBe(false);
    await third.release();
    expect(existsSync(pidFile)).toBe(false);
  });
});
