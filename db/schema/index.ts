// Every table Drizzle knows about: the store's (schema retrysafe), the demo API's (schema
// retrysafe_demo, its own migration set: drizzle.demo.config.ts) and the server's own (schema
// retrysafe_server: drizzle.server.config.ts).
export * from './store';
export * from './demo';
export * from './server';
