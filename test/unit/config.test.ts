import { describe, expect, it } from 'vitest';
import { ConfigurationError, readEnvironment as readConfig } from '../../server/config';

const readEnvironment = (source: Record<string, string | undefined>) => readConfig(source as NodeJS.ProcessEnv);

describe('readEnvironment', () => {
  it('applies defaults and treats empty variables as unset', () => {
    expect(readEnvironment({ DATABASE_URL: '', PORT: '' })).toEqual({ PORT: 3000, HOST: '127.0.0.1' });
  });

  it('parses a port and a postgres URL', () => {
    const environment = readEnvironment({ PORT: '8080', DATABASE_URL: 'postgresql://u:p@db:5432/app' });
    expect(environment.PORT).toBe(8080);
    expect(environment.DATABASE_URL).toBe('postgresql://u:p@db:5432/app');
  });

  it.each([{ PORT: '0' }, { PORT: 'http' }, { DATABASE_URL: 'not a url' }])('refuses %o', (source) => {
    expect(() => readEnvironment(source)).toThrow(ConfigurationError);
  });
});
