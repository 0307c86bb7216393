// Keyset cursors that carry a timestamptz: as whole microseconds since the epoch, so a page
// resumes exactly where the last one stopped. A JS Date would round to milliseconds, and a
// division through a double would round too. Used by the audit log and a principal's keys.

/** Whole microseconds since the epoch, as a cursor carries them. */
export const MICROS_PATTERN = /^\d{1,17}$/;

/** SQL reading `column` (a timestamptz) as whole microseconds since the epoch, as text. */
export function microsOf(column: string): string {
  return `(extract(epoch FROM ${column}) * 1000000)::bigint::text`;
}

/** SQL turning the parameter `placeholder` (whole microseconds) back into the exact timestamptz. */
export function instantFromMicros(placeholder: string): string {
  return `(timestamptz 'epoch' + ${placeholder}::bigint * interval '1 microsecond')`;
}
