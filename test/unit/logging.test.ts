import { Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { createLogger } from '../../server/logging';

describe('logger', () => {
  it('redacts credentials, keys and bodies wherever they appear in a line', () => {
    const lines: string[] = [];
    const destination = new Writable({
      write(chunk: Buffer, _encoding, done) {
        lines.push(chunk.toString());
        done();
      },
    });
    const log = createLogger({ destination });
    log.info(
      {
        headers: { authorization: 'Bearer SENTINEL-1', cookie: 'retrysafe.session_token=SENTINEL-2' },
        request: { key: 'SENTINEL-3', body: 'SENTINEL-4', password: 'SENTINEL-5' },
        responseBody: 'SENTINEL-6',
        scope: 'POST /api/v1/payments',
      },
      'request failed',
    );
    const line = lines.join('');
    expect(line).not.toMatch(/SENTINEL/);
    expect(JSON.parse(line)).toMatchObject({ level: 'info', msg: 'request failed', scope: 'POST /api/v1/payments', responseBody: '[redacted]' });
  });
});
