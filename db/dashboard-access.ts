// Least privilege for the dashboard. It reads through its own database role, which can
// select every key-store column except the response body, cannot write the store at all,
// writes only the audit log, policies and the sign-in throttle, and releases stale claims
// through a SECURITY DEFINER function (the server's, which audits the release). Operators it may read but not write; credentials and
// sessions not even read: sign-in, sessions and every operator change go through the SECURITY
// DEFINER functions of the server's migration 0001, which check the acting session and audit. If dashboard code ever tried
// to read a body, Postgres itself would refuse. The SQL is one text: applied after every
// migration when the owner may create roles, and printed by `npm run cli -- db grants` for
// a DBA when it may not.
import type pg from 'pg';

/** The group role holding the grants (NOLOGIN); a login role is made a member of it. */
export const DASHBOARD_ROLE = 'retrysafe_dashboard';
/** The login role embedded mode and the tests create (DASHBOARD_DATABASE_URL's user there). */
export const DASHBOARD_LOGIN = 'retrysafe_dashboard_login';
/**
 * Sign-in's own role (NOLOGIN): the only one beside the owner that may read a password hash or
 * create, find, extend and end a session. The server reaches it from DATABASE_URL's owner, a
 * member of it, with AUTH_SESSION_OPTIONS (SET ROLE at connect), so a leaked dashboard
 * credential can neither mint a session nor read a hash, and no further URL is needed.
 */
export const AUTH_ROLE = 'retrysafe_auth';
export const AUTH_SESSION_OPTIONS = `-c role=${AUTH_ROLE}`;

/** Every key-store column but response_body: metadata only. */
const keyMetadataColumns = [
  'created_at',
  'expires_at',
  'lease_expires_at',
  'completed_at',
  'principal_id',
  'correlation_id',
  'response_size',
  'attempts',
  'response_status',
  'service',
  'scope',
  'key',
  'state',
  'fingerprint',
  'response_content_type',
  'response_key_id',
  'response_ref',
];

const readOnly = [
  'flow_counts_minute',
  'flow_counts_hour',
  'claim_latency_minute',
  'claim_latency_hour',
  'store_stats',
  'store_stats_scopes',
  'endpoint_policy_history',
  'endpoint_policy_declarations',
  'sweep_runs',
  'sweep_run_scopes',
  'idempotency_key_usage',
  'principal_flow_minute',
  'principal_flow_hour',
  'principal_flow_day',
  'principal_names',
  'flow_counts_series',
  'claim_latency_series',
  // The trace of attempts (migration 0025): no body, no fingerprint.
  'key_attempts',
  'key_attempt_counts',
  // Completions that could not be recorded (migration 0026): metadata only.
  'unrecorded_completions',
  // The Redis reconciler's findings and runs (migration 0027): metadata only.
  'reconcile_findings',
  'reconcile_runs',
  // Each service instance's start with its package version (migration 0029), for the overview's events.
  'service_starts',
];
/** Operators and their sessions through these (the server's migration 0001); each checks who acts and audits. */
const operatorFunctions = [
  'retrysafe_operator_create(text, text, text, text, text, text, text, text)',
  'retrysafe_operator_change(text, text, text, boolean, text)',
  'retrysafe_operator_reset_password(text, text, text, text)',
  'retrysafe_operator_change_password(text, text)',
];
/** Sign-in's: credentials and sessions (the server's migration 0001), for AUTH_ROLE only. */
const authFunctions = [
  'retrysafe_session_create(text, text, text, timestamptz, text, text)',
  'retrysafe_session_find(text[])',
  'retrysafe_session_touch(text, timestamptz)',
  'retrysafe_session_end(text)',
  'retrysafe_operator_credential(text)',
];

/**
 * A function privilege, given or taken only where the function exists: a database an older
 * release migrated (or a test's partial migration) lacks the later functions, and their grants
 * wait for the migration that creates them. The same SQL serves `npm run cli -- db grants`.
 */
function onFunction(verb: 'GRANT' | 'REVOKE', unqualified: string, role: string, schema: 'retrysafe' | 'retrysafe_server' = 'retrysafe'): string {
  const signature = `${schema}.${unqualified}`;
  const statement = verb === 'GRANT' ? `GRANT EXECUTE ON FUNCTION ${signature} TO ${role}` : `REVOKE EXECUTE ON FUNCTION ${signature} FROM ${role}`;
  return `DO $$ BEGIN
       IF to_regprocedure('${signature}') IS NOT NULL THEN ${statement}; END IF;
     END $$`;
}

/** Reading and appending to the audit log (retrysafe_server.audit_log), where it exists yet. */
function auditLogGrants(role: string): string[] {
  return [
    `DO $$ BEGIN
       IF to_regclass('retrysafe_server.audit_log') IS NOT NULL THEN
         GRANT SELECT, INSERT ON retrysafe_server.audit_log TO ${role};
         GRANT USAGE ON SEQUENCE retrysafe_server.audit_log_id_seq TO ${role};
       END IF;
     END $$`,
  ];
}

