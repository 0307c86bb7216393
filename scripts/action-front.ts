// The HTTP front's part in server actions (server/action-screen.ts decides): a refused request is
// answered here, 403/400/413 as problem+json, or as a small page when the client asked for HTML,
// and logged as one JSON line at warn; an accepted one whose body had to be read is handed to
// Next as a fresh request carrying the same bytes. And Next's own console output (its `⨯ Error`
// prints, warnings) goes through the JSON logger, one line each.
import { randomUUID } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { IncomingMessage, type ServerResponse } from 'node:http';
import { join } from 'node:path';
import { problemAnswer } from '@retrysafe/store';
import { ACTION_BODY_LIMIT, actionIdsOf, bodyNeedsScreening, bodyTooLarge, isActionOrRsc, screenBody, screenHeaders, wantsPage, type Refusal } from '../server/action-screen';
import { logger } from '../server/logging';

/** The server action ids of the build in `dir` (none when it has no manifest: then it has no actions). */
export async function knownActionIds(dir: string): Promise<Set<string>> {
  const text = await readFile(join(dir, '.next', 'server', 'server-reference-manifest.json'), 'utf8').catch(() => null);
  return actionIdsOf(text === null ? null : (JSON.parse(text) as unknown));
}

/**
 * The request to hand to Next, or null when it was refused (and answered). A server action's body
 * is read whole (at most Next's 1 MB) to be screened, and Next gets a copy that replays it.
 */
export async function screenAction(request: IncomingMessage, response: ServerResponse, knownActions: ReadonlySet<string>, ownHosts: ReadonlySet<string>): Promise<IncomingMessage | null> {
  // Route handlers (/api) never run server actions or answer RSC: their own checks apply.
  if (/^\/api(\/|\?|$)/.test(request.url ?? '/') || !isActionOrRsc(request)) return request;
  const early = screenHeaders(request, knownActions, ownHosts);
  // Refused on its headers: the body is not read, but the client may still be sending it, so
  // the connection stays open and Node discards the rest once the answer is out (closing it
  // under the upload shows the client EPIPE or a reset instead of the 403).
  if (early) return refuse(request, response, early, 'discard');
  if (!bodyNeedsScreening(request)) return request;
  const body = await readBody(request);
  // Over the limit or broken: the rest is not read, and the connection closes after the answer.
  if (body === 'too-large') return refuse(request, response, bodyTooLarge, 'close');
  if (body === 'failed') return refuse(request, response, { status: 400, slug: 'unreadable-action-body', title: 'The server action request body cannot be read', reason: 'unreadable-body' }, 'close');
  const refusal = await screenBody(request, body, knownActions);
  if (refusal) return refuse(request, response, refusal, 'read');
  return replaying(request, body);
}

async function readBody(request: IncomingMessage): Promise<Buffer | 'too-large' | 'failed'> {
  const chunks: Buffer[] = [];
  let total = 0;
  try {
    for await (const chunk of request as AsyncIterable<Buffer>) {
      total += chunk.byteLength;
      if (total > ACTION_BODY_LIMIT) return 'too-large';
      chunks.push(chunk);
    }
  } catch {
    return 'failed';
  }
  return Buffer.concat(chunks, total);
}

/** A request like `original` (same socket, method, URL and headers) whose body is `body`. */
function replaying(original: IncomingMessage, body: Buffer): IncomingMessage {
  const copy = new IncomingMessage(original.socket);
  copy.method = original.method;
  copy.url = original.url;
  copy.headers = original.headers;
  copy.rawHeaders = original.rawHeaders;
  copy.httpVersion = original.httpVersion;
  copy.httpVersionMajor = original.httpVersionMajor;
  copy.httpVersionMinor = original.httpVersionMinor;
  copy.push(body);
  copy.push(null);
  copy.complete = true;
  return copy;
}

/**
 * `body`: 'read' (consumed whole), 'discard' (unread, left to Node, which discards it after the
 * answer and keeps the connection), or 'close' (unread beyond a limit: the connection closes).
 */
function refuse(request: IncomingMessage, response: ServerResponse, refusal: Refusal, body: 'read' | 'discard' | 'close'): null {
  const correlationId = randomUUID();
  const path = (request.url ?? '/').split('?')[0]?.slice(0, 200);
  logger.warn({ method: request.method, path, status: refusal.status, reason: refusal.reason, correlationId }, 'refused a server action request');
  if (body === 'close') response.setHeader('Connection', 'close');
  response.setHeader('X-Content-Type-Options', 'nosniff');
  if (wantsPage(request)) {
    const page = `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Request refused</title></head><body><main><h1>Request refused</h1><p>${refusal.title}.</p><p><a href="${escapeHtml(path ?? '/')}">Back to the page</a></p></main></body></html>`;
    response.writeHead(refusal.status, { 'Content-Type': 'text/html; charset=utf-8', 'Cache-Control': 'no-store', 'X-Correlation-Id': correlationId });
    response.end(page);
    return null;
  }
  const answer = problemAnswer({ status: refusal.status, slug: refusal.slug, title: refusal.title }, correlationId);
  response.writeHead(answer.status, answer.headers);
  response.end(Buffer.from(answer.body));
  return null;
}

const escapeHtml = (text: string) => text.replaceAll('&', '&amp;').replaceAll('<', '&lt;').replaceAll('>', '&gt;').replaceAll('"', '&quot;');

const ANSI = /\u001b\[[0-9;]*m/g;

/** One console call as a log message: errors by name and message (no stack, which may quote input and spans lines), text without colours or Next's ⨯ mark. */
function messageOf(args: unknown[]): string {
  // Other values are named by their type only: an object Next prints may hold a request's headers.
  const parts = args.map((arg) => (arg instanceof Error ? `${arg.name}: ${arg.message}` : typeof arg === 'string' ? arg : typeof arg === 'number' || typeof arg === 'boolean' ? String(arg) : `[${typeof arg}]`));
  return parts.join(' ').replace(ANSI, '').replace(/^\s*[⨯⚠○✓▲]\s*/u, '').slice(0, 500);
}

/** Routes console.log/info/warn/error (Next prints through them) to the JSON logger. */
export function routeConsoleToLogger(): void {
  const forward = (level: 'info' | 'warn' | 'error') => (...args: unknown[]) => logger[level]({ source: 'next' }, messageOf(args));
  console.log = forward('info');
  console.info = forward('info');
  console.warn = forward('warn');
  console.error = forward('error');
}
