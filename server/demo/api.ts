// The demo payments API: two endpoints behind the store, one per execution mode.
//   POST /api/v1/payments  transactional: the payment row and the key share a transaction.
//   POST /api/v1/refunds   claim-first: the claim commits, then a slow, fallible processor runs.
import type pg from 'pg';
import type { EndpointPolicy, IdempotencyStore } from '@retrysafe/store';
import { parseIdempotencyKey } from '@retrysafe/store';
import { idempotent } from '@retrysafe/store/fetch';
import { createPayment, createRefund, paymentInput, paymentResponse, refundInput, refundReference, refundResponse } from './payments';
import { MAX_REQUEST_BYTES, PAYMENTS_ENDPOINT, REFUNDS_ENDPOINT, paymentsPolicy, refundsPolicy } from './policies';
import type { FakeProcessor } from './processor';
import { authenticateApiKey, type TenantPrincipal } from './tenants';

export interface DemoApiOptions {
  store: IdempotencyStore;
  pool: pg.Pool;
  processor: FakeProcessor;
  /** The policy in force for an endpoint (default: the built-in defaults). */
  policyFor?: (endpoint: string) => EndpointPolicy;
  onError?: (error: unknown, correlationId: string) => void;
}

export interface DemoApi {
  payments: (request: Request) => Promise<Response>;
  refunds: (request: Request) => Promise<Response>;
}

export function createDemoApi(options: DemoApiOptions): DemoApi {
  const authenticate = (request: Request): Promise<TenantPrincipal | null> => authenticateApiKey(options.pool, request.headers.get('authorization'));
  const may = (permission: string) => (principal: TenantPrincipal) => principal.permissions.includes(permission);
  return {
    payments: idempotent(options.store, {
      endpoint: PAYMENTS_ENDPOINT,
      method: 'POST',
      mode: 'transactional',
      policy: () => options.policyFor?.(PAYMENTS_ENDPOINT) ?? paymentsPolicy,
      maxBodyBytes: MAX_REQUEST_BYTES,
      authorize: may('payments:write'),
      authenticate,
      input: paymentInput,
      work: (input, principal, context) => createPayment(context.db, principal.principalId, input),
      rederive: (reference, db) => paymentResponse(db, reference),
      onError: options.onError,
    }),
    refunds: idempotent(options.store, {
      endpoint: REFUNDS_ENDPOINT,
      method: 'POST',
      mode: 'claim-first',
      policy: () => options.policyFor?.(REFUNDS_ENDPOINT) ?? refundsPolicy,
      maxBodyBytes: MAX_REQUEST_BYTES,
      authorize: may('refunds:write'),
      authenticate,
      input: refundInput,
      work: (input, principal, _context, request) =>
        createRefund(options.pool, options.processor, principal.principalId, input, refundReference(principal.principalId, idempotencyKeyOf(request))),
      rederive: (reference, db) => refundResponse(db, reference),
      onError: options.onError,
    }),
  };
}

/** The request's idempotency key (the layer has validated it before any work runs). */
function idempotencyKeyOf(request: Request): string {
  const parsed = parseIdempotencyKey(request.headers.get('idempotency-key'));
  if (!parsed.ok) throw new Error('work ran without a valid Idempotency-Key');
  return parsed.key;
}
