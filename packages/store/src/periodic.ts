// One way to run something every so often: never two runs at once (a tick that finds the
// previous run still going is skipped), every failure reported, stop() waits for the run in
// flight. Timers are unref'd, so a task never keeps a process alive by itself.

export interface PeriodicTaskOptions {
  /** For error reports. */
  name: string;
  intervalMs: number;
  run: () => Promise<unknown>;
  onError: (error: unknown, task: string) => void;
  /** First run after this long (default: one interval). */
  firstRunAfterMs?: number;
}

export interface PeriodicTask {
  readonly name: string;
  start(): void;
  /** Runs now unless a run is in flight (then waits for that one). */
  runNow(): Promise<void>;
  /** Stops the timer and waits for the run in flight. */
  stop(): Promise<void>;
  readonly running: boolean;
}

export function periodicTask(options: PeriodicTaskOptions): PeriodicTask {
  if (!(options.intervalMs > 0) || !Number.isFinite(options.intervalMs)) throw new RangeError(`${options.name}: intervalMs must be a positive number`);
  let timer: NodeJS.Timeout | null = null;
  let inFlight: Promise<void> | null = null;
  let stopped = true;

  const runNow = (): Promise<void> => {
    inFlight ??= (async () => {
      try {
        await options.run();
      } catch (error) {
        options.onError(error, options.name);
      }
    })().finally(() => {
      inFlight = null;
    });
    return inFlight;
  };

  const schedule = (delayMs: number) => {
    if (stopped) return;
    timer = setTimeout(() => {
      timer = null;
      // Skipped ticks are not queued: the next one is an interval after this run ends.
      void runNow().then(() => schedule(options.intervalMs));
    }, delayMs);
    timer.unref();
  };

  return {
    name: options.name,
    get running() {
      return !stopped;
    },
    start() {
      if (!stopped) return;
      stopped = false;
      schedule(options.firstRunAfterMs ?? options.intervalMs);
    },
    runNow,
    async stop() {
      stopped = true;
      if (timer) clearTimeout(timer);
      timer = null;
      await inFlight;
    },
  };
}
