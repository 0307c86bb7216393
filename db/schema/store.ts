// The store's tables (schema retrysafe) are @retrysafe/store's: the package defines them
// (packages/store/src/drizzle, the `@retrysafe/store/drizzle` entry), drizzle-kit generates the
// package's migrations from there (drizzle.config.ts), and the server queries them through
// these re-exports.
export * from '@retrysafe/store/drizzle';
