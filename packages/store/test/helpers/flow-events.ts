// A deterministic stream of flow events (seeded), so several processes can record parts
// of it and a test can compute what the stored totals must be.
import { claimOutcomes, type FlowEvent } from '@retrysafe/store';

/** A small seeded random number generator (mulberry32): the same stream for the same seed. */
export function mulberry32(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const SCOPES = ['POST /api/v1/payments', 'POST /api/v1/refunds', 'intent'];
// The demo's service and another, so totals are proven to be kept per service too.
const SERVICES = ['demo', 'orders'];

export function* flowEvents(seed: number, count: number): Generator<FlowEvent> {
  const random = mulberry32(seed);
  for (let i = 0; i < count; i += 1) {
    const scope = SCOPES[Math.floor(random() * SCOPES.length)] ?? 'intent';
    const service = SERVICES[Math.floor(random() * SERVICES.length)] ?? 'demo';
    const outcome = claimOutcomes[Math.floor(random() * claimOutcomes.length)] ?? 'new';
    // Roughly log-normal latencies around 1 ms, with a long tail.
    const latency = Math.exp(Math.log(1) + 1.2 * (random() + random() + random() - 1.5) * 2);
    yield outcome === 'rejected' || outcome === 'error' ? { service, scope, outcome } : { service, scope, outcome, claimLatencyMs: latency };
  }
}
