// The suite's closing table: one row per fault.
import type { FaultResult } from './checks';

const COLUMNS = ['fault', 'requests', 'keys', 'final', 'dup', 'lost', 'replay≠', '500', '5xx/conn by status', 'hangs', 'recovery', 'recovered w/o restart', 'metrics lost', 'p99 2xx', 'result'] as const;

function cells(result: FaultResult): string[] {
  if (result.skipped) return [result.fault, '-', '-', '-', '-', '-', '-', '-', '-', '-', '-', '-', '-', '-', `SKIPPED: ${result.skipped}`];
  const statuses = Object.entries(result.statuses5xx)
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([status, count]) => `${status}:${count}`)
    .join(' ');
  return [
    result.fault,
    String(result.requests),
    String(result.keys),
    String(result.finalAnswers),
    String(result.duplicates),
    String(result.lost),
    String(result.replayMismatches),
    String(result.status500),
    statuses || '-',
    String(result.hangs),
    result.recoveryMs === null ? '-' : `${(result.recoveryMs / 1000).toFixed(2)} s`,
    result.recoveredWithoutRestart || '-',
    result.metricsLost === null ? '-' : `${result.metricsLost}${result.metricsBound === null ? '' : ` (≤${result.metricsBound})`}`,
    result.p99Ms === null ? '-' : `${result.p99Ms} ms`,
    result.failures.length === 0 ? 'ok' : 'FAIL',
  ];
}

export function printTable(results: readonly FaultResult[], print: (line: string) => void): void {
  const rows = [COLUMNS as readonly string[], ...results.map(cells)];
  const widths = COLUMNS.map((_, column) => Math.max(...rows.map((row) => (row[column] ?? '').length)));
  const line = (row: readonly string[]) => `| ${row.map((cell, column) => cell.padEnd(widths[column] ?? 0)).join(' | ')} |`;
  print('');
  print(line(rows[0] ?? []));
  print(`|${widths.map((width) => '-'.repeat(width + 2)).join('|')}|`);
  for (const row of rows.slice(1)) print(line(row));
  for (const result of results) {
    for (const note of result.notes) print(`  ${result.fault}: ${note}`);
  }
  print('');
}
