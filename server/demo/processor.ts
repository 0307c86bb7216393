// A stand-in for an external payment processor behind the refunds endpoint: it takes
// time and sometimes fails, so the claim-first path (lease, failure, takeover) runs for real.
import { setTimeout as sleep } from 'node:timers/promises';

export interface ProcessorOptions {
  latencyMs: number;
  failureRate: number;
  random?: () => number;
  /** Decides whether this call fails (default: a draw against failureRate). */
  fails?: () => boolean;
}

export class ProcessorUnavailableError extends Error {
  readonly code = 'PROCESSOR_UNAVAILABLE';
  constructor() {
    super('The payment processor did not accept the refund');
  }
}

export class FakeProcessor {
  constructor(private readonly options: ProcessorOptions) {}

  /**
   * Asks the processor for a refund under the caller's reference (derived from the idempotency
   * key, as a real processor's own idempotency key): returns that reference, or throws
   * ProcessorUnavailableError.
   */
  async refund(reference: string): Promise<string> {
    const random = this.options.random ?? Math.random;
    // Latency varies between half and one and a half times the configured figure.
    await sleep(this.options.latencyMs * (0.5 + random()));
    const fails = this.options.fails ? this.options.fails() : random() < this.options.failureRate;
    if (fails) throw new ProcessorUnavailableError();
    return reference;
  }
}
