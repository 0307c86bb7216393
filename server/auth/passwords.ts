// Operator passwords: argon2id (OWASP's minimum: 19 MiB, 2 passes, 1 lane), as PHC strings.
// Used by better-auth at sign-in and by operator creation, so both agree on the format.
// Hashing is bounded per process, so unauthenticated sign-ins cannot take the CPU from the
// API: one hash at a time with one waiting, and sign-ins from unknown devices also draw on a
// budget of a few hashes a second (one argon2id is ~30-40 ms of a core, so the budget keeps
// them to a fraction of one core). Beyond either, a sign-in is refused at once
// (PasswordHashingBusyError, a 429 with Retry-After). A sign-in takes its slot before
// anything else (withSignInHashingSlot) and the hash or verify better-auth runs inside it uses
// that slot; other callers (an admin creating an operator, the CLI) wait for a slot.
import { AsyncLocalStorage } from 'node:async_hooks';
import { hash, verify } from '@node-rs/argon2';
import { z } from 'zod';

const ARGON2ID = { memoryCost: 19_456, timeCost: 2, parallelism: 1 };

export const passwordSchema = z.string().min(12, 'must be at least 12 characters').max(128, 'must be at most 128 characters');

/** Hashes running at once, and waiting beyond them, per process. */
export const HASHING_CONCURRENCY = 1;
export const HASHING_QUEUE = 1;
/** Sign-ins from unknown devices checked per second per process (by default), and the least burst allowed above that rate. */
export const UNKNOWN_DEVICE_HASHES_PER_SECOND = 4;
export const UNKNOWN_DEVICE_BURST = 4;

export class PasswordHashingBusyError extends Error {
  readonly code = 'PASSWORD_HASHING_BUSY';
  constructor(readonly retryAfterSeconds: number) {
    super('Too many sign-ins are being checked at once');
  }
}

interface Slots {
  running: number;
  waiting: (() => void)[];
  /** The unknown-device budget: tokens left, and when they were last topped up. */
  tokens: number;
  toppedUpAt: number;
  perSecond: number;
  burst: number;
  /** Marks an async context that already holds a slot (a sign-in around better-auth's hash or verify). */
  held: AsyncLocalStorage<true>;
}

/**
 * One set of slots per process, on globalThis: Next bundles route handlers and server actions
 * with separate copies of this module, and a bound per copy would not be a bound.
 */
const SLOTS = Symbol.for('retrysafe.passwordHashingSlots');
function slots(): Slots {
  const holder = globalThis as typeof globalThis & { [SLOTS]?: Slots };
  holder[SLOTS] ??= { running: 0, waiting: [], tokens: UNKNOWN_DEVICE_BURST, toppedUpAt: Date.now(), perSecond: UNKNOWN_DEVICE_HASHES_PER_SECOND, burst: UNKNOWN_DEVICE_BURST, held: new AsyncLocalStorage<true>() };
  return holder[SLOTS];
}

/** Takes one token of the unknown-device budget, or says how many seconds until there is one. */
function takeToken(state: Slots, now = Date.now()): number {
  state.tokens = Math.min(state.burst, state.tokens + ((now - state.toppedUpAt) / 1000) * state.perSecond);
  state.toppedUpAt = now;
  if (state.tokens >= 1) {
    state.tokens -= 1;
    return 0;
  }
  return Math.max(1, Math.ceil((1 - state.tokens) / state.perSecond));
}

/**
 * Sets the process's unknown-device budget (hashes a second; the burst is at least
 * UNKNOWN_DEVICE_BURST and at least one second's worth). One budget per process: the last
 * auth instance created sets it (the dashboard creates one; tests choose their own).
 */
export function configureSignInHashing(perSecond: number): void {
  const state = slots();
  if (!(perSecond > 0)) throw new RangeError('the sign-in hashing budget must be positive');
  state.perSecond = perSecond;
  state.burst = Math.max(UNKNOWN_DEVICE_BURST, perSecond);
  state.tokens = state.burst;
}

type Admission = 'wait' | 'refuse-when-busy' | 'unknown-device';

function acquire(state: Slots, admission: Admission): Promise<void> {
  const free = state.running < HASHING_CONCURRENCY;
  if (admission !== 'wait' && !free && state.waiting.length >= HASHING_QUEUE) return Promise.reject(new PasswordHashingBusyError(1));
  if (admission === 'unknown-device') {
    const wait = takeToken(state);
    if (wait > 0) return Promise.reject(new PasswordHashingBusyError(wait));
  }
  if (free) {
    state.running += 1;
    return Promise.resolve();
  }
  // The slot passes straight to the waiter (running stays the same).
  return new Promise((granted) => state.waiting.push(granted));
}

function release(state: Slots): void {
  const next = state.waiting.shift();
  if (next) next();
  else state.running -= 1;
}

async function withSlot<T>(work: () => Promise<T>, admission: Admission): Promise<T> {
  const state = slots();
  if (state.held.getStore()) return work();
  await acquire(state, admission);
  try {
    return await state.held.run(true, work);
  } finally {
    release(state);
  }
}

/**
 * For sign-in (unauthenticated): runs `work` holding one hashing slot, or rejects at once with
 * PasswordHashingBusyError when every slot and queue place is taken or, for an unknown device,
 * the budget is spent. A known device (valid device cookie) skips the budget, so a flood of
 * strangers' sign-ins leaves operators' own browsers a way in. Hashes inside `work` use this slot.
 */
export function withSignInHashingSlot<T>(work: () => Promise<T>, knownDevice = false): Promise<T> {
  return withSlot(work, knownDevice ? 'refuse-when-busy' : 'unknown-device');
}

let argon2Operations = 0;

/**
 * The argon2id hashes and verifications this module copy has run. A sign-in for an unknown email
 * must cost what one for a known email costs (one argon2id operation, same parameters), or the
 * time it takes tells which emails exist; tests count it rather than time it.
 */
export function argon2OperationCount(): number {
  return argon2Operations;
}

/** argon2id's parameters as PHC strings write them ("m=19456,t=2,p=1"). */
export const ARGON2ID_PARAMETERS = `m=${ARGON2ID.memoryCost},t=${ARGON2ID.timeCost},p=${ARGON2ID.parallelism}`;

/** Outside a sign-in (an admin creating an operator, the CLI): waits for a slot, never refused. */
export function hashPassword(password: string): Promise<string> {
  return withSlot(() => {
    argon2Operations += 1;
    return hash(password, ARGON2ID);
  }, 'wait');
}

export function verifyPassword(data: { hash: string; password: string }): Promise<boolean> {
  return withSlot(() => {
    argon2Operations += 1;
    return verify(data.hash, data.password).catch(() => false);
  }, 'wait');
}
