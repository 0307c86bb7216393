import 'server-only';
import { randomUUID } from 'node:crypto';
import { problemResponse } from '@retrysafe/store';

/** Route handlers for the methods an endpoint does not support: a problem+json 405. */
export function onlyPost(): Record<'GET' | 'PUT' | 'PATCH' | 'DELETE', () => Response> {
  const refuse = () =>
    problemResponse({ status: 405, slug: 'method-not-allowed', title: 'Only POST is supported here', headers: { Allow: 'POST' } }, randomUUID());
  return { GET: refuse, PUT: refuse, PATCH: refuse, DELETE: refuse };
}
