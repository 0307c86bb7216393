'use client';
// The overview's alert banners, the pending checks and the checks that passed (pghero's
// convention): each banner says the value against its threshold, where (a scope, or store-wide),
// since when, and links to where the action happens. A pending check (over its threshold, not yet
// for its duration) is amber with how long it has held, never a tick. Not a live region: the
// values change on every refresh.
import Link from 'next/link';
import type { OverviewJson } from '@/server/metrics/overview';
import { LocalClock, LocalTime } from '../local-time';
import { overviewHref, windowAround, type OverviewSearch } from './search-params';

type Check = OverviewJson['checks'][number];

function where(check: Check, search: OverviewSearch): string {
  if (check.storeWide) return 'Store-wide';
  if (check.scope !== null) return `Scope ${check.scope} of ${check.service ?? 'every service'}`;
  if (check.service !== null) return `All scopes of ${check.service}`;
  return search.service ? `All scopes of ${search.service}` : 'All scopes together';
}

function linkOf(check: Check, search: OverviewSearch): { href: string; label: string } {
  switch (check.link) {
    case 'principals':
      // The principals table of the alert's own scope, with the rest of the page's state.
      return { href: `${overviewHref({ ...search, service: check.service ?? search.service, scope: check.scope ?? search.scope })}#principals`, label: 'Principals behind it' };
    case 'claims':
      return { href: '/claims', label: 'Stale claims' };
    case 'store':
      return { href: `${overviewHref(search)}#store`, label: 'Store now' };
    case 'retention':
      return { href: '/retention', label: 'Retention review' };
    case 'unrecorded': {
      // The key lookup page's list of them, for the alert's service (or the one chosen).
      const service = check.service ?? search.service;
      return { href: `/keys${service ? `?service=${encodeURIComponent(service)}` : ''}#unrecorded`, label: 'The keys' };
    }
    case 'reconcile': {
      // The key lookup page's reconciliation findings, for the alert's service (or the one chosen).
      const service = check.service ?? search.service;
      return { href: `/keys${service ? `?service=${encodeURIComponent(service)}` : ''}#reconcile`, label: 'The keys' };
    }
  }
}

export function CheckBanners({ checks, search }: { checks: Check[]; search: OverviewSearch }) {
  const firing = checks.filter((check) => check.state === 'firing');
  const pending = checks.filter((check) => check.state === 'pending');
  const passed = checks.filter((check) => check.state === 'ok');
  return (
    <section aria-labelledby="alerts-heading" className="checks">
      <h2 id="alerts-heading" className="visually-hidden">
        Alerts
      </h2>
      {firing.length === 0 ? (
        <div className="banner ok">
          No alert is firing: {pending.length === 0 ? `all ${passed.length} checks passed.` : `${pending.length} pending, ${passed.length} of ${checks.length} checks passed.`}
        </div>
      ) : null}
      {pending.map((check) => {
        const link = linkOf(check, search);
        return (
          <article
            key={`pending:${check.name}:${check.service ?? ''}:${check.scope ?? ''}`}
            className="banner pending"
            aria-label={`Pending: ${check.title}: ${where(check, search)}`}
          >
            <div className="banner-head">
              <strong>Pending: {check.title}</strong>
              <span className="scope-tag">{where(check, search)}</span>
            </div>
            <span>
              Now <strong>{check.value}</strong>, fires when {check.threshold}
              {check.since ? (
                <>
                  {' '}
                  · since <LocalClock iso={check.since} />
                  {check.forMinutes !== null ? `, ${Math.min(check.heldMinutes ?? 0, check.forMinutes)} of ${check.forMinutes} min` : null}
                </>
              ) : null}
            </span>
            <span>
              Not an alert yet: it fires if this lasts.{' '}
              <Link href={link.href} className="banner-link">
                {link.label} →
              </Link>
            </span>
          </article>
        );
      })}
      {firing.map((check) => {
        const link = linkOf(check, search);
        return (
          <article key={`${check.name}:${check.service ?? ''}:${check.scope ?? ''}`} className={`banner ${check.severity}`} aria-label={`${check.title}: ${where(check, search)}`}>
            <div className="banner-head">
              <strong>
                {check.severity === 'critical' ? 'Critical' : 'Warning'}: {check.title}
              </strong>
              <span className="scope-tag">{where(check, search)}</span>
            </div>
            <span>
              Now <strong>{check.value}</strong>, threshold {check.threshold}
              {check.since ? (
                <>
                  {' '}
                  · since <LocalTime iso={check.since} />{' '}
                  <Link href={overviewHref({ ...search, ...windowAround(check.since) })} className="banner-link">
                    the hour around its start
                  </Link>
                </>
              ) : null}
            </span>
            <span className="muted small">{check.summary}</span>
            <span>
              What to do: {check.action}{' '}
              <Link href={link.href} className="banner-link">
                {link.label} →
              </Link>
            </span>
          </article>
        );
      })}
      {passed.length > 0 ? (
        <details className="card passed" open={firing.length === 0 && pending.length === 0}>
          <summary>
            Checks passed ({passed.length} of {checks.length})
          </summary>
          <div className="table-scroll">
            <table className="stack">
              <caption className="visually-hidden">Checks that passed, with their current values</caption>
              <thead>
                <tr>
                  <th scope="col">Check</th>
                  <th scope="col">Where</th>
                  <th scope="col">Now</th>
                  <th scope="col">Fires when</th>
                </tr>
              </thead>
              <tbody>
                {passed.map((check) => (
                  <tr key={check.name}>
                    <td data-label="Check">
                      <span className="ok" aria-hidden="true">
                        ✓
                      </span>{' '}
                      {check.title}
                    </td>
                    <td data-label="Where">{where(check, search)}</td>
                    <td data-label="Now">{check.value}</td>
                    <td data-label="Fires when">{check.threshold}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        </details>
      ) : null}
    </section>
  );
}
