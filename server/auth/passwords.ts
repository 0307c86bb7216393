// Operator passwords: argon2id (OWASP's minimum: 19 MiB, 2 passes, 1 lane), as PHC strings.
// Used by better-auth at sign-in and by operator creation, so both agree on the format.
// Hashing is bounded per process: a few at a time, a tiny queue, and beyond it an immediate
// refusal (PasswordHashingBusyError), so unauthenticated sign-ins cannot take the CPU from
// the API. A sign-in takes its slot before anything else (withSignInHashingSlot) and the hash
// or verify better-auth runs inside it uses that slot; other callers wait for a slot.
import { AsyncLocalStorage } from 'node:async_hooks';
import { hash, verify } from '@node-rs/argon2';
import { z } from 'zod';

const ARGON2ID = { memoryCost: 19_456, timeCost: 2, parallelism: 1 };

export const passwordSchema = z.string().min(12, 'must be at least 12 characters').max(128, 'must be at most 128 characters');

/** Hashes running at once, and waiting beyond them, per process. One core's worth on a small machine. */
export const HASHING_CONCURRENCY = 1;
export const HASHING_QUEUE = 1;
/** What a refused caller is told to wait: about the time the running and queued hashes take. */
const RETRY_AFTER_SECONDS = 1;

export class PasswordHashingBusyError extends Error {
  readonly code = 'PASSWORD_HASHING_BUSY';
  readonly retryAfterSeconds = RETRY_AFTER_SECONDS;
  constructor() {
    super('Too many sign-ins are being checked at once');
  }
}

interface Slots {
  running: number;
  waiting: (() => void)[];
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
  holder[SLOTS] ??= { running: 0, waiting: [], held: new AsyncLocalStorage<true>() };
  return holder[SLOTS];
}

function acquire(state: Slots, refuseWhenBusy: boolean): Promise<void> {
  if (state.running < HASHING_CONCURRENCY) {
    state.running += 1;
    return Promise.resolve();
  }
  if (refuseWhenBusy && state.waiting.length >= HASHING_QUEUE) return Promise.reject(new PasswordHashingBusyError());
  // The slot passes straight to the waiter (running stays the same).
  return new Promise((granted) => state.waiting.push(granted));
}

function release(state: Slots): void {
  const next = state.waiting.shift();
  if (next) next();
  else state.running -= 1;
}

async function withSlot<T>(work: () => Promise<T>, refuseWhenBusy: boolean): Promise<T> {
  const state = slots();
  if (state.held.getStore()) return work();
  await acquire(state, refuseWhenBusy);
  try {
    return await state.held.run(true, work);
  } finally {
    release(state);
  }
}

/**
 * For sign-in (unauthenticated): runs `work` holding one hashing slot, or rejects at once with
 * PasswordHashingBusyError when every slot and queue place is taken. Hashes inside `work` use this slot.
 */
export function withSignInHashingSlot<T>(work: () => Promise<T>): Promise<T> {
  return withSlot(work, true);
}

/** Outside a sign-in (an admin creating an operator, the CLI): waits for a slot, never refused. */
export function hashPassword(password: string): Promise<string> {
  return withSlot(() => hash(password, ARGON2ID), false);
}

export function verifyPassword(data: { hash: string; password: string }): Promise<boolean> {
  return withSlot(() => verify(data.hash, data.password).catch(() => false), false);
}
