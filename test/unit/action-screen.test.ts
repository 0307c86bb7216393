// What the HTTP front refuses before Next: a server action or RSC request from another origin or
// `null` (403), an action id the build does not list (400), a body that cannot be read (400); and
// what it lets through: this origin's requests, a real action's form, plain page requests.
import { IncomingMessage } from 'node:http';
import { Socket } from 'node:net';
import { describe, expect, it } from 'vitest';
import { actionIdsOf, isActionOrRsc, screenBody, screenHeaders } from '../../server/action-screen';

const REAL = 'a'.repeat(42);
const known = actionIdsOf({ node: { [REAL]: { workers: {} } }, edge: {}, encryptionKey: 'never read' });

function request(method: string, headers: Record<string, string>): IncomingMessage {
  const message = new IncomingMessage(new Socket());
  message.method = method;
  message.url = '/login';
  message.headers = { host: 'dash.example:3000', ...headers };
  return message;
}

const form = (fields: [string, string][]) => {
  const text = fields.map(([name, value]) => `--x-boundary-7d\r\nContent-Disposition: form-data; name="${name}"\r\n\r\n${value}\r\n`).join('') + '--x-boundary-7d--\r\n';
  return Buffer.from(text);
};
const MULTIPART = { 'content-type': 'multipart/form-data; boundary=x-boundary-7d' };

