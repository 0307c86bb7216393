import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';

export default defineConfig({
  resolve: { alias: { '@': fileURLToPath(new URL('./', import.meta.url)) } },
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
