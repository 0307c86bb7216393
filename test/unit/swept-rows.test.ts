// The overview's "Last sweep" names a run's rows as the layout removes them: in the partitioned
// layout a run drops ended day partitions and deletes the keys promised less than a day (the
// sweeper's walk), so "rows dropped with their partition", said of a walk's one deleted key in
// the newcomer check on PostgreSQL 15, was wrong; one row is "row".
import { describe, expect, it } from 'vitest';
import { formatSweptRows } from '../../components/overview/format';

describe('formatSweptRows', () => {
  it('says deleted in the plain layout, singular for one row', () => {
    expect(formatSweptRows(1, 'plain')).toBe('1 row deleted');
    expect(formatSweptRows(0, 'plain')).toBe('0 rows deleted');
    expect(formatSweptRows(12_345, 'plain')).toBe('12,345 rows deleted');
  });

  it('names both ways rows leave in the partitioned layout', () => {
    expect(formatSweptRows(1, 'partitioned')).toBe('1 row deleted (ended day partitions dropped, keys promised less than a day deleted)');
    expect(formatSweptRows(2, 'partitioned')).not.toMatch(/dropped with their partition/);
  });
});
