// ESLint flat config: typescript-eslint with type information for our own code,
// the React hooks rules for components, and the floors of ARCHITECTURE.md as import rules.
// Next 16 no longer lints during build.
import tseslint from 'typescript-eslint';
import reactHooks from 'eslint-plugin-react-hooks';

// The floors, lowest first: packages/* (each owns only itself) < db/ < server/ < app/, with
// components/ (client code) beside app/ and scripts/ on top. A module imports its own floor or
// lower ones, never a higher one. The patterns read import specifiers: '../x' climbs to any
// top-level folder x from any depth ('db/schema/a.ts' importing '../server' is caught too, a
// folder db/server being no better), '@/x' is the root alias (tsconfig paths).
const toTopLevel = (...folders) => `^(?:@/|(?:\\.\\./)+)(?:${folders.join('|')})(?:/|$)`;

/** Files matching `files` may not import what `patterns` names (typescript-eslint's version, for `allowTypeImports`). */
const floor = (files, patterns) => ({
  files,
  rules: { '@typescript-eslint/no-restricted-imports': ['error', { patterns: patterns.map((pattern) => ({ caseSensitive: true, ...pattern })) }] },
});

// A package is published alone: nothing outside its folder exists for an adopter. A file N
// folders below the package root leaves it with N+1 '../'; the root alias always leaves it.
const packageFloor = [0, 1, 2, 3, 4].map((depth) =>
  floor([`packages/*/${'*/'.repeat(depth)}*.{ts,tsx,mts,js,mjs}`], [
    {
      regex: `^(?:@/|(?:\\.\\./){${depth + 1}})`,
      message: 'A package imports only its own files and its dependencies (it is published alone): move what it needs into the package.',
    },
  ]),
);

// Modules client components may take values from: plain data and pure functions with no imports
// (kept so by the rule below), shared by the server's refusals and the dashboard's words.
const SHARED_WITH_CLIENT = ['server/retention/policy-words', 'server/audit/actions'];

export default tseslint.config(
  { ignores: ['packages/*/dist/**', '.next/**', '.build/**', 'node_modules/**', '.data/**', 'artifacts/**', 'next-env.d.ts', 'db/migrations/**', 'docs/api/**'] },
  ...tseslint.configs.strictTypeChecked,
  {
    languageOptions: {
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      '@typescript-eslint/restrict-template-expressions': ['error', { allowNumber: true, allowBoolean: true, allowNullish: true }],
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      // `void promise` is how we mark fire-and-forget on purpose (signal handlers).
      '@typescript-eslint/no-confusing-void-expression': ['error', { ignoreArrowShorthand: true }],
    },
  },
  {
    files: ['**/*.tsx'],
    plugins: { 'react-hooks': reactHooks },
    rules: reactHooks.configs.recommended.rules,
  },
  {
    files: ['**/*.mjs', '**/*.js'],
    extends: [tseslint.configs.disableTypeChecked],
  },
  ...packageFloor,
  floor(['db/**'], [
    {
      regex: toTopLevel('server', 'app', 'components', 'scripts'),
      message: 'db/ is below server/, app/ and components/: take what it needs as a parameter (a setting, a callback), or move the shared piece down into db/.',
    },
  ]),
  floor(['server/**'], [
    {
      regex: toTopLevel('app', 'components', 'scripts'),
      message: 'server/ is a library below app/ and components/ (another Node service could use it): pass what it needs in, or move the piece down into server/.',
    },
  ]),
  // Client components run in the browser: no server code in their bundle. Types are erased at
  // compile time, so `import type` of the JSON shapes server/ and app/ answer with is allowed.
  floor(['components/**'], [
    {
      regex: `^(?:@/|(?:\\.\\./)+)(?!(?:${SHARED_WITH_CLIENT.join('|')})$)(?:server|app)(?:/|$)`,
      allowTypeImports: true,
      message: 'Client components import no server code: use `import type` for shapes, fetch data through the admin API or a server action, or move a pure helper into a module with no imports and list it in SHARED_WITH_CLIENT (eslint.config.mjs).',
    },
    {
      regex: `^(?:server-only$|(?:@/|(?:\\.\\./)+)(?:db|scripts)(?:/|$))`,
      message: 'Client components import no server code (not even its types from db/ or scripts/).',
    },
  ]),
  // Process-wide state shared through globalThis, only where separate module graphs in one process
  // make it unavoidable: the server's runtime (Next's bundles and the HTTP front), the sign-in
  // hashing bound (copies of passwords.ts in Next's route-handler and server-action bundles), and
  // the package's decoded-body count (two copies of the package in one service). Everything else
  // takes what it needs from the runtime (server/runtime.ts).
  {
    files: ['**/*.{ts,tsx,mts}'],
    ignores: ['server/runtime-bridge.ts', 'server/auth/passwords.ts', 'packages/store/src/adapters/express.ts'],
    rules: {
      'no-restricted-syntax': [
        'error',
        {
          selector: "CallExpression[callee.object.name='Symbol'][callee.property.name='for']",
          message: 'No process-wide globals: take what you need from the server runtime (server/runtime.ts), or, if separate bundles really make one unavoidable, add the file to this rule\'s exceptions and say why.',
        },
      ],
    },
  },
  floor(SHARED_WITH_CLIENT.map((module) => `${module}.ts`), [
    { regex: '.', message: 'A module shared with client components imports nothing, so it can never pull server code into the browser.' },
  ]),
);
