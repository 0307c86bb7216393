// Flow events: what every claim reports, for the monitoring recorder. record() is
// called on the request path, so an implementation must only touch memory.

export const claimOutcomes = ['new', 'replay', 'conflict', 'mismatch', 'takeover', 'rejected', 'error'] as const;
export type ClaimOutcome = (typeof claimOutcomes)[number];

export interface FlowEvent {
  /** The service whose store reported it. */
  service: string;
  scope: string;
  outcome: ClaimOutcome;
  /** Wall time of the claim statement itself, in milliseconds (absent when none ran). */
  claimLatencyMs?: number;
}

export interface FlowObserver {
  record(event: FlowEvent): void;
}

export const ignoreFlow: FlowObserver = { record: () => undefined };
