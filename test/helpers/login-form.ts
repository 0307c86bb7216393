// The /login form submitted the way a browser without JavaScript submits it: the page's own
// hidden fields (the server action's reference) plus Email and Password, posted to /login.
// The answer is the page re-rendered with the form's message, or a redirect on success.

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
