// Flow events: what every claim reports, for the monitoring recorder. record() is
// called on the request path, so an implementation must only touch memory.

export const claimOutcomes = ['new', 'replay', 'conflict', 'mismatch', 'takeover', 'rejected', 'error'] as const;
export type ClaimOutcome = (typeof claimOutcomes)[number];

export interface FlowEvent {
  /** The service whose store reported it. */
  service: string;
  scope: string;
  /** The principal whose claim it was (absent when none is known). */
  principalId?: string;
  outcome: ClaimOutcome;
  /** Wall time of the claim statement itself, in milliseconds (absent when none ran). */
  claimLatencyMs?: number;
  /** The idempotency key (the trace of attempts keeps replays, conflicts, mismatches and refusals per key). */
  key?: string;
  /** This attempt's own correlation id. */
  correlationId?: string;
  /** The status answered: the replayed one, 409, 422 or 429 (traced outcomes only). */
  status?: number;
  /** The policy's retention: how long an attempt on a key that is not live is kept. */
  retentionMs?: number;
}

export interface FlowObserver {
  record(event: FlowEvent): void;
}

export const ignoreFlow: FlowObserver = { record: () => undefined };

/**
 * The outcomes whose principals the recorder keeps (a bounded top-K each), and 'claims': every
 * outcome, so a listed principal's share of its own claims can be shown.
 */
export const principalOutcomes = ['conflict', 'mismatch', 'rejected', 'takeover', 'error', 'claims'] as const;
export type PrincipalOutcome = (typeof principalOutcomes)[number];

/** The outcomes the trace of attempts records per key (replay, 409, 422, 429). */
export const tracedOutcomes = ['replay', 'conflict', 'mismatch', 'rejected'] as const;
export type TracedOutcome = (typeof tracedOutcomes)[number];
