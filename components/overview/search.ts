// Reading the overview's URL state on the server: the first value of each parameter, checked
// against the names the overview knows (correctOverviewSearch), so an old or hand-edited link
// still opens, and says what it corrected.
import { correctOverviewSearch, type CorrectedSearch, type KnownNames } from './search-params';

export function parseOverviewSearch(params: Record<string, string | string[] | undefined>, names: KnownNames): CorrectedSearch {
  const first = (value: string | string[] | undefined) => (Array.isArray(value) ? value[0] : value);
  return correctOverviewSearch({ range: first(params.range), service: first(params.service), scope: first(params.scope), refresh: first(params.refresh), from: first(params.from), to: first(params.to), compare: first(params.compare) }, names);
}
