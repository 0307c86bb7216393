// Every page gets a Content-Security-Policy with a fresh nonce: Next puts the nonce on its
// own scripts (it reads it from the request's CSP header), 'strict-dynamic' lets those load
// the rest, and nothing else runs. frame-ancestors 'none' forbids framing (clickjacking).
// API routes answer JSON and are left out; their headers come from next.config.js.
import { NextResponse, type NextRequest } from 'next/server';
import { misdirected } from '@/app/_lib/host';

export function proxy(request: NextRequest): NextResponse | Response {
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
// off (a page fetched with `Purpose: prefetch` is still HTML a browser may render).
export const config = {
  matcher: ['/((?!api/|_next/static|_next/image|favicon.ico).*)'],
};
