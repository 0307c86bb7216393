// Every table Drizzle knows about; drizzle-kit reads this file to generate migrations.
export * from './idempotency-keys';
export * from './key-usage';
export * from './demo';
export * from './retention';
export * from './audit';
export * from './metrics';
export * from './operators';
export * from './principals';
