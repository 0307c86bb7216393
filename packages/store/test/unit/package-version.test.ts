// PACKAGE_VERSION (recorded with each service start) is the version package.json says.
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { expect, it } from 'vitest';
import { PACKAGE_VERSION } from '@retrysafe/store';

it('PACKAGE_VERSION is the version in package.json', async () => {
  const manifest = JSON.parse(await readFile(join(import.meta.dirname, '../../package.json'), 'utf8')) as { version: string };
  expect(PACKAGE_VERSION).toBe(manifest.version);
});
