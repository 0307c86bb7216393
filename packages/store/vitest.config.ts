import { defaultServerConditions } from 'vite';
import { defineConfig } from 'vitest/config';

// The package's own tests: `npm test` here (or `npm test -w @retrysafe/store` from the root),
// and part of the root's `npm test` as the project `store`. They load the package from its
// TypeScript sources (the `retrysafe-source` export condition); test/integration/package.test.ts
// installs the packed tarball into an empty project, as an adopter gets it. A Postgres of their
// own (embedded, or TEST_DATABASE_URL) with the package's migrations only: nothing of the
// Retrysafe server's.
const conditions = ['retrysafe-source', ...defaultServerConditions];

export default defineConfig({
  resolve: { conditions },
  ssr: { resolve: { conditions, externalConditions: ['retrysafe-source'] } },
  test: {
    name: 'store',
    root: import.meta.dirname,
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/setup/global.ts'],
    testTimeout: 30_000,
    hookTimeout: 600_000,
    pool: 'forks',
  },
});
