// Operator roles, each including the ones before it: viewer (overview and charts) <
// operator (key lookup, stale claims) < compliance (retention review, audit, exports) <
// admin (operators, policy changes). Checked on the server for every page and route.
import { operatorRoles, type OperatorRole } from '../../db/schema/operators';

export { operatorRoles, type OperatorRole };

const rank: Record<OperatorRole, number> = { viewer: 0, operator: 1, compliance: 2, admin: 3 };

export function isOperatorRole(value: unknown): value is OperatorRole {
  return typeof value === 'string' && (operatorRoles as readonly string[]).includes(value);
}

/** Whether `role` includes `required`. An unknown role includes nothing. */
export function roleIncludes(role: unknown, required: OperatorRole): boolean {
  return isOperatorRole(role) && rank[role] >= rank[required];
}