describe('the server action screen', () => {
  it('takes for an action what Next does, and RSC requests', () => {
    expect(isActionOrRsc(request('POST', { 'next-action': REAL }))).toBe(true);
    expect(isActionOrRsc(request('POST', MULTIPART))).toBe(true);
    expect(isActionOrRsc(request('GET', { rsc: '1' }))).toBe(true);
    expect(isActionOrRsc(request('POST', { 'content-type': 'application/json' }))).toBe(false);
    expect(isActionOrRsc(request('GET', {}))).toBe(false);
  });

  it('takes only the host reached for an Origin where the dashboard names none of its own: another loopback name, port or host is refused', () => {
    const at = (host: string, origin: string) => screenHeaders(request('GET', { host, origin, rsc: '1' }), known);
    expect(at('127.0.0.1:3000', 'http://127.0.0.1:3000')).toBeNull();
    expect(at('LocalHost:3000', 'http://localhost:3000')).toBeNull();
    expect(at('127.0.0.1:3000', 'http://localhost:3000')).toMatchObject({ status: 403 });
    expect(at('127.0.0.1:3000', 'http://localhost:3001')).toMatchObject({ status: 403 });
    expect(at('127.0.0.1:3000', 'http://localhost.evil.example:3000')).toMatchObject({ status: 403 });
    expect(at('dash.example:3000', 'http://localhost:3000')).toMatchObject({ status: 403 });
    // An action from the page at localhost to the server at 127.0.0.1 (which Next itself answers
    // 500: its own origin check compares the names) is refused here first, as a foreign origin.
    expect(screenHeaders(request('POST', { host: '127.0.0.1:3000', origin: 'http://localhost:3000', 'next-action': REAL }), known)).toMatchObject({ status: 403, reason: 'foreign-origin' });
  });

  it("takes Next's fetch from itself, to 127.0.0.1 with the page's Origin at localhost, by the dashboard's own hosts (npm start's)", () => {
    const own = new Set(['localhost:3000', '127.0.0.1:3000', '[::1]:3000']);
    const rsc = (host: string, origin: string) => screenHeaders(request('GET', { host, origin, rsc: '1' }), known, own);
    expect(rsc('127.0.0.1:3000', 'http://localhost:3000')).toBeNull();
    expect(rsc('127.0.0.1:3000', 'http://[::1]:3000')).toBeNull();
    expect(rsc('127.0.0.1:3000', 'http://localhost:3001')).toMatchObject({ status: 403 });
  });

  it("takes an RSC request whose Origin is one of the dashboard's own hosts at any Host it reached (Next's fetch from itself behind a proxy), but never an action", () => {
    const own = new Set(['retrysafe.example', '127.0.0.1:3000']);
    const rsc = (host: string, origin: string) => screenHeaders(request('GET', { host, origin, rsc: '1' }), known, own);
    expect(rsc('127.0.0.1:3000', 'https://retrysafe.example')).toBeNull();
    expect(rsc('127.0.0.1:3000', 'https://RetrySafe.example')).toBeNull();
    expect(rsc('127.0.0.1:3000', 'https://evil.example')).toMatchObject({ status: 403 });
    expect(rsc('127.0.0.1:3000', 'https://retrysafe.example:8443')).toMatchObject({ status: 403 });
    // Without the dashboard's hosts (the default), the Origin must name the host reached.
    expect(screenHeaders(request('GET', { host: '127.0.0.1:3000', origin: 'https://retrysafe.example', rsc: '1' }), known)).toMatchObject({ status: 403 });
    // An action's Origin must name the host it reached, as Next requires, even one of the dashboard's own.
    const action = screenHeaders(request('POST', { host: '127.0.0.1:3000', origin: 'https://retrysafe.example', 'next-action': REAL }), known, own);
    expect(action).toMatchObject({ status: 403, reason: 'foreign-origin' });
  });

  it('refuses another origin, null and an unparsable one with 403, and lets this one through', () => {
    for (const origin of ['http://evil.example', 'null', 'http://', 'http://dash.example:3001']) {
      expect(screenHeaders(request('POST', { origin, 'next-action': REAL }), known)).toMatchObject({ status: 403 });
    }
    expect(screenHeaders(request('GET', { origin: 'http://evil.example', rsc: '1' }), known)).toMatchObject({ status: 403 });
    expect(screenHeaders(request('POST', { origin: 'http://dash.example:3000', 'next-action': REAL }), known)).toBeNull();
    expect(screenHeaders(request('POST', { origin: 'https://dash.example:3000', 'x-forwarded-host': 'dash.example:3000', 'next-action': REAL }), known)).toBeNull();
  });

  it('refuses an action id the manifest does not list with 400', () => {
    expect(screenHeaders(request('POST', { 'next-action': 'b'.repeat(42) }), known)).toMatchObject({ status: 400, reason: 'unknown-action' });
    expect(screenHeaders(request('POST', { 'next-action': 'encryptionKey' }), known)).toMatchObject({ status: 400 });
  });

  it('reads the body: broken multipart, made-up form references and non-JSON arguments are 400', async () => {
    const post = request('POST', MULTIPART);
    expect(await screenBody(post, Buffer.from('--b\r\nContent-Disposition: form-data; name="a"\r\n\r\nno end'), known)).toMatchObject({ status: 400, reason: 'unreadable-body' });
    expect(await screenBody(post, form([[`$ACTION_ID_${'b'.repeat(42)}`, '']]), known)).toMatchObject({ status: 400, reason: 'unknown-action' });
    expect(await screenBody(post, form([['$ACTION_REF_1', ''], ['$ACTION_1:0', '{"id":"nope","bound":"$@1"}']]), known)).toMatchObject({ reason: 'unknown-action' });
    expect(await screenBody(post, form([['$ACTION_REF_1', ''], ['$ACTION_1:0', '{"id":']]), known)).toMatchObject({ reason: 'unreadable-body' });
    expect(await screenBody(request('POST', { 'next-action': REAL, 'content-type': 'text/plain;charset=UTF-8' }), Buffer.from('{"broken'), known)).toMatchObject({ status: 400 });
    const fetchAction = request('POST', { 'next-action': REAL, ...MULTIPART });
    expect(await screenBody(fetchAction, form([['1_email', 'a@b.example']]), known)).toMatchObject({ reason: 'unreadable-body' });
    expect(await screenBody(fetchAction, form([['0', '["$K1"']]), known)).toMatchObject({ reason: 'unreadable-body' });
    expect(await screenBody(fetchAction, form([['0', '[{"error":null,"email":""},"$K1"]'], ['1_email', 'a@b.example']]), known)).toBeNull();
    // References React's decoder cannot resolve (it throws, Next answers 500).
    const text = request('POST', { 'next-action': REAL, 'content-type': 'text/plain;charset=UTF-8' });
    for (const args of ['["$1"]', '[{"a":"$@2"}]', '["$Qz"]', '["$nx"]', '["$"]', '1', '{"0":1}', 'null']) expect(await screenBody(text, Buffer.from(args), known), args).toMatchObject({ reason: 'unreadable-body' });
    for (const args of ['["$$1"]', '["$undefined", "$D2026-01-01T00:00:00.000Z", "$n12", "$K1"]']) expect(await screenBody(text, Buffer.from(args), known), args).toBeNull();
    expect(await screenBody(fetchAction, form([['0', '["$Q1"]'], ['1', '[["a",1]]']]), known)).toBeNull();
    expect(await screenBody(fetchAction, form([['0', '["$Q1"]'], ['1', '["$2"]']]), known)).toMatchObject({ reason: 'unreadable-body' });
    const bound = (args: string) => form([['$ACTION_REF_1', ''], ['$ACTION_1:0', JSON.stringify({ id: REAL, bound: '$@1' })], ['$ACTION_1:1', args]]);
    expect(await screenBody(post, bound('["$3"]'), known)).toMatchObject({ reason: 'unreadable-body' });
    expect(await screenBody(post, bound('not json'), known)).toMatchObject({ reason: 'unreadable-body' });
    expect(await screenBody(post, form([['$ACTION_REF_1', ''], ['$ACTION_1:0', JSON.stringify({ id: REAL, bound: '$@1' })]]), known)).toMatchObject({ reason: 'unreadable-body' });
    // The real action's forms, and a multipart post naming no action at all, pass.
    expect(await screenBody(post, form([[`$ACTION_ID_${REAL}`, ''], ['email', 'a@b.example']]), known)).toBeNull();
    expect(await screenBody(post, form([['$ACTION_REF_1', ''], ['$ACTION_1:0', JSON.stringify({ id: REAL, bound: '$@1' })], ['$ACTION_1:1', '["$K1"]']]), known)).toBeNull();
    expect(await screenBody(post, form([['email', 'a@b.example']]), known)).toBeNull();
    expect(await screenBody(request('POST', { 'next-action': REAL, 'content-type': 'text/plain;charset=UTF-8' }), Buffer.from('[{"a":1}]'), known)).toBeNull();
  });
});
