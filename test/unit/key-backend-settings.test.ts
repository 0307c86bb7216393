// DASHBOARD_KEYS_REDIS's syntax for a Redis Cluster (server/key-backend-settings.ts):
// `service=redis+cluster://[user:password@]host:port|host:port...`, its nodes split by `|` so that
// they cannot be taken for the comma between entries; a bad value refused naming the entry, never
// the value (it may hold a password).
import { describe, expect, it } from 'vitest';
import { ConfigurationError, readEnvironment } from '../../server/config';
import { parseRedisTarget } from '../../server/key-backend-settings';

const env = (variables: Record<string, string>): NodeJS.ProcessEnv => ({ ...variables }) as NodeJS.ProcessEnv;

describe('DASHBOARD_KEYS_REDIS with a Redis Cluster', () => {
  it('reads a cluster as its nodes, with the credentials given once, beside single servers', () => {
    const environment = readEnvironment(
      env({ DASHBOARD_KEYS_REDIS: 'orders=redis+cluster://reader:p%7Cw@10.0.0.1:7000|10.0.0.2:7001|[::1]:7002,cart=redis://cache:6379,pay=rediss+cluster://h1:7000' }),
    );
    const redis = environment.DASHBOARD_KEYS_REDIS;
    expect([...(redis?.keys() ?? [])]).toEqual(['orders', 'cart', 'pay']);
    expect(parseRedisTarget(redis?.get('orders') ?? '')).toEqual({
      kind: 'cluster',
      nodes: ['redis://reader:p%7Cw@10.0.0.1:7000', 'redis://reader:p%7Cw@10.0.0.2:7001', 'redis://reader:p%7Cw@[::1]:7002'],
    });
    expect(parseRedisTarget(redis?.get('cart') ?? '')).toEqual({ kind: 'server', url: 'redis://cache:6379' });
    expect(parseRedisTarget(redis?.get('pay') ?? '')).toEqual({ kind: 'cluster', nodes: ['rediss://h1:7000'] });
  });

  it.each([
    ['no port', 'orders=redis+cluster://secretuser:hunter2secret@h1|h2:7001'],
    ['a path (a cluster has one database)', 'orders=redis+cluster://secretuser:hunter2secret@h1:7000/2'],
    ['an empty node', 'orders=redis+cluster://secretuser:hunter2secret@h1:7000||h2:7001'],
    ['another scheme', 'orders=mysql+cluster://secretuser:hunter2secret@h1:7000'],
  ])('refuses a cluster with %s, naming the entry and not the value', (_, value) => {
    let message = '';
    try {
      readEnvironment(env({ DASHBOARD_KEYS_REDIS: value }));
    } catch (error) {
      expect(error).toBeInstanceOf(ConfigurationError);
      message = (error as Error).message;
    }
    expect(message).toMatch(/^Invalid configuration: DASHBOARD_KEYS_REDIS: the (cluster|URL) of orders must be /);
    expect(message).not.toMatch(/hunter2secret|secretuser/);
  });

  it('keeps a comma for entries: a node list cannot swallow the next service', () => {
    const redis = readEnvironment(env({ DASHBOARD_KEYS_REDIS: 'a=redis+cluster://h1:7000|h2:7000,b=redis+cluster://h3:7000' })).DASHBOARD_KEYS_REDIS;
    expect([...(redis?.entries() ?? [])].map(([service, value]) => [service, parseRedisTarget(value)])).toEqual([
      ['a', { kind: 'cluster', nodes: ['redis://h1:7000', 'redis://h2:7000'] }],
      ['b', { kind: 'cluster', nodes: ['redis://h3:7000'] }],
    ]);
  });
});
