// The floors of ARCHITECTURE.md are lint rules (eslint.config.mjs): a module importing a higher
// floor fails `npm run lint`. Each case lints a snippet as if it sat at `filePath`, with the
// repo's own config (type information off: the import rules need none).
import { fileURLToPath } from 'node:url';
import { ESLint } from 'eslint';
import tseslint from 'typescript-eslint';
import { describe, expect, it } from 'vitest';

const RULE = '@typescript-eslint/no-restricted-imports';
const eslint = new ESLint({ cwd: fileURLToPath(new URL('../..', import.meta.url)), overrideConfig: [tseslint.configs.disableTypeChecked] });

/** The import specifiers the floor rule refuses in `code` at `filePath`. */
async function refused(filePath: string, code: string): Promise<string[]> {
  const [result] = await eslint.lintText(code, { filePath });
  return (result?.messages ?? []).filter((message) => message.ruleId === RULE).map((message) => /'([^']+)' import is restricted/.exec(message.message)?.[1] ?? message.message);
}

describe('import floors', () => {
  it('the store package imports nothing outside itself', async () => {
    expect(await refused('packages/store/src/a.ts', "import { logger } from '../../../server/logging';\nimport { createPool } from '@/db/client';\nexport { logger, createPool };\n")).toEqual(['../../../server/logging', '@/db/client']);
    expect(await refused('packages/store/src/adapters/a.ts', "export { x } from '../../../../app/_lib/services';\n")).toEqual(['../../../../app/_lib/services']);
    expect(await refused('packages/store/src/adapters/a.ts', "import type { IdempotencyStore } from '../store.js';\nimport pg from 'pg';\nexport type S = IdempotencyStore;\nexport { pg };\n")).toEqual([]);
  });

  it('db/ imports neither server/, app/ nor components/', async () => {
    expect(await refused('db/a.ts', "import { logger } from '../server/logging';\nexport { logger };\n")).toEqual(['../server/logging']);
    expect(await refused('db/schema/a.ts', "import type { Environment } from '../../server/config';\nimport { x } from '@/components/nav';\nexport type E = Environment;\nexport { x };\n")).toEqual(['../../server/config', '@/components/nav']);
    expect(await refused('db/a.ts', "import { ConfigurationError } from './settings';\nimport { detectLayout } from '@retrysafe/store';\nexport { ConfigurationError, detectLayout };\n")).toEqual([]);
  });

  it('server/ imports neither app/ nor components/', async () => {
    expect(await refused('server/metrics/a.ts', "import { ownerPool } from '../../app/_lib/services';\nimport { Nav } from '@/components/nav';\nexport { ownerPool, Nav };\n")).toEqual(['../../app/_lib/services', '@/components/nav']);
    expect(await refused('server/a.ts', "import { createPool } from '../db/client';\nimport { logger } from './logging';\nexport { createPool, logger };\n")).toEqual([]);
  });

  it('client components import no server code, only its types and the modules shared with them', async () => {
    const code = [
      "'use client';",
      "import { ownerPool } from '@/app/_lib/services';",
      "import 'server-only';",
      "import { logger } from '../../server/logging';",
      "import { createPool } from '@/db/client';",
      'export { ownerPool, logger, createPool };',
      '',
    ].join('\n');
    expect(await refused('components/keys/a.tsx', code)).toEqual(['@/app/_lib/services', 'server-only', '../../server/logging', '@/db/client']);
    const allowed = [
      "'use client';",
      "import type { OverviewJson } from '@/server/metrics/overview';",
      "import type { SignInState } from '@/app/login/actions';",
      "import { durationWords } from '@/server/retention/policy-words';",
      "import { auditActions } from '@/server/audit/actions';",
      "import { formatCount } from '../overview/format';",
      'export type T = [OverviewJson, SignInState];',
      'export { durationWords, auditActions, formatCount };',
      '',
    ].join('\n');
    expect(await refused('components/keys/a.tsx', allowed)).toEqual([]);
  });

  it('a module shared with client components imports nothing', async () => {
    expect(await refused('server/audit/actions.ts', "import { z } from 'zod';\nexport const s = z.string();\n")).toEqual(['zod']);
  });
});

describe('process-wide globals', () => {
  const GLOBAL_RULE = 'no-restricted-syntax';
  const globals = async (filePath: string, code: string) => {
    const [result] = await eslint.lintText(code, { filePath });
    return (result?.messages ?? []).filter((message) => message.ruleId === GLOBAL_RULE).length;
  };
  const snippet = "const slot = Symbol.for('retrysafe.services');\nexport const held = (globalThis as Record<symbol, unknown>)[slot];\n";

  it('refuses a Symbol.for global in app/, server/, scripts/ and the package', async () => {
    for (const filePath of ['app/_lib/a.ts', 'server/a.ts', 'scripts/a.ts', 'packages/store/src/a.ts']) expect(await globals(filePath, snippet), filePath).toBe(1);
  });

  it('allows the few that separate bundles make unavoidable', async () => {
    for (const filePath of ['server/runtime-bridge.ts', 'server/auth/passwords.ts', 'packages/store/src/adapters/express.ts']) expect(await globals(filePath, snippet), filePath).toBe(0);
  });
});
