import { describe, expect, it } from 'vitest';
import { toCsv } from '../../server/audit/csv';

describe('toCsv', () => {
  it('quotes what needs quoting and doubles quotes', () => {
    expect(toCsv(['a', 'b'], [['plain', 'with, comma'], ['say "hi"', 'two\nlines']])).toBe('a,b\r\nplain,"with, comma"\r\n"say ""hi""","two\nlines"\r\n');
  });
  it('writes objects as JSON and null as empty', () => {
    expect(toCsv(['x', 'y'], [[{ k: 1 }, null]])).toBe('x,y\r\n"{""k"":1}",\r\n');
  });
  it('writes a time as its ISO 8601 text, unquoted', () => {
    expect(toCsv(['at'], [[new Date('2026-12-06T04:42:00.000Z')]])).toBe('at\r\n2026-12-06T04:42:00.000Z\r\n');
  });
  it('defuses spreadsheet formulas', () => {
    expect(toCsv(['x'], [['=HYPERLINK("http://evil")'], ['+1'], ['-2'], ['@SUM(A1)']])).toBe(`x\r\n"'=HYPERLINK(""http://evil"")"\r\n'+1\r\n'-2\r\n'@SUM(A1)\r\n`);
  });
});
