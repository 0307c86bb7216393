import { describe, expect, it } from 'vitest';
import { captureLog } from '../helpers/log-capture';
import { describeError } from '../../server/logging';

describe('logger', () => {
  it('redacts credentials, keys and bodies wherever they appear in a line', () => {
    const { log, lines } = captureLog();
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

describe('logger redaction at any depth', () => {
  const capture = captureLog;

  it('redacts nested and differently written names, and keeps the rest', () => {
    const { log, text } = capture();
    const cyclic: Record<string, unknown> = { note: 'kept' };
    cyclic.self = cyclic;
    log.error(
      {
        outer: { inner: { deeper: { Authorization: 'Bearer SENTINEL-1', 'Set-Cookie': ['SENTINEL-2'], api_key: 'SENTINEL-3' } } },
        list: [{ IdempotencyKey: 'SENTINEL-4' }, { requestBody: { card: 'SENTINEL-5' } }],
        config: { connection: { DATABASE_URL: 'postgres://u:SENTINEL-6@h/db' } },
        err: Object.assign(new Error('boom'), { password: 'SENTINEL-7' }),
        cyclic,
        scope: 'POST /api/v1/payments',
      },
      'nested',
    );
    const line = text();
    expect(line).not.toMatch(/SENTINEL/);
    const parsed = JSON.parse(line) as { scope: string; cyclic: { note: string }; err: { message: string } };
    expect(parsed.scope).toBe('POST /api/v1/payments');
    expect(parsed.cyclic.note).toBe('kept');
    expect(parsed.err.message).toBe('boom');
  });

  it('redacts compound names, header pairs and bytes, and keeps dates', () => {
    const { log, text } = capture();
    const at = new Date('2026-12-03T10:00:00.000Z');
    log.warn(
      {
        env: { AUTH_SECRET: 'SENTINEL-1', METRICS_TOKEN: 'SENTINEL-2', DASHBOARD_DATABASE_URL: 'postgres://u:SENTINEL-3@h/d', RESPONSE_ENCRYPTION_KEYS: 'k1:SENTINEL-4' },
        secrets: { fingerprintSecret: 'SENTINEL-5', dashboardPassword: 'SENTINEL-6', accessToken: 'SENTINEL-7' },
        rawHeaders: [['Authorization', 'Bearer SENTINEL-8'], ['x-idempotency-key', 'SENTINEL-9'], ['accept', 'text/csv']],
        key: Buffer.from('SENTINEL-10'),
        at,
        count: 3,
      },
      'compound',
    );
    const line = text();
    expect(line).not.toMatch(/SENTINEL/);
    const parsed = JSON.parse(line) as { at: string; count: number; rawHeaders: string[][] };
    expect(parsed.at).toBe(at.toISOString());
    expect(parsed.count).toBe(3);
    expect(parsed.rawHeaders[2]).toEqual(['accept', 'text/csv']);
  });
});


describe('describeError', () => {
  it('keeps a database error to its SQLSTATE and routine, never its message (which may quote input)', () => {
    const error = Object.assign(new Error('invalid input syntax for type uuid: "secret-input"'), { name: 'error', code: '22P02', severity: 'ERROR', routine: 'string_to_uuid' });
    const described = describeError(error);
    expect(described).toEqual({ name: 'error', sqlstate: '22P02', routine: 'string_to_uuid' });
    expect(JSON.stringify(described)).not.toContain('secret-input');
  });

  it('keeps other errors to their name and the first 300 characters of the message', () => {
    expect(describeError(new TypeError(`x${'y'.repeat(400)}`))).toEqual({ name: 'TypeError', message: `x${'y'.repeat(299)}` });
    expect(describeError('a string')).toEqual({ name: 'string' });
  });
});
