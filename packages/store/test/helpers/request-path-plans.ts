// The request path's statements, each with values for one existing key, and the check that
// every one of them reaches the key table only through a primary key, in custom and generic
// plan mode. Shared by the plan test (young, grown and large tables, both layouts) and the
// 10-million-row bench.
import { randomBytes, randomUUID } from 'node:crypto';
import type pg from 'pg';
import { explainNested, explainPrepared, offPrimaryKey, type PlanCacheMode, type PlanNode } from './plan';
import { keyReadStatementTexts, partitionedStatementTexts, storeStatementTexts, type KeyIdentity } from '@retrysafe/store/postgres';

export interface RequestPathStatement {
  name: string;
  text: string;
  values: unknown[];
  /** Run through auto_explain: the statement calls a PL/pgSQL function whose statements are judged. */
  nested?: boolean;
}

export function requestPathStatements(layout: 'plain' | 'partitioned', id: KeyIdentity): RequestPathStatement[] {
  // Each statement's parameters in its own order (statements.ts); the service is the last one.
  const key = [id.principalId, id.scope, id.key];
  const claim = [...key, randomBytes(32), randomUUID(), 30_000, 93_600_000, id.service];
  const completion = [...key, 1, 201, 'application/json', Buffer.alloc(1), 'k1', 1, null, id.service];
  const texts = layout === 'partitioned' ? partitionedStatementTexts : storeStatementTexts;
  return [
    { name: 'claim', text: texts.claim, values: claim, nested: layout === 'partitioned' },
    // A new key's claim: the partitioned function's insert branch (the plain claim plans once).
    ...(layout === 'partitioned' ? [{ name: 'claim (new key)', text: texts.claim, values: [id.principalId, id.scope, `new-${randomUUID()}`, ...claim.slice(3)], nested: true }] : []),
    { name: 'read', text: texts.readKey, values: [...key, id.service] },
    { name: 'take over', text: texts.takeOver, values: layout === 'partitioned' ? [...claim.slice(0, 6), 1, id.service] : [...claim.slice(0, 7), 1, id.service] },
    { name: 'complete', text: texts.complete, values: completion },
    { name: 'fail', text: texts.fail, values: [...key, 1, id.service] },
    { name: 'release one stale claim', text: keyReadStatementTexts.releaseStaleClaim, values: [id.principalId, id.service, id.scope, id.key, 'plan-test', 'plan test'], nested: true },
  ];
}

export interface PlanFinding {
  statement: string;
  mode: PlanCacheMode;
  offPrimaryKey: string[];
  /** The scans of the key table, to show what the plan did. */
  scans: string[];
}

function scansOf(nodes: PlanNode[]): string[] {
  return nodes.filter((node) => node['Index Name'] !== undefined || /^idempotency_keys/.test(node['Relation Name'] ?? '')).map((node) => `${node['Node Type']} ${node['Index Name'] ?? node['Relation Name'] ?? ''}`);
}

/** Every request-path statement's plan in both plan cache modes: what it scanned, and what it reached off the primary key. */
export async function checkRequestPathPlans(pool: pg.Pool, layout: 'plain' | 'partitioned', id: KeyIdentity, options: { pooler?: boolean } = {}): Promise<PlanFinding[]> {
  const findings: PlanFinding[] = [];
  const client = await pool.connect();
  try {
    for (const mode of ['force_custom_plan', 'force_generic_plan'] as const) {
      for (const statement of requestPathStatements(layout, id)) {
        // Through a transaction-mode pooler the store's statements are unnamed: Postgres plans
        // each execution afresh with its values (a custom plan, never a generic one). A PL/pgSQL
        // function's own statements are still cached by the server connection, in both modes.
        if (options.pooler && mode === 'force_generic_plan' && !statement.nested) continue;
        const plans = statement.nested ? await explainNested(client, statement.text, statement.values, mode) : [await explainPrepared(client, statement.text, statement.values, mode)];
        const onKeys = plans.filter((nodes) => scansOf(nodes).length > 0);
        if (onKeys.length === 0) throw new Error(`${statement.name}: no plan touched the key table`);
        const nodes = onKeys.flat();
        findings.push({ statement: statement.name, mode, offPrimaryKey: offPrimaryKey(nodes), scans: [...new Set(scansOf(nodes))] });
        const arbiters = nodes.find((node) => node['Conflict Arbiter Indexes'] !== undefined)?.['Conflict Arbiter Indexes'];
        if (arbiters !== undefined && !arbiters.every((index) => index.endsWith('_pkey'))) findings.at(-1)?.offPrimaryKey.push(`conflict arbiter ${arbiters.join(', ')}`);
      }
    }
  } finally {
    client.release();
  }
  return findings;
}
