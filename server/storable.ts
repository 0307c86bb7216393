// Text and instants as Postgres can store them, for every zod schema at a trust boundary. A NUL
// character cannot be in a text value (Postgres refuses the statement: a 500 where the input was
// at fault), an unpaired UTF-16 surrogate has no UTF-8 form (it would be stored as U+FFFD, not
// as sent), and timestamptz takes no year 0 (ISO 0000 is 1 BC, written BC in Postgres). Each is a
// 400 naming the field instead.
import { z } from 'zod';
import { isStorableText, UNSTORABLE_TEXT } from '@retrysafe/store';

export { isStorableText, UNSTORABLE_TEXT };

/** A string Postgres stores as sent. Chain the usual checks after it: storableText().trim().max(500). */
export function storableText(): z.ZodString {
  return z.string().refine(isStorableText, UNSTORABLE_TEXT);
}

/** An ISO 8601 instant with an offset, from year 0001 to 9999 (what timestamptz and Date both represent). */
export function storableInstant(): z.ZodISODateTime {
  return z.iso.datetime({ offset: true }).refine((value) => !/^0000-/.test(value), 'must be a date from year 0001 on');
}
