// Every action the audit log records, in one list: writeAudit only accepts these, and the
// audit page offers them as filter suggestions. Plain data with no imports, so a client
// component can use it. 'auth.sign_in' is written by the sign-in hook;
// 'auth.sign_in_failed' and 'auth.sign_in_refused' are aggregated rows (recordSignInAttempt),
// 'stale_claim.release' by the SQL function retrysafe_release_stale_claim_audited (the server's
// migration 0002), the operator.* actions by the operator functions of its migration 0001.
// 'policy.create' was written by the store when it created a policy, until the audit log became
// the server's (store migration 0029): older rows have it; a creation is in the policy's history.
export const auditActions = [
  'auth.sign_in',
  'auth.sign_in_failed',
  'auth.sign_in_locked',
  'auth.sign_in_refused',
  'auth.sign_out',
  'key.lookup',
  'key.list',
  'key.correlation_lookup',
  'key.unrecorded_list',
  'key.reconcile_list',
  'stale_claim.release',
  'operator.create',
  'operator.role',
  'operator.disable',
  'operator.enable',
  'operator.password_change',
  'operator.password_reset',
  'policy.create',
  'policy.change',
  'policy.change_refused',
  'retention.export',
  'audit.export',
  'operators.export',
] as const;

export type AuditAction = (typeof auditActions)[number];
