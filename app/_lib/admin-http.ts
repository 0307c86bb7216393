// Shared shapes of the admin JSON API: zod-checked input as problem+json 400s, typed
// server errors mapped once, and no-store on every answer.
import 'server-only';
import { randomUUID } from 'node:crypto';
import type { z } from 'zod';
import { problemResponse } from '@retrysafe/store';

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
    return problemResponse({ status: statuses[code] as number, slug: code.toLowerCase().replaceAll('_', '-'), title: error.message }, randomUUID());
  }
  throw error;
}

async function readJson(request: Request): Promise<unknown> {
  return request.json().catch(() => undefined);
}

/** The query string checked against `schema`: the value, or the problem+json 400 to answer. */
export function parseQuery<S extends z.ZodType>(request: Request, schema: S): z.infer<S> | Response {
  const parsed = schema.safeParse(Object.fromEntries(new URL(request.url).searchParams));
  return parsed.success ? parsed.data : invalid(parsed.error, 'Invalid query parameters');
}

/** Whether the body is declared JSON: application/json, with or without parameters (charset). */
function isJson(request: Request): boolean {
  return (request.headers.get('content-type') ?? '').split(';')[0]?.trim().toLowerCase() === 'application/json';
}

/**
 * The JSON body checked against `schema` (an unreadable body is an empty one): the value, or
 * the problem to answer: 415 unless the body is declared application/json (a form or text/plain
 * body is what a cross-site form can send without a preflight), else 400.
 */
export async function parseBody<S extends z.ZodType>(request: Request, schema: S): Promise<z.infer<S> | Response> {
  if (!isJson(request)) {
    return problemResponse(
      { status: 415, slug: 'unsupported-media-type', title: 'The body must be application/json', headers: { 'Accept-Post': 'application/json' } },
      randomUUID(),
    );
  }
  const parsed = schema.safeParse(await readJson(request));
  return parsed.success ? parsed.data : invalid(parsed.error);
}

/** A CSV download named `<baseName>-<UTC date>.csv`, never cached. */
export function csvAttachment(csv: string, baseName: string): Response {
  return new Response(csv, {
    headers: {
      'Content-Type': 'text/csv; charset=utf-8',
      'Content-Disposition': `attachment; filename="${baseName}-${new Date().toISOString().slice(0, 10)}.csv"`,
      'Cache-Control': 'no-store',
    },
  });
}
