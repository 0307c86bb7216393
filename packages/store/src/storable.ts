// Text as Postgres can store it. A NUL character cannot be in a text value (Postgres refuses the
// statement), and an unpaired UTF-16 surrogate has no UTF-8 form (it would be stored as U+FFFD,
// not as sent). The store refuses both before any statement runs; the dashboard's zod schemas use
// the same test.
const UNSTORABLE = /\u0000|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

/** The message every check gives for text Postgres cannot store. */
export const UNSTORABLE_TEXT = 'must not contain NUL characters or unpaired surrogates';

export function isStorableText(value: string): boolean {
  return !UNSTORABLE.test(value);
}
