// Structured logs (pino, JSON lines) with redaction that fails closed: whatever a caller
// passes, authorization and cookie headers, API keys, passwords, idempotency keys, request
// and response bodies and connection strings are replaced before the line is written.
// Callers log identifiers and counts; redaction is the second line of defence.
import pino, { type Logger } from 'pino';

export const REDACTED_PATHS = [
  'authorization',
  'cookie',
  'headers.authorization',
  'headers.cookie',
  'headers["set-cookie"]',
  'apiKey',
  'password',
  'secret',
  'token',
  'key',
  'idempotencyKey',
  'body',
  'responseBody',
  'requestBody',
  'databaseUrl',
  'connectionString',
  '*.authorization',
  '*.cookie',
  '*.apiKey',
  '*.password',
  '*.secret',
  '*.token',
  '*.key',
  '*.idempotencyKey',
  '*.body',
  '*.responseBody',
  '*.requestBody',
  '*.databaseUrl',
  '*.connectionString',
];

export function createLogger(options: { level?: string; destination?: pino.DestinationStream } = {}): Logger {
  return pino(
    {
      level: options.level ?? process.env.LOG_LEVEL ?? 'info',
      base: undefined,
      timestamp: pino.stdTimeFunctions.isoTime,
      formatters: { level: (label) => ({ level: label }) },
      redact: { paths: REDACTED_PATHS, censor: '[redacted]' },
    },
    options.destination,
  );
}

export const logger = createLogger();
