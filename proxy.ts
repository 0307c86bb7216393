// Every page gets a Content-Security-Policy with a fresh nonce: Next puts the nonce on its
// own scripts (it reads it from the request's CSP header), 'strict-dynamic' lets those load
// the rest, and nothing else runs. frame-ancestors 'none' forbids framing (clickjacking).
// API routes answer JSON and are left out; their headers come from next.config.js.
import { NextResponse, type NextRequest } from 'next/server';
import { misdirected } from '@/app/_lib/host';

/** A path whose percent-encoding is not UTF-8: Next answers such a dynamic segment with a bare 500, so it is refused here as what it is. */
function undecodable(pathname: string): Response | null {
  try {
    decodeURIComponent(pathname);
    return null;
  } catch {
    const body = { type: 'urn:retrysafe:problem:invalid-path', title: 'The path is not valid percent-encoded UTF-8', status: 400 };
    return Response.json(body, { status: 400, headers: { 'Content-Type': 'application/problem+json', 'Cache-Control': 'no-store' } });
  }
}

export function proxy(request: NextRequest): NextResponse | Response {
  // The API routes it matches (those with a dynamic segment) get the path check only.
  if (request.nextUrl.pathname.startsWith('/api/')) return undecodable(request.nextUrl.pathname) ?? NextResponse.next();
  // Pages answer only for this server's own host names (DNS rebinding: app/_lib/host.ts).
  const refused = misdirected(request.headers);
  if (refused) return refused;
  const nonce = Buffer.from(crypto.randomUUID()).toString('base64');
  const secure = request.nextUrl.protocol === 'https:';
  const policy = [
    "default-src 'self'",
    `script-src 'self' 'nonce-${nonce}' 'strict-dynamic'`,
    // React and Recharts set style attributes; styles cannot run code.
    "style-src 'self' 'unsafe-inline'",
    "img-src 'self' data: blob:",
    "font-src 'self'",
    "connect-src 'self'",
    "object-src 'none'",
    "base-uri 'self'",
    "form-action 'self'",
    "frame-ancestors 'none'",
    ...(secure ? ['upgrade-insecure-requests'] : []),
  ].join('; ');
  const headers = new Headers(request.headers);
  headers.set('Content-Security-Policy', policy);
  const response = NextResponse.next({ request: { headers } });
  response.headers.set('Content-Security-Policy', policy);
  return response;
}

// Every page, prefetches included: a request header must not be able to switch the policy
// off (a page fetched with `Purpose: prefetch` is still HTML a browser may render). Of the API,
// only the routes with a dynamic segment, for the path check.
export const config = {
  matcher: ['/((?!api/|_next/static|_next/image|favicon.ico).*)', '/api/admin/operators/:id+'],
};
