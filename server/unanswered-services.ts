// Which services' key backends did not answer a dashboard read naming no service (routedKeyReads
// in key-backends.ts leaves an unavailable Redis or MySQL out rather than failing the read): kept
// beside the answer, so the seam's return types stay as they are. Apart from key-backends.ts so
// that the routes' code loads no driver to read it.

/** Per answer of a read naming no service: the services whose backend did not answer it (their keys are missing from it). */
const unanswered = new WeakMap<object, readonly string[]>();

/**
 * The services whose backend was unavailable when `answer` (of routedKeyReads, a read naming no
 * service) was read: their keys are not in it. [] when every backend answered.
 */
export function unansweredServices(answer: object): string[] {
  return [...(unanswered.get(answer) ?? [])];
}

/** Marks `answer` as missing `services` (unansweredServices); returns it. */
export function markUnanswered<T extends object>(answer: T, services: readonly string[]): T {
  if (services.length > 0) unanswered.set(answer, [...services]);
  return answer;
}

/** Per answer of a correlation-id lookup: the services whose backend keeps no index to answer it, and why. */
const notKept = new WeakMap<object, readonly { service: string; reason: string }[]>();

/**
 * The services whose backend keeps nothing that could answer the read of `answer` (a Redis
 * Cluster has no index by correlation id), each with why: their keys are not in it, which is not
 * "not found". [] when every backend could answer.
 */
export function notKeptServices(answer: object): { service: string; reason: string }[] {
  return [...(notKept.get(answer) ?? [])];
}

/** Marks `answer` as unanswerable for `services` (notKeptServices); returns it. */
export function markNotKept<T extends object>(answer: T, services: readonly { service: string; reason: string }[]): T {
  if (services.length > 0) notKept.set(answer, [...services]);
  return answer;
}
