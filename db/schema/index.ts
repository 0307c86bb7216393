// Every table Drizzle knows about: the store's (schema retrysafe) and the demo API's (schema
// retrysafe_demo, its own migration set: drizzle.demo.config.ts).
export * from './store';
export * from './demo';
