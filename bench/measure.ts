// Closed-loop load: N workers, each issuing one operation after another for a fixed
// time, recording every operation's latency. Throughput and percentiles per run.
import { readFileSync } from 'node:fs';

export interface RunResult {
  operations: number;
  seconds: number;
  perSecond: number;
  p50Ms: number;
  p99Ms: number;
}

/** The p-th percentile of values sorted ascending (NaN for none). */
export function percentile(sorted: Float64Array, p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? NaN;
}

/** Like runClosedLoop, but measures for as long as `during` takes, and returns its result too. */
export async function runWhile<T>(
  workers: number,
  during: () => Promise<T>,
  operation: (worker: number, iteration: number) => Promise<void>,
): Promise<{ run: RunResult; value: T }> {
  const latencies: number[] = [];
  let stop = false;
  const loop = async (worker: number) => {
    for (let iteration = 0; !stop; iteration += 1) {
      const started = performance.now();
      await operation(worker, iteration);
      latencies.push(performance.now() - started);
    }
  };
  const running = Array.from({ length: workers }, (_, worker) => loop(worker));
  const began = performance.now();
  const value = await during();
  const seconds = (performance.now() - began) / 1000;
  stop = true;
  await Promise.all(running);
  const sorted = Float64Array.from(latencies).sort();
  return {
    value,
    run: { operations: latencies.length, seconds, perSecond: latencies.length / seconds, p50Ms: percentile(sorted, 50), p99Ms: percentile(sorted, 99) },
  };
}

export async function runClosedLoop(
  workers: number,
  durationMs: number,
  operation: (worker: number, iteration: number) => Promise<void>,
  warmupMs = 300,
  /** Told when the measured window opens and closes (to read counters over exactly that window). */
  onWindow?: (edge: 'open' | 'close') => void,
): Promise<RunResult> {
  const latencies: number[] = [];
  let measuring = false;
  let stop = false;
  const loop = async (worker: number) => {
    for (let iteration = 0; !stop; iteration += 1) {
      const started = performance.now();
      await operation(worker, iteration);
      if (measuring) latencies.push(performance.now() - started);
    }
  };
  const running = Array.from({ length: workers }, (_, worker) => loop(worker));
  await new Promise((done) => setTimeout(done, warmupMs));
  measuring = true;
  onWindow?.('open');
  const began = performance.now();
  await new Promise((done) => setTimeout(done, durationMs));
  measuring = false;
  onWindow?.('close');
  const seconds = (performance.now() - began) / 1000;
  stop = true;
  await Promise.all(running);
  const sorted = Float64Array.from(latencies).sort();
  return { operations: latencies.length, seconds, perSecond: latencies.length / seconds, p50Ms: percentile(sorted, 50), p99Ms: percentile(sorted, 99) };
}

export function formatRun(label: string, run: RunResult): string {
  return `${label.padEnd(34)} ${run.perSecond.toFixed(0).padStart(8)} /s   p50 ${run.p50Ms.toFixed(2).padStart(6)} ms   p99 ${run.p99Ms.toFixed(2).padStart(6)} ms`;
}

/** The mean of several runs of the same measurement, field by field. */
export function meanRun(runs: RunResult[]): RunResult {
  const average = (pick: (run: RunResult) => number) => runs.reduce((sum, run) => sum + pick(run), 0) / runs.length;
  return {
    operations: average((run) => run.operations),
    seconds: average((run) => run.seconds),
    perSecond: average((run) => run.perSecond),
    p50Ms: average((run) => run.p50Ms),
    p99Ms: average((run) => run.p99Ms),
  };
}

/** runClosedLoop with the process's Node CPU (user + system) per operation over exactly the measured window, in microseconds. */
export async function runClosedLoopWithCpu(
  workers: number,
  durationMs: number,
  operation: (worker: number, iteration: number) => Promise<void>,
  warmupMs = 300,
  /** Told when the measured window opens and closes, as runClosedLoop's (e.g. to read a server's CPU over the same window). */
  onWindow?: (edge: 'open' | 'close') => void,
): Promise<{ run: RunResult; cpuMicrosPerRequest: number }> {
  let started: NodeJS.CpuUsage | undefined;
  let used: NodeJS.CpuUsage | undefined;
  const run = await runClosedLoop(workers, durationMs, operation, warmupMs, (edge) => {
    if (edge === 'open') started = process.cpuUsage();
    else used = process.cpuUsage(started);
    onWindow?.(edge);
  });
  return { run, cpuMicrosPerRequest: used ? (used.user + used.system) / run.operations : NaN };
}

/** A process's own CPU time so far (user and system, /proc/<pid>/stat in clock ticks of 10 ms), in microseconds; 0 when it is gone. */
export function processCpuUs(pid: number | undefined): number {
  if (pid === undefined) return 0;
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    // Fields 14 and 15 of stat(5), counted from the state (field 3) here; USER_HZ is 100 on Linux.
    return ((Number(fields[11]) + Number(fields[12])) * 1e6) / 100;
  } catch {
    return 0;
  }
}