/**
 * A NOLOGIN group role that may connect and see the store's schema (retrysafe), the demo's
 * (retrysafe_demo, where the demo's migrations made it) and the server's (retrysafe_server), with every table and sequence privilege
 * there revoked (the grants that follow are then exactly its own). Nothing in public is ours.
 */
function groupRoleStatements(role: string, databaseName: string): string[] {
  return [
    `DO $$ BEGIN
       IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '${role}') THEN CREATE ROLE ${role} NOLOGIN; END IF;
     END $$`,
    `GRANT CONNECT ON DATABASE "${databaseName.replaceAll('"', '""')}" TO ${role}`,
    `GRANT USAGE ON SCHEMA retrysafe TO ${role}`,
    `REVOKE ALL ON ALL TABLES IN SCHEMA retrysafe FROM ${role}`,
    `REVOKE ALL ON ALL SEQUENCES IN SCHEMA retrysafe FROM ${role}`,
    `DO $$ BEGIN
       IF to_regnamespace('retrysafe_demo') IS NOT NULL THEN
         GRANT USAGE ON SCHEMA retrysafe_demo TO ${role};
         REVOKE ALL ON ALL TABLES IN SCHEMA retrysafe_demo FROM ${role};
         REVOKE ALL ON ALL SEQUENCES IN SCHEMA retrysafe_demo FROM ${role};
       END IF;
       IF to_regnamespace('retrysafe_server') IS NOT NULL THEN
         GRANT USAGE ON SCHEMA retrysafe_server TO ${role};
         REVOKE ALL ON ALL TABLES IN SCHEMA retrysafe_server FROM ${role};
         REVOKE ALL ON ALL SEQUENCES IN SCHEMA retrysafe_server FROM ${role};
       END IF;
     END $$`,
  ];
}

/** The grants, as statements (idempotent; REVOKE first so the result is exactly this). */
export function dashboardGrantStatements(databaseName: string): string[] {
  const role = DASHBOARD_ROLE;
  return [
    ...groupRoleStatements(role, databaseName),
    // Only the columns the database has yet (an older migration folder lacks later ones, e.g. service).
    `DO $$ BEGIN
       EXECUTE format('GRANT SELECT (%s) ON retrysafe.idempotency_keys TO ${role}', (SELECT string_agg(quote_ident(attname), ', ') FROM pg_attribute
         WHERE attrelid = 'retrysafe.idempotency_keys'::regclass AND attnum > 0 AND NOT attisdropped AND attname = ANY (ARRAY['${keyMetadataColumns.join("', '")}'])));
     END $$`,
    // The demo's tenants (where the demo's migrations made them) by id and name only: never the API key hash.
    `DO $$ BEGIN
       IF to_regclass('retrysafe_demo.tenants') IS NOT NULL THEN
         GRANT SELECT (id, name, created_at, revoked_at) ON retrysafe_demo.tenants TO ${role};
       END IF;
     END $$`,
    // The tables the database has yet (a store set applied only in part lacks the later ones).
    `DO $$ BEGIN
       EXECUTE format('GRANT SELECT ON %s TO ${role}', (SELECT string_agg(t, ', ') FROM unnest(ARRAY['${readOnly.map((table) => `retrysafe.${table}`).join("', '")}']) AS t
         WHERE to_regclass(t) IS NOT NULL));
     END $$`,
    // The server's own records (db/server-migrations), read for the overview's events and the kept-elsewhere services' series.
    `DO $$ BEGIN
       IF to_regclass('retrysafe_server.alert_history') IS NOT NULL THEN
         GRANT SELECT ON retrysafe_server.alert_history TO ${role};
       END IF;
       IF to_regclass('retrysafe_server.kept_elsewhere_samples') IS NOT NULL THEN
         GRANT SELECT ON retrysafe_server.kept_elsewhere_samples TO ${role};
       END IF;
     END $$`,
    // Admins change policies from the dashboard (history and audit in the same transaction).
    `GRANT SELECT, INSERT, UPDATE ON retrysafe.endpoint_policies TO ${role}`,
    `GRANT INSERT ON retrysafe.endpoint_policy_history TO ${role}`,
    `GRANT USAGE ON SEQUENCE retrysafe.endpoint_policy_history_id_seq TO ${role}`,
    // Append-only: a trigger refuses UPDATE and DELETE for every role; this one may not even try.
    // The server's (its migration 0002), where the server's set has made it.
    ...auditLogGrants(role),
    // Operators are read (the list, the role check at sign-in); no column of theirs is secret.
    // Credentials (operator_accounts), sessions and verifications: no privilege at all.
    `GRANT SELECT ON retrysafe_server.operators TO ${role}`,
    `GRANT SELECT, INSERT, UPDATE, DELETE ON retrysafe_server.sign_in_throttle TO ${role}`,
    ...operatorFunctions.map((signature) => onFunction('GRANT', signature, role, 'retrysafe_server')),
    // An operator's release of a stale claim: the server's function, which releases through the
    // store's and writes the audit row in the same transaction; not the store's own, which audits nothing.
    onFunction('GRANT', 'retrysafe_release_stale_claim_audited(uuid, text, text, text, text, text)', role, 'retrysafe_server'),
    onFunction('REVOKE', 'retrysafe_release_stale_claim(uuid, text, text, text, text, text)', role),
    // Failed and refused sign-ins are counted in one aggregated audit row (runs as the owner, bounded).
    onFunction('GRANT', 'retrysafe_audit_sign_in_attempt(text, text, jsonb, jsonb, text, integer)', role, 'retrysafe_server'),
    // Policy changes create the partitions a longer retention needs (runs as the owner, bounded).
    onFunction('GRANT', 'retrysafe_ensure_partitions(integer)', role),
    // Sign-in's role: operators read (who signs in, disabled or not), the sign-in audit row, and
    // the credential and session functions, which the dashboard role no longer has.
    ...authFunctions.map((signature) => onFunction('REVOKE', signature, role, 'retrysafe_server')),
    ...groupRoleStatements(AUTH_ROLE, databaseName),
    `GRANT SELECT ON retrysafe_server.operators TO ${AUTH_ROLE}`,
    ...auditLogGrants(AUTH_ROLE),
    ...authFunctions.map((signature) => onFunction('GRANT', signature, AUTH_ROLE, 'retrysafe_server')),
    // The owner of the tables (DATABASE_URL's role, which migrated them) reaches it by SET ROLE.
    `DO $$ BEGIN
       EXECUTE format('GRANT ${AUTH_ROLE} TO %I', (SELECT tableowner FROM pg_tables WHERE schemaname = 'retrysafe_server' AND tablename = 'operators'));
     END $$`,
  ];
}

