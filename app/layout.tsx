import type { Metadata } from 'next';
import { connection } from 'next/server';
import type { ReactNode } from 'react';
import { currentOperator } from '@/app/_lib/dashboard';
import { signOut } from '@/app/login/actions';
import { navigationFor } from '@/app/_lib/navigation';
import { Providers } from '@/app/providers';
import { Nav } from '@/components/nav';
import './globals.css';

export const metadata: Metadata = {
  title: 'Retrysafe',
  description: 'Idempotency-key store and operator dashboard',
};

export default async function RootLayout({ children }: { children: ReactNode }) {
  // Rendered per request (the session decides the header), never prerendered at build time,
  // when the dashboard's settings are not there to read.
  await connection();
  const operator = await currentOperator();
  return (
    <html lang="en">
      <body>
        {/* The first Tab stop: past the header and its navigation to the page's <main id="content">. */}
        <a href="#content" className="skip-link">
          Skip to content
        </a>
        {operator ? (
          <header className="topbar">
            <a href="/" className="brand">
              Retrysafe
            </a>
            <Nav links={navigationFor(operator.role)} />
            <span className="muted who">
              {operator.email} · {operator.role}
            </span>
            {/* Every operator's own page: their password. */}
            <a href="/account">
              Account
            </a>
            <form action={signOut}>
              <button type="submit" className="link">
                Sign out
              </button>
            </form>
          </header>
        ) : null}
        <Providers>{children}</Providers>
      </body>
    </html>
  );
}
