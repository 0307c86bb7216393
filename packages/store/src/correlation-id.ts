// Correlation ids: UUIDv7 (RFC 9562), a millisecond timestamp first, then random bits, and
// increasing within a millisecond. Each is stored with its key, and the dashboard's
// correlation-id index (idempotency_keys_correlation_idx) then takes every new claim at its
// right-hand edge, in pages already cached, rather than on a random leaf of a B-tree the size
// of the store, as random (v4) ids did: at 10 M keys that random insert cost claims about 18%
// of their throughput (`npm run bench -- correlation`). A v7 id tells its reader when the
// request arrived, which the client that made it knows already.
import { v7 } from 'uuid';

/** A new correlation id (a UUIDv7). */
export function newCorrelationId(): string {
  return v7();
}
