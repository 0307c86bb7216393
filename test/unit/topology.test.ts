// Which connection a session duty gets (db/topology.ts) and where npm start's self-check goes
// (server/http-host.ts): pure choices from the settings.
import { describe, expect, it } from 'vitest';
import { SessionDutyRefused, sessionUrl } from '../../db/topology';
import { allowedHosts, isAllowedHost, selfCheckTarget, selfOrigin } from '../../server/http-host';

describe('sessionUrl', () => {
  const url = 'postgres://app@pooler:6432/app';
  const direct = 'postgres://app@primary:5432/app';

  it('is DATABASE_DIRECT_URL when set, whatever DATABASE_URL is', () => {
    expect(sessionUrl({ DATABASE_POOLER: 'transaction', DATABASE_DIRECT_URL: direct }, url, 'The sweeper')).toBe(direct);
    expect(sessionUrl({ DATABASE_DIRECT_URL: direct }, url, 'The sweeper')).toBe(direct);
  });

  it('is DATABASE_URL when it is direct', () => {
    expect(sessionUrl({}, url, 'The sweeper')).toBe(url);
  });

  it('refuses, saying why and what to set, when DATABASE_URL is a transaction pooler and no direct URL is set', () => {
    expect(() => sessionUrl({ DATABASE_POOLER: 'transaction' }, url, 'The sweeper')).toThrow(SessionDutyRefused);
    expect(() => sessionUrl({ DATABASE_POOLER: 'transaction' }, url, 'The sweeper')).toThrow(
      /^The sweeper refused: it holds a session advisory lock across transactions, which the transaction pooler at DATABASE_URL \(DATABASE_POOLER=transaction\) does not keep; set DATABASE_DIRECT_URL/,
    );
  });
});

describe("npm start's self-check", () => {
  it('is sent with a Host the server answers for outside embedded mode, PUBLIC_URL unset', () => {
    const environment = { PORT: 4100, HOST: '127.0.0.1', PUBLIC_URL: undefined, RETRYSAFE_EMBEDDED: false };
    const target = selfCheckTarget(environment);
    expect(target).toEqual({ url: 'http://127.0.0.1:4100/api/health', host: 'localhost:4100' });
    expect(isAllowedHost(target.host, allowedHosts(environment))).toBe(true);
  });

  it("uses PUBLIC_URL's host, and reaches a wildcard bind on loopback", () => {
    const environment = { PORT: 3000, HOST: '0.0.0.0', PUBLIC_URL: 'https://retrysafe.example.com', RETRYSAFE_EMBEDDED: false };
    const target = selfCheckTarget(environment);
    expect(target).toEqual({ url: 'http://127.0.0.1:3000/api/health', host: 'retrysafe.example.com' });
    expect(isAllowedHost(target.host, allowedHosts(environment))).toBe(true);
    expect(selfCheckTarget({ ...environment, HOST: '::' }).url).toBe('http://[::1]:3000/api/health');
  });
});

describe('allowedHosts', () => {
  it("answers PUBLIC_URL's host and the address Next fetches itself at (HOST:PORT), and the loopback names only in embedded mode", () => {
    const behindProxy = allowedHosts({ PORT: 3000, HOST: '127.0.0.1', PUBLIC_URL: 'https://retrysafe.example', RETRYSAFE_EMBEDDED: false });
    expect([...behindProxy].sort()).toEqual(['127.0.0.1:3000', 'retrysafe.example']);
    expect(isAllowedHost('localhost:3000', behindProxy)).toBe(false);
    expect(isAllowedHost('rebound.example:3000', behindProxy)).toBe(false);
    // A wildcard bind reaches itself on loopback (as next start does); the wildcard itself is no Host.
    expect([...allowedHosts({ PORT: 3000, HOST: '::', PUBLIC_URL: undefined, RETRYSAFE_EMBEDDED: false })].sort()).toEqual(['[::1]:3000', 'localhost:3000']);
    expect([...allowedHosts({ PORT: 3000, HOST: '0.0.0.0', PUBLIC_URL: undefined, RETRYSAFE_EMBEDDED: false })].sort()).toEqual(['127.0.0.1:3000', 'localhost:3000']);
    expect([...allowedHosts({ PORT: 3000, HOST: '0.0.0.0', PUBLIC_URL: undefined, RETRYSAFE_EMBEDDED: true })].sort()).toEqual(['127.0.0.1:3000', '[::1]:3000', 'localhost:3000']);
    expect(selfOrigin({ PORT: 3000, HOST: '::1' })).toBe('http://[::1]:3000');
  });
});

describe('DATABASE_POOLER and DATABASE_DIRECT_URL', () => {
  it('are validated, naming the variable', async () => {
    const { readEnvironment } = await import('../../server/config');
    const env = (values: Record<string, string>) => values as unknown as NodeJS.ProcessEnv;
    expect(() => readEnvironment(env({ DATABASE_POOLER: 'session' }))).toThrow(/DATABASE_POOLER: must be transaction or transaction-prepared \(or unset, for a direct connection\)/);
    expect(() => readEnvironment(env({ DATABASE_DIRECT_URL: 'mysql://x' }))).toThrow(/DATABASE_DIRECT_URL: must be a postgres:\/\/ connection URL/);
    expect(readEnvironment(env({ DATABASE_POOLER: 'transaction' })).DATABASE_POOLER).toBe('transaction');
    expect(readEnvironment(env({ DATABASE_POOLER: 'transaction-prepared' })).DATABASE_POOLER).toBe('transaction-prepared');
  });
});
