// Plans of statements as the application runs them: prepared, with its values, under a
// chosen plan cache mode; and a recorder that captures every statement a read model issues,
// so composite reads (several statements) can have each plan checked. Used by the plan
// tests and the 10-million-row bench, never on a request path.
import type pg from 'pg';

export interface PlanNode {
  'Node Type': string;
  'Relation Name'?: string;
  'Index Name'?: string;
  'Conflict Arbiter Indexes'?: string[];
  Plans?: PlanNode[];
}

export type PlanCacheMode = 'force_custom_plan' | 'force_generic_plan';

/** Every node of a plan, root first. */
export function planNodes(plan: PlanNode): PlanNode[] {
  return [plan, ...(plan.Plans ?? []).flatMap(planNodes)];
}

/** The scans of a plan in one line: "Index Only Scan idempotency_keys_expiry_idx; Seq Scan endpoint_policies". */
export function summarisePlan(nodes: PlanNode[]): string {
  const scans = nodes
    .filter((node) => node['Relation Name'] !== undefined || node['Index Name'] !== undefined)
    .map((node) => `${node['Node Type']} ${node['Index Name'] ?? node['Relation Name'] ?? ''}`);
  return [...new Set(scans)].join('; ') || (nodes[0]?.['Node Type'] ?? '?');
}

let counter = 0;

/** A plan node of EXPLAIN ANALYZE: what a scan read (rows per loop, loops, rows filtered out). */
export type AnalyzedPlanNode = PlanNode & {
  'Actual Rows'?: number;
  'Actual Loops'?: number;
  'Index Cond'?: string;
  'Rows Removed by Filter'?: number;
  'Rows Removed by Index Recheck'?: number;
};

/**
 * EXPLAIN of `text` prepared and executed with `values`, as a prepared statement would run;
 * with `analyze`, EXPLAIN ANALYZE (the statement runs: use it for reads).
 */
export async function explainPrepared(
  client: Pick<pg.ClientBase, 'query' | 'escapeLiteral'>,
  text: string,
  values: readonly unknown[] = [],
  mode: PlanCacheMode = 'force_custom_plan',
  options: { analyze?: boolean } = {},
): Promise<AnalyzedPlanNode[]> {
  counter += 1;
  const name = `explain_${process.pid}_${counter}`;
  // EXPLAIN takes no bind parameters: the values go in as literals.
  const literal = (value: unknown): string => {
    if (value === null || value === undefined) return 'NULL';
    if (typeof value === 'number' || typeof value === 'bigint') return String(value);
    if (typeof value === 'boolean') return value ? 'true' : 'false';
    if (value instanceof Date) return client.escapeLiteral(value.toISOString());
    if (Buffer.isBuffer(value)) return `'\\x${value.toString('hex')}'`;
    if (Array.isArray(value)) {
      const text = (item: unknown) => (item instanceof Date ? item.toISOString() : typeof item === 'string' || typeof item === 'number' || typeof item === 'bigint' || typeof item === 'boolean' ? String(item) : JSON.stringify(item));
      const element = (item: unknown) => (item === null || item === undefined ? 'NULL' : `"${text(item).replace(/[\\"]/g, '\\$&')}"`);
      return client.escapeLiteral(`{${value.map(element).join(',')}}`);
    }
    if (typeof value === 'string') return client.escapeLiteral(value);
    throw new Error(`no literal form for ${typeof value}`);
  };
  await client.query(`SET plan_cache_mode = ${mode}`);
  try {
    await client.query(`PREPARE ${name} AS ${text}`);
    const { rows } = await client.query<{ 'QUERY PLAN': { Plan: PlanNode }[] }>(
      `EXPLAIN (${options.analyze ? 'ANALYZE, ' : ''}FORMAT JSON) EXECUTE ${name}${values.length > 0 ? `(${values.map(literal).join(', ')})` : ''}`,
    );
    await client.query(`DEALLOCATE ${name}`);
    const plan = rows[0]?.['QUERY PLAN'][0]?.Plan;
    if (!plan) throw new Error('no plan');
    return planNodes(plan);
  } finally {
    await client.query('RESET plan_cache_mode');
  }
}

export interface RecordedStatement {
  text: string;
  values: readonly unknown[];
}

/**
 * A stand-in for a pool or client that forwards every query and records its text and values.
 * Pass it where a read model takes its database (query functions take the database first).
 */
export function recordingQueryable<T extends Pick<pg.ClientBase, 'query'>>(db: T): { db: T; statements: RecordedStatement[] } {
  const statements: RecordedStatement[] = [];
  const forward = db.query.bind(db) as (config: unknown, values?: unknown) => unknown;
  const query = (config: string | pg.QueryConfig, values?: readonly unknown[]) => {
    if (typeof config === 'string') statements.push({ text: config, values: values ?? [] });
    else statements.push({ text: config.text, values: (config.values as readonly unknown[] | undefined) ?? values ?? [] });
    return forward(config, values);
  };
  return { db: { query } as unknown as T, statements };
}

/**
 * Plans of every statement that running `text` executes, nested ones included (the
 * statements inside a PL/pgSQL function), as auto_explain reports them to this session.
 * Runs in a transaction that is rolled back, so a claim or a release leaves nothing behind.
 * Needs a superuser (LOAD); the plan tests and the bench have one.
 */
export async function explainNested(client: pg.PoolClient, text: string, values: readonly unknown[], mode: PlanCacheMode): Promise<PlanNode[][]> {
  const plans: PlanNode[][] = [];
  const onNotice = (notice: { message?: string }) => {
    const json = /plan:\s*(\{[\s\S]*\})\s*$/.exec(notice.message ?? '')?.[1];
    if (json) plans.push(planNodes((JSON.parse(json) as { Plan: PlanNode }).Plan));
  };
  client.on('notice', onNotice);
  try {
    await client.query(`LOAD 'auto_explain'`);
    // DISCARD PLANS drops PL/pgSQL's cached plans too, so the function plans afresh in `mode`.
    await client.query(
      `DISCARD PLANS; SET plan_cache_mode = ${mode}; SET auto_explain.log_min_duration = 0; SET auto_explain.log_nested_statements = on;
       SET auto_explain.log_format = json; SET client_min_messages = log`,
    );
    await client.query('BEGIN');
    try {
      await client.query({ text, values: [...values] });
    } finally {
      await client.query('ROLLBACK');
    }
  } finally {
    await client.query('RESET client_min_messages; RESET auto_explain.log_min_duration; RESET plan_cache_mode; DISCARD PLANS');
    client.off('notice', onNotice);
  }
  return plans;
}

const KEY_TABLE = /^idempotency_keys(_p\d{8})?$/;

/**
 * The ways a plan reaches the key table other than through a primary key (the plain table's,
 * or each day partition's): a sequential, sample or TID scan, or any secondary index. Empty
 * for a request-path statement, whatever the statistics say.
 */
export function offPrimaryKey(nodes: PlanNode[]): string[] {
  return nodes.flatMap((node) => {
    const index = node['Index Name'];
    if (index !== undefined) return index.startsWith('idempotency_keys') && !index.endsWith('_pkey') ? [`${node['Node Type']} on ${index}`] : [];
    const relation = node['Relation Name'];
    if (relation === undefined || !KEY_TABLE.test(relation)) return [];
    // The heap side of a bitmap scan is judged by its index scans; ModifyTable by the scan under it.
    return node['Node Type'] === 'ModifyTable' || node['Node Type'] === 'Bitmap Heap Scan' ? [] : [`${node['Node Type']} on ${relation}`];
  });
}
