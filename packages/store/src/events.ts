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
