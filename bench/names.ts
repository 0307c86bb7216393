// The benchmarks `npm run bench` knows, and the choice its arguments make: none runs them all,
// names run those; a name it does not know is an error listing the benches (CONTRACT.md), caught
// before any database starts.

/** Every benchmark's name, in the order `npm run bench` runs them. */
export const BENCH_NAMES = ['lifecycle', 'http', 'sign-in', 'dashboard', 'mysql', 'claims', 'redis', 'redis-cluster', 'sweeper', 'recorder', 'correlation', 'stats', 'partitions', 'partition-probes', 'scale', 'cleanup'] as const;

/** Benches that run only when named (`scale` runs for hours on a Postgres of its own; `cleanup` for half an hour or more on a primary and a standby of its own). */
const ONLY_WHEN_NAMED: readonly BenchName[] = ['scale', 'cleanup'];

export type BenchName = (typeof BENCH_NAMES)[number];

export type BenchChoice = { ok: true; wanted: (name: BenchName) => boolean } | { ok: false; message: string };

function isBenchName(name: string): name is BenchName {
  return (BENCH_NAMES as readonly string[]).includes(name);
}

/** The benches the command line asks for, or a message naming the unknown ones and listing the known. */
export function chooseBenches(args: readonly string[]): BenchChoice {
  const unknown = args.filter((arg) => !isBenchName(arg));
  if (unknown.length > 0) {
    const which = unknown.map((name) => JSON.stringify(name)).join(', ');
    return { ok: false, message: `unknown bench ${which}: the benches are ${BENCH_NAMES.join(', ')} (npm run bench -- NAME runs one; no name runs them all)` };
  }
  const only = new Set<string>(args);
  return { ok: true, wanted: (name) => only.has(name) || (only.size === 0 && !ONLY_WHEN_NAMED.includes(name)) };
}
