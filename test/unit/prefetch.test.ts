// A page's failed server prefetch is logged with the page and the reason, and never rethrown.
import { describe, expect, it } from 'vitest';
import { captureLog } from '../helpers/log-capture';
import { reportPrefetchFailure } from '../../server/prefetch';

describe('reportPrefetchFailure', () => {
  it('writes one JSON line naming the page and the reason, and lets the render go on', async () => {
    const { log, lines } = captureLog();
    // As a page does: the rejection is handled, so the render goes on.
    await expect(Promise.reject(new Error('connection refused')).catch(reportPrefetchFailure('/audit', log))).resolves.toBeUndefined();
    expect(lines).toHaveLength(1);
    expect(JSON.parse(lines[0] ?? '{}')).toMatchObject({ level: 'error', page: '/audit', reason: 'Error: connection refused' });
  });
});
