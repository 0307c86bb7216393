// A JSON logger (server/logging's, redaction included) whose lines land in memory, for tests.
import { Writable } from 'node:stream';
import { createLogger } from '../../server/logging';

export function captureLog() {
  const lines: string[] = [];
  const destination = new Writable({
    write(chunk: Buffer, _encoding, done) {
      lines.push(chunk.toString());
      done();
    },
  });
  return { log: createLogger({ destination }), lines, text: () => lines.join('') };
}
