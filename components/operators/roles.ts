// The operator roles as the forms offer them, each with what it adds (roles include the ones
// before it). Plain values for the client bundle: the role list in db/schema pulls in Drizzle.
import type { OperatorRole } from '@/server/auth/roles';

export const roleSummaries: Record<OperatorRole, string> = {
  viewer: 'Overview and charts.',
  operator: 'Also key lookup and stale claims (and their release).',
  compliance: 'Also the audit log and exports.',
  admin: 'Everything, including operators and policies.',
};

export const roles = Object.keys(roleSummaries) as OperatorRole[];
