// Parsing the audit log's URL state on the server: a value that does not parse is dropped
// (the page shows the log without that filter) instead of failing, so a hand-edited link
// still opens. The same limits as the audit API, so what passes here passes there.
import { z } from 'zod';
import type { AuditSearch } from './search-params';

const auditSearchSchema = z.object({
  actor: z.string().trim().min(1).max(254).optional().catch(undefined),
  action: z.string().trim().min(1).max(100).optional().catch(undefined),
  from: z.iso.datetime({ offset: true }).optional().catch(undefined),
  to: z.iso.datetime({ offset: true }).optional().catch(undefined),
  signIns: z.enum(['hide']).optional().catch(undefined),
});

export function parseAuditSearch(params: Record<string, string | string[] | undefined>): AuditSearch {
  const first = (value: string | string[] | undefined) => (Array.isArray(value) ? value[0] : value);
  return auditSearchSchema.parse({ actor: first(params.actor), action: first(params.action), from: first(params.from), to: first(params.to), signIns: first(params.signIns) });
}
