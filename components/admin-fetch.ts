// The dashboard's calls to its admin API: JSON in and out, and a problem+json answer turned
// into an Error whose message a person can act on (the field errors, else the title).
export class AdminApiError extends Error {
  constructor(
    message: string,
    readonly status: number,
  ) {
    super(message);
  }
}

interface Problem {
  title?: string;
  errors?: { path: string; message: string }[];
}

/** The session ended (signed out, expired or revoked): stop refreshing and offer sign-in. */
export function sessionEnded(error: unknown): boolean {
  return error instanceof AdminApiError && error.status === 401;
}

/** A refetch interval that stops once the session has ended. */
export function refreshEvery(ms: number | false): (query: { state: { error: Error | null } }) => number | false {
  return (query) => (sessionEnded(query.state.error) ? false : ms);
}

export async function adminFetch<T>(url: string, options: { method?: 'GET' | 'POST' | 'PATCH'; body?: unknown; fieldLabels?: Record<string, string> } = {}): Promise<T> {
  const response = await fetch(url, {
    method: options.method ?? 'GET',
    headers: { accept: 'application/json', ...(options.body === undefined ? {} : { 'content-type': 'application/json' }) },
    ...(options.body === undefined ? {} : { body: JSON.stringify(options.body) }),
  });
  if (response.status === 401) throw new AdminApiError('Your session has ended: sign in again.', 401);
  if (!response.ok) {
    const problem = (await response.json().catch(() => null)) as Problem | null;
    const fields = problem?.errors?.map((error) => (error.path ? `${options.fieldLabels?.[error.path] ?? error.path}: ${error.message}` : error.message)).join('; ');
    throw new AdminApiError(fields || problem?.title || `The server answered ${response.status}`, response.status);
  }
  return (await response.json()) as T;
}
