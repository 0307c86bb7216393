// A problem+json (RFC 9457) answer from the admin API as one sentence for a banner: the
// field errors by their form labels when there are some, else the title.
interface Problem {
  title?: string;
  errors?: { path: string; message: string }[];
}

export async function problemMessage(response: Response, labels: Record<string, string> = {}): Promise<string> {
  if (response.status === 401) return 'Your session has ended: sign in again.';
  const problem = (await response.json().catch(() => null)) as Problem | null;
  const details = problem?.errors?.map((error) => (error.path ? `${labels[error.path] ?? error.path}: ${error.message}` : error.message)).join('; ');
  return details || problem?.title || `The server answered ${response.status}`;
}
