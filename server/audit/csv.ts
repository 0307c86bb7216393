// CSV for compliance exports (RFC 4180: comma-separated, CRLF, fields quoted when needed).
// A cell that a spreadsheet would run as a formula (= + - @, tab, CR) is prefixed with a
// quote mark, so an actor name or reason cannot execute on the reviewer's machine.
const FORMULA = /^[=+\-@\t\r]/;

function cell(value: unknown): string {
  // A time is its ISO 8601 text (JSON.stringify would quote it, and the CSV quoting double that).
  let text = value === null || value === undefined ? '' : typeof value === 'string' ? value : value instanceof Date ? value.toISOString() : JSON.stringify(value);
  if (FORMULA.test(text)) text = `'${text}`;
  return /[",\r\n]/.test(text) ? `"${text.replaceAll('"', '""')}"` : text;
}

export function toCsv(header: readonly string[], rows: readonly (readonly unknown[])[]): string {
  return [header, ...rows].map((row) => row.map(cell).join(',')).join('\r\n') + '\r\n';
}
