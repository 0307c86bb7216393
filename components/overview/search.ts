// Parsing the overview's URL state on the server: unknown values fall back to the defaults
// instead of failing the page, so an old or hand-edited link still opens.
import { z } from 'zod';
import { ranges, refreshSettings, type OverviewSearch } from './search-params';
import { serviceNameSchema } from '@/server/service-name';

const overviewSearchSchema = z.object({
  range: z.enum(ranges).catch('1h'),
  service: serviceNameSchema.optional().catch(undefined),
  scope: z.string().min(1).max(200).optional().catch(undefined),
  refresh: z.enum(refreshSettings).catch('30'),
});

export function parseOverviewSearch(params: Record<string, string | string[] | undefined>): OverviewSearch {
  const first = (value: string | string[] | undefined) => (Array.isArray(value) ? value[0] : value);
  return overviewSearchSchema.parse({ range: first(params.range) ?? '1h', service: first(params.service), scope: first(params.scope), refresh: first(params.refresh) ?? '30' });
}
