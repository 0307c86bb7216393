// periodicTask: one run at a time, every failure reported, stop() waits for the run in flight.
import { describe, expect, it } from 'vitest';
import { periodicTask } from '@retrysafe/store';

const sleep = (ms: number) => new Promise((done) => setTimeout(done, ms));

describe('periodicTask', () => {
  it('never overlaps a run with itself, however slow a run is', async () => {
    let active = 0;
    let most = 0;
    let runs = 0;
    const task = periodicTask({
      name: 'slow',
      intervalMs: 5,
      firstRunAfterMs: 0,
      run: async () => {
        active += 1;
        most = Math.max(most, active);
        runs += 1;
        await sleep(30);
        active -= 1;
      },
      onError: () => undefined,
    });
    task.start();
    await Promise.all([task.runNow(), task.runNow(), sleep(120)]);
    await task.stop();
    expect(most).toBe(1);
    expect(runs).toBeGreaterThanOrEqual(2);
  });

  it('reports every failure with its name and keeps its schedule', async () => {
    const errors: string[] = [];
    let runs = 0;
    const task = periodicTask({
      name: 'flaky',
      intervalMs: 10,
      firstRunAfterMs: 0,
      run: () => {
        runs += 1;
        return Promise.reject(new Error(`run ${runs}`));
      },
      onError: (error, name) => errors.push(`${name}: ${(error as Error).message}`),
    });
    task.start();
    await sleep(60);
    await task.stop();
    expect(runs).toBeGreaterThanOrEqual(3);
    expect(errors.slice(0, 2)).toEqual(['flaky: run 1', 'flaky: run 2']);
  });

  it('stop() waits for the run in flight and no run starts after it', async () => {
    let finished = false;
    let runs = 0;
    const task = periodicTask({
      name: 'long',
      intervalMs: 5,
      firstRunAfterMs: 0,
      run: async () => {
        runs += 1;
        await sleep(40);
        finished = true;
      },
      onError: () => undefined,
    });
    task.start();
    await sleep(10);
    await task.stop();
    expect(finished).toBe(true);
    const after = runs;
    await sleep(30);
    expect(runs).toBe(after);
    expect(task.running).toBe(false);
  });

  it('refuses an interval that is not a positive number', () => {
    expect(() => periodicTask({ name: 'x', intervalMs: 0, run: () => Promise.resolve(), onError: () => undefined })).toThrow(RangeError);
  });
});
