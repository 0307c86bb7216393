// Shared shapes of the admin JSON API: zod-checked input as problem+json 400s, typed
// server errors mapped once, and no-store on every answer.
import 'server-only';
import { randomUUID } from 'node:crypto';
import type { z } from 'zod';
import { problemResponse } from '@/server/idempotency/http';

export function adminJson(value: unknown, status = 200): Response {
  return Response.json(value, { status, headers: { 'Cache-Control': 'no-store' } });
}

export function invalid(error: z.ZodError, title = 'Invalid request'): Response {
  return problemResponse(
    {
      status: 400,
      slug: 'invalid-request',
      title,
      errors: error.issues.map((issue) => ({ path: issue.path.join('.'), message: issue.message })),
    },
    randomUUID(),
  );
}

/** Typed errors from server/ (a const `code`) to their HTTP problem; anything else is rethrown. */
export function problemFor(error: unknown, statuses: Record<string, number>): Response {
  const code = (error as { code?: unknown }).code;
  if (typeof code === 'string' && code in statuses && error instanceof Error) {
    return problemResponse({ status: statuses[code] ?? 400, slug: code.toLowerCase().replaceAll('_', '-'), title: error.message }, randomUUID());
  }
  throw error;
}

export async function readJson(request: Request): Promise<unknown> {
  return request.json().catch(() => undefined);
}
