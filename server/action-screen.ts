// Screens the requests Next would take for a server action or an RSC request before Next's own
// handler sees them, so that a refused one is a 403 or 400 and one JSON line at warn, never
// Next's 500 with its unstructured print. What Next itself would refuse, refused earlier:
//   - an Origin of another host, or `null`, on a server action or RSC request (Next compares the
//     Origin's host with X-Forwarded-Host or Host, and answers a fetch action 500);
//   - a Next-Action id, or a form's $ACTION_ID_/$ACTION_REF_ reference, that this build's
//     server-reference manifest does not list;
//   - a body that cannot be read: multipart that does not parse, a fetch action's reply that is
//     not JSON (Next decodes either with React's reply decoder and answers 500).
// How Next tells an action request (next/dist/server/lib/server-action-request-meta.js): a POST
// with a Next-Action header, or a POST of multipart/form-data or x-www-form-urlencoded
// (url-encoded actions Next does not support and passes on as a plain POST).
import type { IncomingMessage } from 'node:http';

/** Next's default serverActions.bodySizeLimit, which this app keeps. */
export const ACTION_BODY_LIMIT = 1024 * 1024;

export interface Refusal {
  status: 400 | 403 | 413;
  slug: string;
  title: string;
  /** Why, for the log: a short fixed phrase, never the request's own text. */
  reason: 'foreign-origin' | 'null-origin' | 'unknown-action' | 'unreadable-body' | 'body-too-large';
}

const header = (request: IncomingMessage, name: string): string | undefined => {
  const value = request.headers[name];
  return Array.isArray(value) ? value[0] : value;
};

const isMultipart = (request: IncomingMessage) => (header(request, 'content-type') ?? '').toLowerCase().startsWith('multipart/form-data');

/** A request Next would hand to its action handler or answer with a flight (RSC) payload. */
export function isActionOrRsc(request: IncomingMessage): boolean {
  if (request.method === 'POST' && (header(request, 'next-action') !== undefined || isMultipart(request))) return true;
  return header(request, 'rsc') === '1';
}

/** The host Next compares the Origin with: the first X-Forwarded-Host (kept only from a trusted proxy by the HTTP front), else Host. */
function requestHost(request: IncomingMessage): string | undefined {
  const forwarded = header(request, 'x-forwarded-host')?.split(',')[0]?.trim();
  return forwarded || header(request, 'host');
}

/**
 * Whether an Origin's host names the server the request reached (case aside), as Next requires of
 * an action. Next's fetch of a redirecting action's target from itself (at HOST:PORT, with the
 * browser's Origin) is an RSC request, which screenHeaders takes by the dashboard's own hosts.
 */
function sameServer(originHost: string, host: string): boolean {
  return originHost.toLowerCase() === host.toLowerCase();
}

const FOREIGN: Refusal = { status: 403, slug: 'cross-origin-action', title: 'Server actions are accepted only from this dashboard', reason: 'foreign-origin' };

/**
 * The refusal a server action or RSC request earns from its headers alone, or null. `ownHosts`:
 * the hosts this dashboard answers for (server/http-host.ts allowedHosts). An RSC request (never
 * an action) whose Origin is one of them came from this dashboard's own pages, whatever Host it
 * reached: that is Next's fetch of a redirecting action's target from itself, sent to HOST:PORT
 * with the browser's Origin, the public one behind a proxy. An action's Origin must name the host
 * it reached, as Next requires.
 */
export function screenHeaders(request: IncomingMessage, knownActions: ReadonlySet<string>, ownHosts: ReadonlySet<string> = new Set()): Refusal | null {
  const actionId = request.method === 'POST' ? header(request, 'next-action') : undefined;
  const origin = header(request, 'origin');
  if (origin !== undefined) {
    if (origin === 'null') return { ...FOREIGN, reason: 'null-origin' };
    let originHost: string;
    try {
      originHost = new URL(origin).host;
    } catch {
      return FOREIGN;
    }
    const host = requestHost(request);
    const ownPageRsc = request.method === 'GET' && ownHosts.has(originHost.toLowerCase());
    if (!ownPageRsc && (host === undefined || !sameServer(originHost, host))) return FOREIGN;
  }
  if (actionId !== undefined && !knownActions.has(actionId)) return unknownAction;
  return null;
}

const unknownAction: Refusal = { status: 400, slug: 'unknown-server-action', title: 'No such server action in this version of the dashboard', reason: 'unknown-action' };
const unreadable: Refusal = { status: 400, slug: 'unreadable-action-body', title: 'The server action request body cannot be read', reason: 'unreadable-body' };

/** Whether the body has to be read to screen the request: a server action's, multipart or with Next-Action. */
export function bodyNeedsScreening(request: IncomingMessage): boolean {
  return request.method === 'POST' && (header(request, 'next-action') !== undefined || isMultipart(request));
}

