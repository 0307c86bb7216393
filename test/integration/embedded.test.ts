// The embedded cluster is shared by local processes: the first starts it, others join,
// the last to leave stops it, and its data outlives every restart.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { chmod, mkdtemp, rm, stat } from 'node:fs/promises';
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
  const child = spawn(process.execPath, ['--conditions=retrysafe-source', '--import', 'tsx', 'test/fixtures/hold-embedded.ts', dir], {
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

  it('keeps its folder and log from other users: the log holds values from error details', async () => {
    const own = await mkdtemp(join(tmpdir(), 'retrysafe-embedded-'));
    await chmod(own, 0o755); // as an older release, or a careless umask, left it
    try {
      const cluster = await acquireEmbeddedPostgres({ dir: own });
      // An error detail with a value in it, as a unique violation writes to the log.
      await query(cluster.url, 'CREATE TABLE t (email text UNIQUE); INSERT INTO t VALUES ($$someone@example.com$$)');
      await expect(query(cluster.url, 'INSERT INTO t VALUES ($$someone@example.com$$)')).rejects.toThrow(/duplicate key/);
      await cluster.release();
      expect((await stat(own)).mode & 0o007).toBe(0);
      expect((await stat(join(own, 'postgres.log'))).mode & 0o077).toBe(0);
      expect((await stat(join(own, 'embedded.json'))).mode & 0o077).toBe(0);
      // Nobody but the owner may read it (as root, check as an unprivileged user when one exists).
      const probe = spawnSync('su', ['-s', '/bin/sh', 'nobody', '-c', `cat ${join(own, 'postgres.log')}`]);
      if (process.getuid?.() === 0 && probe.error === undefined) expect(probe.status).not.toBe(0);
    } finally {
      await rm(own, { recursive: true, force: true });
    }
  });
});
