// The dashboard's pages in navigation order, with the role each needs (from the access table).
import { roleIncludes, type OperatorRole } from '@/server/auth/roles';
import { requiredRole, type OperatorRoute } from './access';
import type { NavLink } from '@/components/nav';

const pages: { href: OperatorRoute; label: string }[] = [
  { href: '/', label: 'Overview' },
  { href: '/keys', label: 'Key lookup' },
  { href: '/claims', label: 'Stale claims' },
  { href: '/retention', label: 'Retention' },
  { href: '/audit', label: 'Audit log' },
  { href: '/access-review', label: 'Access review' },
  { href: '/operators', label: 'Operators' },
];

export function navigationFor(role: OperatorRole): NavLink[] {
  return pages.filter((page) => roleIncludes(role, requiredRole(page.href))).map(({ href, label }) => ({ href, label }));
}
