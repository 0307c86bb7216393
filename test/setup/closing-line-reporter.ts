// Prints one plain line at the end of a run, `N passed, N failed, N skipped`, which CI
// reads (vitest's own summary is not a line it recognises). A file that failed without a
// failing test (it did not load, or a beforeAll hook threw and its tests were skipped)
// counts as one failure, so a broken suite can never read as green. Before it, one
// `FAILED: file > test: first line of the error` line per failure, which CI repeats at its
// end: with two runs side by side, a failure's own lines are far up in the log.
import { relative } from 'node:path';
import type { Reporter, SerializedError, TestModule } from 'vitest/node';

function firstLine(errors: ReadonlyArray<{ message?: string }> | undefined): string {
  const message = errors?.[0]?.message ?? 'no error recorded';
  return (message.split('\n').find((line) => line.trim() !== '') ?? message).trim().slice(0, 300);
}

export default class ClosingLineReporter implements Reporter {
  onTestRunEnd(testModules: ReadonlyArray<TestModule>, unhandledErrors: ReadonlyArray<SerializedError>): void {
    let passed = 0;
    let failed = unhandledErrors.length;
    let skipped = 0;
    const failures: string[] = unhandledErrors.map((error) => `FAILED: unhandled error: ${firstLine([error])}`);
    for (const module of testModules) {
      const file = relative(process.cwd(), module.moduleId);
      let failedHere = 0;
      for (const test of module.children.allTests()) {
        const result = test.result();
        if (result.state === 'passed') passed += 1;
        else if (result.state === 'failed') {
          failedHere += 1;
          failures.push(`FAILED: ${file} > ${test.fullName}: ${firstLine(result.errors)}`);
        } else skipped += 1;
      }
      if (failedHere === 0 && module.state() === 'failed') {
        failedHere = 1;
        failures.push(`FAILED: ${file} (the file, not a test): ${firstLine(module.errors())}`);
      }
      failed += failedHere;
    }
    const listed = failures.length > 0 ? `\n${failures.join('\n')}` : '';
    process.stdout.write(`${listed}\n${passed} passed, ${failed} failed, ${skipped} skipped\n`);
  }
}
