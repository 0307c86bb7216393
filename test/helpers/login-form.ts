// The /login form submitted the way a browser without JavaScript submits it: the page's own
// hidden fields (the server action's reference) plus Email and Password, posted to /login.
// The answer is the page re-rendered with the form's message, or a redirect on success.
// Also the same form as the page's script submits it (a fetch action): submitLoginAsScript.
import http from 'node:http';
import { createRequire } from 'node:module';

const { encodeReply } = createRequire(import.meta.url)('next/dist/compiled/react-server-dom-webpack/client.node') as {
  encodeReply: (value: unknown) => Promise<string | FormData>;
};

export interface FormSubmission {
  status: number;
  /** The message the form shows (role="alert"), or null. */
  message: string | null;
  /** Set-Cookie lines of the answer. */
  setCookie: string[];
}

const decode = (text: string) =>
  text.replaceAll('&quot;', '"').replaceAll('&#x27;', "'").replaceAll('&#39;', "'").replaceAll('&lt;', '<').replaceAll('&gt;', '>').replaceAll('&amp;', '&');

let cachedFields: { baseUrl: string; fields: [string, string][] } | undefined;

/** The form's hidden fields (the action reference), read once per server. */
async function hiddenFields(baseUrl: string): Promise<[string, string][]> {
  if (cachedFields?.baseUrl === baseUrl) return cachedFields.fields;
  const html = await (await fetch(`${baseUrl}/login`)).text();
  const form = /<form[^>]*>([\s\S]*?)<\/form>/.exec(html)?.[1] ?? '';
  const fields: [string, string][] = [];
  for (const input of form.matchAll(/<input([^>]*)\/?>/g)) {
    const attributes = input[1] ?? '';
    if (!/type="hidden"/.test(attributes)) continue;
    const name = /name="([^"]*)"/.exec(attributes)?.[1];
    if (name === undefined) continue;
    fields.push([decode(name), decode(/value="([^"]*)"/.exec(attributes)?.[1] ?? '')]);
  }
  if (!fields.some(([name]) => name.startsWith('$ACTION'))) throw new Error('the login form carries no server action reference');
  cachedFields = { baseUrl, fields };
  return fields;
}

/**
 * Submits the form once; with `waitWhenBusy`, a sign-in refused by the hashing bound ("Too many
 * sign-ins in progress. Try again in N s.") is sent again after those N seconds, as a person would.
 */
export async function submitLoginForm(
  baseUrl: string,
  credentials: { email: string; password: string },
  headers: Record<string, string> = {},
  options: { waitWhenBusy?: boolean } = {},
): Promise<FormSubmission> {
  for (;;) {
    const answer = await submitOnce(baseUrl, credentials, headers);
    const wait = /^Too many sign-ins in progress\. Try again in (\d+) s\.$/.exec(answer.message ?? '')?.[1];
    if (!options.waitWhenBusy || wait === undefined) return answer;
    await new Promise((done) => setTimeout(done, Number(wait) * 1000));
  }
}

async function submitOnce(baseUrl: string, credentials: { email: string; password: string }, headers: Record<string, string>): Promise<FormSubmission> {
  const body = new FormData();
  for (const [name, value] of await hiddenFields(baseUrl)) body.append(name, value);
  body.append('email', credentials.email);
  body.append('password', credentials.password);
  const response = await fetch(`${baseUrl}/login`, { method: 'POST', body, headers: { origin: baseUrl, ...headers }, redirect: 'manual' });
  const html = await response.text();
  const alert = /<p[^>]*role="alert"[^>]*>([\s\S]*?)<\/p>/.exec(html)?.[1];
  return { status: response.status, message: alert === undefined ? null : decode(alert.replace(/<!-- -->/g, '').replace(/<[^>]+>/g, '')), setCookie: response.headers.getSetCookie() };
}

export interface ScriptSubmission {
  status: number;
  contentType: string | null;
  /** Next's x-action-redirect header: where the action sent the browser. */
  redirect: string | null;
  /** Bytes of the answer's body: the redirect target's RSC payload when Next could fetch it from itself. */
  bodyBytes: number;
  setCookie: string[];
}

/**
 * Submits the /login form as the page's script does (a fetch action: Next-Action header, the
 * arguments in React's reply encoding, the form as reference $K1), over node:http so the Host
 * header can be a proxy's. A sign-in that succeeds redirects; Next then fetches the target's RSC
 * payload from itself and sends it in this answer, which saves the browser a round trip.
 */
export async function submitLoginAsScript(
  address: { hostname: string; port: number },
  credentials: { email: string; password: string },
  headers: { host: string; origin: string } & Record<string, string>,
): Promise<ScriptSubmission> {
  const page = await httpRequest(address, { method: 'GET', path: '/login', headers: { host: headers.host } });
  const descriptor = /name="\$ACTION_1:0" value="([^"]*)"/.exec(page.body.toString())?.[1];
  const id = descriptor ? (JSON.parse(decode(descriptor)) as { id?: unknown }).id : undefined;
  if (typeof id !== 'string') throw new Error('the login form carries no action reference');
  const form = new FormData();
  form.append('email', credentials.email);
  form.append('password', credentials.password);
  // The arguments (the previous state, the form) encoded by the encoder the page's script uses.
  const reply = await encodeReply([undefined, form]);
  const encoded = new Response(reply);
  const body = Buffer.from(await encoded.arrayBuffer());
  const answer = await httpRequest(address, {
    method: 'POST',
    path: '/login',
    headers: { ...headers, 'next-action': id, accept: 'text/x-component', 'content-type': encoded.headers.get('content-type') ?? '', 'content-length': String(body.byteLength) },
    body,
  });
  const header = (name: string) => {
    const value = answer.headers[name];
    return Array.isArray(value) ? value.join(', ') : (value ?? null);
  };
  const cookies = answer.headers['set-cookie'];
  return { status: answer.status, contentType: header('content-type'), redirect: header('x-action-redirect'), bodyBytes: answer.body.byteLength, setCookie: cookies ?? [] };
}

/** One request over node:http, whose Host header is the caller's to set (fetch sets its own). */
export function httpRequest(
  address: { hostname: string; port: number },
  request: { method: string; path: string; headers: Record<string, string>; body?: Buffer },
): Promise<{ status: number; headers: import('node:http').IncomingHttpHeaders; body: Buffer }> {
  return new Promise((done, fail) => {
    const sent = http.request({ ...address, method: request.method, path: request.path, headers: request.headers }, (response) => {
      const chunks: Buffer[] = [];
      response.on('data', (chunk: Buffer) => chunks.push(chunk));
      response.on('end', () => done({ status: response.statusCode ?? 0, headers: response.headers, body: Buffer.concat(chunks) }));
      response.on('error', fail);
    });
    sent.on('error', fail);
    sent.end(request.body);
  });
}
