// The stale claims of the services whose keys are kept in Redis or MySQL/MariaDB
// (DASHBOARD_KEYS_REDIS, DASHBOARD_KEYS_MYSQL), for the overview's Stale claims check, its alert and
// /api/metrics: per service, its backend's own bounded read (KeyRecordReads.staleClaims: Redis's
// in-flight index by lease end, MySQL's (state, lease_expires_at) index), at most STALE_COUNTED.
// A reader never holds its caller long on a backend that does not answer: each service's read is
// awaited at most `budgetMs`, shared by concurrent callers, and while a backend that did not answer
// last time is still being asked, it is reported unanswered at once. Unanswered is null, never 0.
import type { KeyRecordReads } from '@retrysafe/store';
import { STALE_COUNTED, summariseStale } from './store-elsewhere';

/** How long a caller waits for a backend's stale claims before it reports them unanswered, by default. */
const STALE_ELSEWHERE_BUDGET_MS = 1_000;

export interface StaleElsewhere {
  service: string;
  backend: 'redis' | 'mysql';
  /**
   * Its claims past their lease now: how many (at most STALE_COUNTED; atLeast beyond) and the oldest
   * one's time past its lease (null: none). Null when its backend did not answer (down, cut, timed
   * out, or not within the budget): not known.
   */
  claims: { count: number; atLeast: boolean; oldestPastLeaseSeconds: number | null } | null;
}

/** Reads every kept-elsewhere service's stale claims (of every scope), in service order. */
export type StaleElsewhereReader = () => Promise<StaleElsewhere[]>;

/** A kept-elsewhere service's backend, as KeyBackends has it. */
interface StaleElsewhereSource {
  backend: StaleElsewhere['backend'];
  reads: Pick<KeyRecordReads, 'staleClaims'>;
}

export function staleElsewhereReader(sources: ReadonlyMap<string, StaleElsewhereSource>, options: { budgetMs?: number } = {}): StaleElsewhereReader {
  const budgetMs = options.budgetMs ?? STALE_ELSEWHERE_BUDGET_MS;
  const state = new Map<string, { pending: Promise<StaleElsewhere['claims']> | null; answering: boolean }>();
  const readOne = async (service: string, source: StaleElsewhereSource): Promise<StaleElsewhere> => {
    let entry = state.get(service);
    if (!entry) {
      entry = { pending: null, answering: true };
      state.set(service, entry);
    }
    const own = entry;
    // Not answering last time and still being asked: unanswered now, without waiting again.
    if (!own.answering && own.pending) return { service, backend: source.backend, claims: null };
    own.pending ??= source.reads
      .staleClaims(STALE_COUNTED, service)
      .then(
        (claims) => {
          own.answering = true;
          return summariseStale(claims, claims.length);
        },
        () => {
          own.answering = false;
          return null;
        },
      )
      .finally(() => {
        own.pending = null;
      });
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<'late'>((resolve) => {
      timer = setTimeout(() => resolve('late'), budgetMs);
    });
    const outcome = await Promise.race([own.pending, late]);
    clearTimeout(timer);
    if (outcome === 'late') {
      own.answering = false;
      return { service, backend: source.backend, claims: null };
    }
    return { service, backend: source.backend, claims: outcome };
  };
  return () => Promise.all([...sources].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([service, source]) => readOne(service, source)));
}
