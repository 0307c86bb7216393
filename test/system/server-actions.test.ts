// Refused server actions are refused, not server faults: POST /login as a server action from a
// foreign or null Origin, with a made-up action id, or with a body that cannot be read, and an
// RSC request from a foreign Origin, each answer 403 or 400 (problem+json unless the client asked
// for HTML, then a page) and are logged as one JSON line at warn, every time (each is sent twice).
// Nothing the server prints meanwhile is anything but JSON. A real sign-in form still works.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { submitLoginForm } from '../helpers/login-form';
import { useTestDatabase } from '../helpers/database';
import { startServer, testAdmin, type RunningServer } from '../helpers/server';

interface Refused {
  name: string;
  init: (base: string, actionId: string) => { method: string; path?: string; headers: Record<string, string>; body?: string | FormData };
  status: number;
  page?: boolean;
}

const MADE_UP_ID = `7f${'0'.repeat(40)}`;
const multipart = (boundary: string, text: string) => ({ 'content-type': `multipart/form-data; boundary=${boundary}`, body: text });

const refused: Refused[] = [
  {
    name: 'a fetch action from a foreign Origin',
    init: (_base, id) => ({ method: 'POST', headers: { origin: 'http://evil.example', 'next-action': id, accept: 'text/x-component', 'content-type': 'text/plain;charset=UTF-8' }, body: '[]' }),
    status: 403,
  },
  {
    // The body is not needed to refuse it, but the client is still sending it: the answer must
    // not cut the upload off (the client would see EPIPE or a reset, not the 403).
    name: 'a form post from a foreign Origin with a 512 KB field',
    init: () => {
      const form = new FormData();
      form.append('note', 'x'.repeat(512 * 1024));
      return { method: 'POST', headers: { origin: 'http://evil.example', 'x-forwarded-host': 'evil.example', accept: 'application/json' }, body: form };
    },
    status: 403,
  },
  {
    name: 'a fetch action from Origin null',
    init: (_base, id) => ({ method: 'POST', headers: { origin: 'null', 'next-action': id, accept: 'text/x-component', 'content-type': 'text/plain;charset=UTF-8' }, body: '[]' }),
    status: 403,
  },
  {
    name: 'a form post from a foreign Origin, as a browser sends it',
    init: () => {
      const form = new FormData();
      form.append('email', 'a@b.example');
      return { method: 'POST', headers: { origin: 'http://evil.example', accept: 'text/html,application/xhtml+xml' }, body: form };
    },
    status: 403,
    page: true,
  },
  {
    name: 'a fetch action with a made-up id',
    init: (base) => ({ method: 'POST', headers: { origin: base, 'next-action': MADE_UP_ID, accept: 'text/x-component', 'content-type': 'text/plain;charset=UTF-8' }, body: '[]' }),
    status: 400,
  },
  {
    name: 'a fetch action with an id that is not one at all',
    init: (base) => ({ method: 'POST', headers: { origin: base, 'next-action': 'x', accept: 'application/json', 'content-type': 'text/plain;charset=UTF-8' }, body: '[]' }),
    status: 400,
  },
  {
    name: 'a form post naming a made-up action',
    init: (base) => {
      const form = new FormData();
      form.append(`$ACTION_ID_${MADE_UP_ID}`, '');
      return { method: 'POST', headers: { origin: base, accept: 'text/html' }, body: form };
    },
    status: 400,
    page: true,
  },
  {
    name: 'a broken multipart body',
    init: (base) => {
      const { body, ...headers } = multipart('xyz', '--xyz\r\nContent-Disposition: form-data; name="a"\r\n\r\nno end');
      return { method: 'POST', headers: { origin: base, accept: 'text/html', ...headers }, body };
    },
    status: 400,
    page: true,
  },
  {
    name: 'a fetch action with a broken multipart body',
    init: (base, id) => {
      const { body, ...headers } = multipart('xyz', 'not multipart at all');
      return { method: 'POST', headers: { origin: base, 'next-action': id, accept: 'text/x-component', ...headers }, body };
    },
    status: 400,
  },
  {
    name: 'a fetch action whose arguments are not JSON',
    init: (base, id) => ({ method: 'POST', headers: { origin: base, 'next-action': id, accept: 'text/x-component', 'content-type': 'text/plain;charset=UTF-8' }, body: '{"broken' }),
    status: 400,
  },
  {
    name: 'an RSC request from a foreign Origin',
    init: () => ({ method: 'GET', headers: { origin: 'http://evil.example', rsc: '1', accept: 'text/x-component' } }),
    status: 403,
  },
];

