'use client';
// The dashboard's navigation, marking the current page. The layout passes only the pages
// the operator's role includes (each page enforces the same rule on the server; hiding a
// link is a courtesy, not the check).
import Link from 'next/link';
import { usePathname } from 'next/navigation';

export interface NavLink {
  href: string;
  label: string;
}

export function Nav({ links }: { links: NavLink[] }) {
  const pathname = usePathname();
  return (
    <nav aria-label="Dashboard" className="nav">
      {links.map((link) => (
        <Link key={link.href} href={link.href} aria-current={pathname === link.href ? 'page' : undefined}>
          {link.label}
        </Link>
      ))}
    </nav>
  );
}