/** The refusal an action's body earns (read whole, at most ACTION_BODY_LIMIT), or null. */
export async function screenBody(request: IncomingMessage, body: Buffer, knownActions: ReadonlySet<string>): Promise<Refusal | null> {
  if (!isMultipart(request)) {
    // A fetch action's arguments, as React's encodeReply writes them: JSON text, alone (so it
    // can reference no other part).
    try {
      const root: unknown = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(body));
      // The arguments' list: Next applies the action to it, and anything else throws there.
      return Array.isArray(root) && replyResolves(root, () => undefined) ? null : unreadable;
    } catch {
      return unreadable;
    }
  }
  let form: FormData;
  try {
    form = await new Response(new Uint8Array(body.buffer, body.byteOffset, body.byteLength) as Uint8Array<ArrayBuffer>, { headers: { 'content-type': header(request, 'content-type') ?? '' } }).formData();
  } catch {
    return unreadable;
  }
  // A fetch action's arguments are React's reply encoding, its root in field 0 as JSON.
  if (header(request, 'next-action') !== undefined) {
    const part = (id: string) => form.get(id) ?? undefined;
    const root = part('0');
    try {
      if (typeof root !== 'string') return unreadable;
      const args: unknown = JSON.parse(root);
      return Array.isArray(args) && replyResolves(args, part) ? null : unreadable;
    } catch {
      return unreadable;
    }
  }
  // A form posted without JavaScript names its action: $ACTION_ID_<id>, or $ACTION_REF_<n> with
  // its descriptor {"id": ...} in $ACTION_<n>:0 (a useActionState form).
  for (const name of form.keys()) {
    let id: unknown;
    let resolves = true;
    if (name.startsWith('$ACTION_ID_')) id = name.slice('$ACTION_ID_'.length);
    else if (name.startsWith('$ACTION_REF_')) {
      // Its bound arguments are a reply in the parts $ACTION_<n>:<id>, referenced from `bound`.
      const prefix = `$ACTION_${name.slice('$ACTION_REF_'.length)}:`;
      const descriptor = form.get(`${prefix}0`);
      try {
        const parsed = typeof descriptor === 'string' ? (JSON.parse(descriptor) as { id?: unknown; bound?: unknown }) : undefined;
        id = parsed?.id;
        resolves = replyResolves(parsed?.bound ?? null, (ref) => form.get(`${prefix}${ref}`) ?? undefined);
      } catch {
        return unreadable;
      }
    } else continue;
    if (typeof id !== 'string' || !knownActions.has(id)) return unknownAction;
    if (!resolves) return unreadable;
  }
  return null;
}

/** Strings React's reply decoder reads as values, not references. */
const REPLY_CONSTANTS = new Set(['$undefined', '$NaN', '$Infinity', '$-Infinity', '$-0']);

/**
 * Whether every reference in a React reply value can be resolved: a string starting with `$` is
 * an escaped `$$`, a constant, a date (`$D`), a bigint (`$n`), a form (`$K`), a temporary
 * reference (`$T`), or else names another part by its hex id (after an optional type letter or
 * `@`), which must exist and be JSON that resolves in turn. React's decoder throws on anything
 * else (a missing part, a malformed bigint), and Next answers that with a 500.
 */
function replyResolves(root: unknown, part: (id: string) => FormDataEntryValue | undefined): boolean {
  const visited = new Set<string>();
  const pending: unknown[] = [root];
  while (pending.length > 0) {
    const value = pending.pop();
    if (Array.isArray(value)) pending.push(...(value as unknown[]));
    else if (typeof value === 'object' && value !== null) pending.push(...Object.values(value as Record<string, unknown>));
    else if (typeof value === 'string' && value.startsWith('$')) {
      if (value.startsWith('$$') || REPLY_CONSTANTS.has(value) || /^\$[DKT]/.test(value)) continue;
      if (value.startsWith('$n')) {
        if (!/^\$n-?\d+$/.test(value)) return false;
        continue;
      }
      const id = /^\$[A-Za-z@]?([0-9a-f]+)$/.exec(value)?.[1];
      if (id === undefined) return false;
      if (visited.has(id)) continue;
      visited.add(id);
      const referenced = part(id);
      if (referenced === undefined) return false;
      if (typeof referenced !== 'string') continue; // a blob part
      try {
        pending.push(JSON.parse(referenced) as unknown);
      } catch {
        return false;
      }
    }
  }
  return true;
}

export const bodyTooLarge: Refusal = { status: 413, slug: 'body-too-large', title: 'Request body too large', reason: 'body-too-large' };

/** The action ids a build's server-reference manifest (.next/server/server-reference-manifest.json) lists. */
export function actionIdsOf(manifest: unknown): Set<string> {
  const ids = new Set<string>();
  if (typeof manifest !== 'object' || manifest === null) return ids;
  for (const runtime of ['node', 'edge'] as const) {
    const actions = (manifest as Record<string, unknown>)[runtime];
    if (typeof actions === 'object' && actions !== null) for (const id of Object.keys(actions)) ids.add(id);
  }
  return ids;
}

/** Whether the client wants a page (a browser navigation or form post) rather than JSON. */
export function wantsPage(request: IncomingMessage): boolean {
  return /\btext\/html\b/i.test(header(request, 'accept') ?? '');
}
