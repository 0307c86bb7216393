// Applies the MySQL/MariaDB backend's migrations (the package's mysql-migrations/*.sql, in name
// order) to the database a URI or pool points at, beside the adopter's tables. MySQL's DDL commits
// on its own, so each statement is written to be re-runnable (CREATE ... IF NOT EXISTS) and a
// migration is journaled (retrysafe_mysql_migrations) once all its statements ran. Processes
// migrating at once serialise on GET_LOCK, held by the one connection that migrates.
import { createHash } from 'node:crypto';
import { readdir, readFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import mysql, { type Connection, type Pool, type RowDataPacket } from 'mysql2/promise';

/** The backend's migrations, shipped in the package beside dist/ and src/. */
export const MYSQL_MIGRATIONS_FOLDER = join(dirname(fileURLToPath(import.meta.url)), '..', 'mysql-migrations');

const JOURNAL = 'retrysafe_mysql_migrations';
const LOCK_NAME = 'retrysafe_mysql_migrate';
const LOCK_WAIT_SECONDS = 60;

export interface MysqlMigration {
  /** The file name without `.sql`. */
  tag: string;
  statements: string[];
  /** sha256 of the file, hex. */
  hash: string;
}

export interface MysqlMigrationResult {
  applied: string[];
  current: string | null;
}

/** Splits a migration into statements: `;` at the end of a line ends one; `--` comment lines are dropped. */
function statementsOf(sql: string): string[] {
  const statements: string[] = [];
  let current: string[] = [];
  for (const line of sql.split('\n')) {
    if (/^\s*--/.test(line)) continue;
    current.push(line);
    if (/;\s*$/.test(line)) {
      statements.push(current.join('\n').trim().replace(/;$/, ''));
      current = [];
    }
  }
  if (current.join('').trim() !== '') throw new Error('a MySQL migration ends without a semicolon');
  return statements;
}

/** The backend's migrations, oldest first. */
export async function readMysqlMigrations(folder: string = MYSQL_MIGRATIONS_FOLDER): Promise<MysqlMigration[]> {
  const files = (await readdir(folder)).filter((name) => /^\d{4}_[\w-]+\.sql$/.test(name)).sort();
  return Promise.all(
    files.map(async (file) => {
      const sql = await readFile(join(folder, file), 'utf8');
      return { tag: file.slice(0, -4), statements: statementsOf(sql), hash: createHash('sha256').update(sql).digest('hex') };
    }),
  );
}

async function journal(db: Pick<Connection, 'query'>): Promise<Map<string, string>> {
  const [tables] = await db.query<RowDataPacket[]>('SELECT 1 FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?', [JOURNAL]);
  if (tables.length === 0) return new Map();
  const [rows] = await db.query<(RowDataPacket & { tag: string; hash: string })[]>(`SELECT tag, hash FROM ${JOURNAL}`);
  return new Map(rows.map((row) => [row.tag, row.hash]));
}

/** Applies what is missing; refuses an applied migration whose file changed since. */
export async function migrateMysql(target: string | Pool, folder: string = MYSQL_MIGRATIONS_FOLDER): Promise<MysqlMigrationResult> {
  const migrations = await readMysqlMigrations(folder);
  const pooled = typeof target === 'string' ? null : await target.getConnection();
  const connection: Connection = pooled ?? (await mysql.createConnection({ uri: target as string, connectTimeout: 5_000 }));
  try {
    const [database] = await connection.query<(RowDataPacket & { name: string | null })[]>('SELECT DATABASE() AS name');
    if (!database[0]?.name) throw new Error('the MySQL URI names no database: the key table goes in the service database, e.g. mysql://user:password@host:3306/orders');
    const [locked] = await connection.query<(RowDataPacket & { got: number | null })[]>('SELECT GET_LOCK(?, ?) AS got', [LOCK_NAME, LOCK_WAIT_SECONDS]);
    if (locked[0]?.got !== 1) throw new Error(`another process held the migration lock (${LOCK_NAME}) for ${LOCK_WAIT_SECONDS} s`);
    try {
      const applied: string[] = [];
      const done = await journal(connection);
      for (const migration of migrations) {
        const hash = done.get(migration.tag);
        if (hash !== undefined) {
          if (hash !== migration.hash) throw new Error(`MySQL migration ${migration.tag} was applied from a different file (hash ${hash.slice(0, 12)})`);
          continue;
        }
        await connection.query(
          `CREATE TABLE IF NOT EXISTS ${JOURNAL} (tag VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin PRIMARY KEY, hash CHAR(64) CHARACTER SET ascii NOT NULL, applied_at DATETIME(6) NOT NULL DEFAULT UTC_TIMESTAMP(6)) ENGINE = InnoDB`,
        );
        for (const statement of migration.statements) await connection.query(statement);
        await connection.query(`INSERT INTO ${JOURNAL} (tag, hash) VALUES (?, ?)`, [migration.tag, migration.hash]);
        applied.push(migration.tag);
      }
      return { applied, current: migrations.at(-1)?.tag ?? null };
    } finally {
      await connection.query('SELECT RELEASE_LOCK(?)', [LOCK_NAME]);
    }
  } finally {
    if (pooled) pooled.release();
    else await connection.end();
  }
}

/** Throws, naming the command, unless every migration of the package is applied to the pool's database. */
export async function checkMysqlSchema(pool: Pool, folder: string = MYSQL_MIGRATIONS_FOLDER): Promise<void> {
  const [migrations, done] = await Promise.all([readMysqlMigrations(folder), journal(pool)]);
  const missing = migrations.filter((migration) => !done.has(migration.tag)).map((migration) => migration.tag);
  if (missing.length > 0) {
    throw new Error(`The MySQL database is not migrated for Retrysafe (missing ${missing.join(', ')}): run npx retrysafe migrate --mysql <uri>`);
  }
}
