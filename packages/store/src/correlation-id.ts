// Correlation ids: UUIDv7 (RFC 9562), a millisecond timestamp first, then a 12-bit counter
// (method 1: seeded at random each millisecond, incremented within it) and random bits, so each
// id sorts after the one before it in this process. Each is stored with its key, and the
// dashboard's correlation-id index (idempotency_keys_correlation_idx) then takes every new claim
// at its right-hand edge, in pages already cached, rather than on a random leaf of a B-tree the
// size of the store, as random (v4) ids did: at 10 M keys that random insert cost claims about
// 18% of their throughput (`npm run bench -- correlation`). A v7 id tells its reader when the
// request arrived, which the client that made it knows already.
//
// Built on Node's randomUUID (random bytes drawn from a cached buffer, its variant bits kept):
// under 1 us an id, where the `uuid` package's v7 took about 7 us, on the claim path.
import { randomUUID } from 'node:crypto';

let lastMs = 0;
let counter = 0;
/** lastMs as the id's first 13 characters ("xxxxxxxx-xxxx-"), made once a millisecond. */
let prefix = '';

function stamp(ms: number): void {
  lastMs = ms;
  const time = ms.toString(16).padStart(12, '0');
  prefix = `${time.slice(0, 8)}-${time.slice(8)}-`;
}

/** A new correlation id (a UUIDv7), greater than every earlier one from this process. */
export function newCorrelationId(): string {
  const random = randomUUID(); // xxxxxxxx-xxxx-4xxx-Vxxx-xxxxxxxxxxxx, V the variant
  const now = Date.now();
  if (now > lastMs) {
    stamp(now);
    counter = Number.parseInt(random.slice(15, 18), 16) & 0x7ff; // leaves room to count up
  } else if (counter < 0xfff) {
    counter += 1; // the same millisecond, or the clock went back: count on from the last id
  } else {
    stamp(lastMs + 1); // 4,096 ids in one millisecond: borrow the next one
    counter = 0;
  }
  return `${prefix}7${counter.toString(16).padStart(3, '0')}${random.slice(18)}`;
}
