import { fileURLToPath } from 'node:url';
import { defaultServerConditions } from 'vite';
import { defineConfig } from 'vitest/config';

// Tests load @retrysafe/store from its TypeScript sources (the package's `retrysafe-source`
// export condition); the Next build and adopters load its built dist/, and a test of its own
// installs the packed tarball into an empty project.
const conditions = ['retrysafe-source', ...defaultServerConditions];

export default defineConfig({
  resolve: { alias: { '@': fileURLToPath(new URL('./', import.meta.url)) }, conditions },
  ssr: { resolve: { conditions, externalConditions: ['retrysafe-source'] } },
  test: {
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/setup/global.ts'],
    // The default reporter for people; the closing line (`N passed, N failed`) for CI.
    reporters: ['default', './test/setup/closing-line-reporter.ts'],
    testTimeout: 30_000,
    // Browser tests build and start the app in beforeAll.
    hookTimeout: 600_000,
    pool: 'forks',
  },
});
