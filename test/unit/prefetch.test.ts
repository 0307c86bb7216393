// A page's failed server prefetch is logged with the page and the reason, and never rethrown;
// the reason follows describeError (a database error's message may quote input).
import { describe, expect, it } from 'vitest';
import { captureLog } from '../helpers/log-capture';
import { reportPrefetchFailure } from '../../server/prefetch';

describe('reportPrefetchFailure', () => {
  it('writes one JSON line naming the page and the reason, and lets the render go on', async () => {
    const { log, lines } = captureLog();
    // As a page does: the rejection is handled, so the render goes on.
    await expect(Promise.reject(new Error('connection refused')).catch(reportPrefetchFailure('/audit', log))).resolves.toBeUndefined();
    expect(lines).toHaveLength(1);
    expect(JSON.parse(lines[0] ?? '{}')).toMatchObject({ level: 'error', page: '/audit', error: { name: 'Error', message: 'connection refused' } });
  });

  it('logs a database error by its SQLSTATE, never its message (which may quote input)', async () => {
    const { log, lines } = captureLog();
    const error = Object.assign(new Error('invalid input syntax for type uuid: "SENTINEL-input"'), { code: '22P02', severity: 'ERROR', routine: 'string_to_uuid' });
    await Promise.reject(error).catch(reportPrefetchFailure('/keys', log));
    expect(lines.join('')).not.toContain('SENTINEL');
    expect(JSON.parse(lines[0] ?? '{}')).toMatchObject({ page: '/keys', error: { sqlstate: '22P02', routine: 'string_to_uuid' } });
  });
});