export type GrantsResult = { applied: true } | { applied: false; reason: string };

const INSUFFICIENT_PRIVILEGE = '42501';

/**
 * Applies the grants in one transaction (the dashboard never sees a half-granted state).
 * Returns applied: false when this role may not create roles or grant (a managed database):
 * the DBA applies `npm run cli -- db grants` instead.
 */
export async function applyDashboardGrants(client: pg.ClientBase): Promise<GrantsResult> {
  const { rows } = await client.query<{ db: string; exists: boolean; may_create: boolean }>(
    `SELECT current_database() AS db, EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1) AS exists,
            (SELECT rolcreaterole OR rolsuper FROM pg_roles WHERE rolname = current_user) AS may_create`,
    [DASHBOARD_ROLE],
  );
  const state = rows[0];
  if (!state) throw new Error('no database');
  if (!state.exists && !state.may_create) return { applied: false, reason: `role ${DASHBOARD_ROLE} does not exist and the migrating role may not create roles` };
  await client.query('BEGIN');
  try {
    for (const statement of dashboardGrantStatements(state.db)) await client.query(statement);
    await client.query('COMMIT');
    return { applied: true };
  } catch (error) {
    await client.query('ROLLBACK');
    const code = (error as { code?: string }).code;
    // Two databases of one cluster creating the role at once: the other one won.
    if (code === '23505' || code === '42710') return applyDashboardGrants(client);
    if (code === INSUFFICIENT_PRIVILEGE) return { applied: false, reason: (error as Error).message };
    throw error;
  }
}

/**
 * Creates (or re-passwords) the dashboard's login role, a member of the group role, and
 * returns the URL to reach `ownerUrl`'s database with it. Embedded mode and tests.
 */
export async function ensureDashboardLogin(client: pg.ClientBase, ownerUrl: string, password: string): Promise<string> {
  const literal = client.escapeLiteral(password);
  await client.query(
    `DO $$ BEGIN
       IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '${DASHBOARD_LOGIN}') THEN
         CREATE ROLE ${DASHBOARD_LOGIN} LOGIN PASSWORD ${literal} IN ROLE ${DASHBOARD_ROLE};
       ELSE
         ALTER ROLE ${DASHBOARD_LOGIN} LOGIN PASSWORD ${literal};
         GRANT ${DASHBOARD_ROLE} TO ${DASHBOARD_LOGIN};
       END IF;
     END $$`,
  ).catch(async (error: unknown) => {
    // Two processes creating it at once: the other one won; set the password again.
    if ((error as { code?: string }).code !== '23505' && (error as { code?: string }).code !== '42710') throw error;
    await client.query(`ALTER ROLE ${DASHBOARD_LOGIN} LOGIN PASSWORD ${literal}`);
  });
  const url = new URL(ownerUrl);
  url.username = DASHBOARD_LOGIN;
  url.password = password;
  return url.toString();
}
