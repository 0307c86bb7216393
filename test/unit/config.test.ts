import { describe, expect, it } from 'vitest';
import { ConfigurationError, readEnvironment as readConfig } from '../../server/config';

const readEnvironment = (source: Record<string, string | undefined>) => readConfig(source as NodeJS.ProcessEnv);

describe('readEnvironment', () => {
  it('applies defaults and treats empty variables as unset', () => {
    const environment = readEnvironment({ DATABASE_URL: '', PORT: '' });
    expect(environment.DATABASE_URL).toBeUndefined();
    expect(environment.PORT).toBe(3000);
    expect(environment.HOST).toBe('127.0.0.1');
  });

  it('parses a port and a postgres URL', () => {
    const environment = readEnvironment({ PORT: '8080', DATABASE_URL: 'postgresql://u:p@db:5432/app' });
    expect(environment.PORT).toBe(8080);
    expect(environment.DATABASE_URL).toBe('postgresql://u:p@db:5432/app');
  });

  it.each([
    { PORT: '0' },
    { PORT: 'http' },
    { DATABASE_URL: 'not a url' },
    { IDEMPOTENCY_SECRET: 'short' },
    { RESPONSE_ENCRYPTION_KEYS: 'k1:dG9vLXNob3J0' },
    { RESPONSE_ENCRYPTION_KEYS: `k1:${Buffer.alloc(32).toString('base64')},k1:${Buffer.alloc(32).toString('base64')}` },
    { DEMO_TRAFFIC: 'yes' },
    { ALERT_THRESHOLDS: 'not json' },
    { ALERT_THRESHOLDS: '{"claimP99ObjectiveMs": -1}' },
    { ALERT_THRESHOLDS: '{"unknownThreshold": 1}' },
  ])('refuses %o', (source) => {
    expect(() => readEnvironment(source)).toThrow(ConfigurationError);
  });

  it('reads alert threshold overrides as JSON', () => {
    expect(readEnvironment({ ALERT_THRESHOLDS: '{"claimP99ObjectiveMs": 30, "mismatchShare": 0.01}' }).ALERT_THRESHOLDS).toEqual({
      claimP99ObjectiveMs: 30,
      mismatchShare: 0.01,
    });
  });

  it('parses encryption keys, first one first, and never echoes a value it refuses', () => {
    const a = Buffer.alloc(32, 1).toString('base64');
    const b = Buffer.alloc(32, 2).toString('base64');
    const keys = readEnvironment({ RESPONSE_ENCRYPTION_KEYS: `new:${b}, old:${a}` }).RESPONSE_ENCRYPTION_KEYS;
    expect(keys?.map((key) => key.id)).toEqual(['new', 'old']);
    expect(keys?.[1]?.key.equals(Buffer.alloc(32, 1))).toBe(true);
    expect(() => readEnvironment({ IDEMPOTENCY_SECRET: 'hunter2' })).toThrow(/IDEMPOTENCY_SECRET/);
    try {
      readEnvironment({ IDEMPOTENCY_SECRET: 'hunter2' });
    } catch (error) {
      expect(String(error)).not.toContain('hunter2');
    }
  });
});