/** The sign-in action's id, from the reference the /login form carries. */
async function signInActionId(base: string): Promise<string> {
  const html = await (await fetch(`${base}/login`)).text();
  const descriptor = /name="\$ACTION_1:0" value="([^"]*)"/.exec(html)?.[1]?.replaceAll('&quot;', '"');
  const id = descriptor ? (JSON.parse(descriptor) as { id?: unknown }).id : undefined;
  if (typeof id !== 'string') throw new Error('the login form carries no action reference');
  return id;
}

describe('refused server actions', () => {
  const db = useTestDatabase();
  let server: RunningServer | undefined;
  let actionId = '';

  beforeAll(async () => {
    server = await startServer(db.url, { DEMO_TRAFFIC: '0' });
    actionId = await signInActionId(server.baseUrl);
  });
  afterAll(async () => {
    await server?.stop();
  });

  it('answers each with 403 or 400 twice, logs each as one JSON line at warn, and prints nothing but JSON', async () => {
    const base = server?.baseUrl ?? '';
    const before = (server?.output() ?? '').length;
    const answers: string[] = [];
    for (const test of refused) {
      for (let time = 0; time < 2; time += 1) {
        const { method, path, headers, body } = test.init(base, actionId);
        const response = await fetch(`${base}${path ?? '/login'}`, { method, headers, body, redirect: 'manual' });
        const text = await response.text();
        answers.push(`${test.name}: ${response.status} ${response.headers.get('content-type')}`);
        expect(response.status, test.name).toBe(test.status);
        if (test.page) {
          expect(response.headers.get('content-type'), test.name).toMatch(/^text\/html/);
          expect(text).toContain('Request refused');
        } else {
          expect(response.headers.get('content-type'), test.name).toBe('application/problem+json');
          expect(JSON.parse(text)).toMatchObject({ status: test.status });
        }
      }
    }
    const expected = refused.length * 2;
    const warnings = () =>
      (server?.output() ?? '')
        .slice(before)
        .split('\n')
        .filter((line) => line.includes('refused a server action request'));
    await expect.poll(() => warnings().length).toBe(expected);
    for (const line of warnings()) expect(JSON.parse(line)).toMatchObject({ level: 'warn', msg: 'refused a server action request', path: '/login' });
    const printed = (server?.output() ?? '').slice(before).split('\n').filter((line) => line.trim() !== '');
    for (const line of printed) expect(() => JSON.parse(line) as unknown, `not JSON: ${line}`).not.toThrow();
    expect(printed.join('\n')).not.toMatch(/⨯|Invalid Server Actions request/);
  });

  it('still runs the real sign-in action: a wrong password re-renders the form, the right one signs in', async () => {
    const base = server?.baseUrl ?? '';
    const wrong = await submitLoginForm(base, { email: testAdmin.email, password: 'not-the-password' });
    expect(wrong.status).toBe(200);
    expect(wrong.message).toBe('Wrong email or password, or the account is disabled.');
    const right = await submitLoginForm(base, testAdmin);
    expect(right.status).toBe(303);
    expect(right.setCookie.some((line) => line.startsWith('retrysafe.session_token='))).toBe(true);
  });
});
