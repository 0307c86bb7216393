import { fileURLToPath } from 'node:url';
import { defaultServerConditions } from 'vite';
import { defineConfig } from 'vitest/config';

// Two projects, one `npm test`: `store`, the package's own tests (packages/store/vitest.config.ts:
// its migrations only, in a Postgres of their own), and `server`, the Retrysafe server's (the
// store's, the demo's and the server's migration sets, the dashboard role). A project's Postgres
// starts only when one of its files runs. Both load @retrysafe/store from its TypeScript sources
// (the package's `retrysafe-source` export condition); the Next build and adopters load its
// built dist/, and a test of the package installs the packed tarball into an empty project.
const conditions = ['retrysafe-source', ...defaultServerConditions];

export default defineConfig({
  test: {
    // The default reporter for people; the closing line (`N passed, N failed`) for CI.
    reporters: ['default', './test/setup/closing-line-reporter.ts'],
    projects: [
      'packages/store',
      {
        resolve: { alias: { '@': fileURLToPath(new URL('./', import.meta.url)) }, conditions },
        ssr: { resolve: { conditions, externalConditions: ['retrysafe-source'] } },
        test: {
          name: 'server',
          include: ['test/**/*.test.ts'],
          globalSetup: ['test/setup/global.ts'],
          testTimeout: 30_000,
          // Browser tests build and start the app in beforeAll.
          hookTimeout: 600_000,
          pool: 'forks',
        },
      },
    ],
  },
});
