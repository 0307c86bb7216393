'use client';
// The audit log for compliance: filters by actor, action and time kept in the URL (so a link
// reproduces the view), newest first, older pages appended by keyset cursor, and the CSV
// export of the same filters (which is itself audited).
import { useInfiniteQuery } from '@tanstack/react-query';
import Link from 'next/link';
import { useRouter } from 'next/navigation';
import { useState } from 'react';
import type { AuditEntry, AuditPage } from '@/server/audit/query';
import { LocalTime, useHydrated } from '../local-time';
import { adminFetch } from '../admin-fetch';
import { RefreshControl } from '../refresh-control';
import { queryKeys } from '../query-keys';
import { keyValues } from './key-values';
import { auditApiUrl, auditCsvUrl, auditHref, hasFilters, isoToLocalInput, knownActions, localInputToIso, type AuditSearch } from './search-params';
import { LoadProblem } from '../banners';
import { DownloadProblem, useDownload } from '../download';
import { formText } from '../form-text';
import { isPolicyField, policyChanges, policyFieldLabels, policyValueWords } from '@/server/retention/policy-words';

const fetchAuditPage = (search: AuditSearch, after: string | null) => adminFetch<AuditPage>(auditApiUrl(search, after));

export function AuditLog({ search }: { search: AuditSearch }) {
  const log = useInfiniteQuery({
    queryKey: queryKeys.auditLog(search),
    queryFn: ({ pageParam }) => fetchAuditPage(search, pageParam),
    initialPageParam: null as string | null,
    getNextPageParam: (last) => last.next,
  });
  const entries = log.data?.pages.flatMap((page) => page.entries) ?? [];
  const filtered = hasFilters(search);
  const download = useDownload();

  return (
    <>
      <AuditFilters search={search} />
      {log.error ? (
        <LoadProblem error={log.error} what="the audit log" />
      ) : null}
      <div className="toolbar log-toolbar">
        <RefreshControl isFetching={log.isFetching && !log.isFetchingNextPage} updatedAt={log.dataUpdatedAt} onRefresh={() => void log.refetch()} />
        <span className="export">
          <span className="muted small" id="export-note">
            Same filters, up to 10,000 rows; the export is itself audited.
          </span>
          <button type="button" className="button-link" onClick={() => download.start(auditCsvUrl(search), 'retrysafe-audit.csv')} aria-disabled={download.busy !== null} aria-describedby="export-note">
            {download.busy ? 'Exporting…' : 'Export CSV'}
          </button>
        </span>
      </div>
      <DownloadProblem failure={download.failure} />
      {log.data && entries.length === 0 ? (
        <div className="empty card">
          <p>{filtered ? 'No audit entry matches these filters.' : 'The audit log is empty.'}</p>
          {filtered ? <Link href="/audit">Show every entry</Link> : null}
        </div>
      ) : null}
      {entries.length > 0 ? (
        <div className="card table-scroll">
          <table className="audit stack">
            <caption className="visually-hidden">Audit entries, newest first</caption>
            <thead>
              <tr>
                <th scope="col">Time</th>
                <th scope="col">Actor</th>
                <th scope="col">Action</th>
                <th scope="col">Target</th>
                <th scope="col">Reason</th>
                <th scope="col">Details</th>
              </tr>
            </thead>
            <tbody>
              {entries.map((entry) => (
                <AuditRow key={entry.id} entry={entry} />
              ))}
            </tbody>
          </table>
          <div className="table-footer">
            <span className="muted small">
              Showing {entries.length} {entries.length === 1 ? 'entry' : 'entries'}
              {log.hasNextPage ? ', newest first.' : filtered ? '; no older entry matches.' : '; that is the whole log.'}
            </span>
            {log.hasNextPage ? (
              <button type="button" className="link" onClick={() => void log.fetchNextPage()} disabled={log.isFetchingNextPage}>
                {log.isFetchingNextPage ? 'Loading…' : 'Older entries'}
              </button>
            ) : null}
          </div>
        </div>
      ) : null}
    </>
  );
}

function AuditFilters({ search }: { search: AuditSearch }) {
  const router = useRouter();
  const hydrated = useHydrated();
  const [problem, setProblem] = useState<string | null>(null);
  // The datetime inputs show the URL's times in the browser's zone, known only after hydration.
  const from = hydrated ? isoToLocalInput(search.from) : '';
  const to = hydrated ? isoToLocalInput(search.to) : '';
  return (
    <form
      // Re-mounted when the URL changes (back/forward) so the inputs show what is applied.
      key={`${auditHref(search)} ${hydrated}`}
      className="card filters"
      role="search"
      aria-label="Filter the audit log"
      onSubmit={(event) => {
        event.preventDefault();
        const form = new FormData(event.currentTarget);
        const next: AuditSearch = {
          actor: formText(form, 'actor').trim() || undefined,
          action: formText(form, 'action').trim() || undefined,
          from: localInputToIso(formText(form, 'from').trim()),
          to: localInputToIso(formText(form, 'to').trim()),
          signIns: form.get('signIns') === 'hide' ? 'hide' : undefined,
        };
        if (next.from && next.to && new Date(next.from) >= new Date(next.to)) {
          setProblem('"From" must be before "To".');
          return;
        }
        setProblem(null);
        router.push(auditHref(next), { scroll: false });
      }}
    >
      <label>
        Actor
        <input name="actor" defaultValue={search.actor} placeholder="an email, or system" autoComplete="off" spellCheck={false} maxLength={254} />
      </label>
      <label>
        Action
        <input name="action" list="audit-actions" defaultValue={search.action} placeholder="any, or a start such as policy." autoComplete="off" spellCheck={false} maxLength={100} />
      </label>
      <datalist id="audit-actions">
        {knownActions.map((action) => (
          <option key={action} value={action} />
        ))}
      </datalist>
      <label>
        From
        <input type="datetime-local" name="from" defaultValue={from} step={from.length > 16 ? 1 : undefined} />
      </label>
      <label>
        To
        <input type="datetime-local" name="to" defaultValue={to} step={to.length > 16 ? 1 : undefined} />
      </label>
      <label className="check filter-check">
        <input type="checkbox" name="signIns" value="hide" defaultChecked={search.signIns === 'hide'} />
        Hide sign-ins and sign-outs
      </label>
      <div className="filter-actions">
        <button type="submit">Apply filters</button>
        {hasFilters(search) ? (
          <Link href="/audit" className="button-link">
            Clear filters
          </Link>
        ) : null}
        <span className="muted small">
          Actor matches exactly; action matches a whole action, or the start of one (policy. finds every policy action). Times are in your time zone{hydrated ? ` (${Intl.DateTimeFormat().resolvedOptions().timeZone})` : ''}; “To” is exclusive.
        </span>
        {problem ? (
          <span className="bad" role="alert">
            {problem}
          </span>
        ) : null}
      </div>
    </form>
  );
}

function AuditRow({ entry }: { entry: AuditEntry }) {
  // data-label: the column's name beside each value when the table stacks on a phone.
  return (
    <tr>
      <td className="nowrap" data-label="Time">
        <LocalTime iso={entry.at} stacked />
      </td>
      <td className="actor" data-label="Actor">
        <Actor name={entry.actor} />
      </td>
      <td className="nowrap" data-label="Action">
        <code>{entry.action}</code>
        {entry.occurrences > 1 ? (
          <span className="muted">
            {' '}× {entry.occurrences}
            {entry.lastAt ? (
              <>
                , last <LocalTime iso={entry.lastAt} />
              </>
            ) : null}
          </span>
        ) : null}
      </td>
      <td className={blank(entry.target) ? 'pairs blank' : 'pairs'} data-label="Target">
        <KeyValues value={entry.target} />
      </td>
      <td className={entry.reason ? 'reason' : 'reason blank'} data-label="Reason">
        {entry.reason ?? <span className="muted">—</span>}
      </td>
      <td className={blank(entry.details) ? 'pairs blank' : 'pairs'} data-label="Details">
        {entry.action === 'policy.change' || entry.action === 'policy.change_refused' ? <PolicyDetails entry={entry} /> : <KeyValues value={entry.details} />}
      </td>
    </tr>
  );
}

/** Nothing to show: a dash in the table, left out when rows stack on a phone. */
const blank = (value: Record<string, unknown> | null) => keyValues(value).length === 0;

/** An email wraps after its @ if it must, never inside its name or domain. */
function Actor({ name }: { name: string }) {
  const at = name.indexOf('@');
  if (at <= 0) return <span>{name}</span>;
  return (
    <span>
      <span className="nowrap">{name.slice(0, at + 1)}</span>
      <wbr />
      <span className="nowrap">{name.slice(at + 1)}</span>
    </span>
  );
}

const record = (value: unknown): Record<string, unknown> | null => (typeof value === 'object' && value !== null && !Array.isArray(value) ? (value as Record<string, unknown>) : null);

/**
 * A policy change reads like a change log: the changed fields first, old and new in the
 * operator's units, with its breaking and acknowledged flags; a refused one says why. The raw
 * details fold away below.
 */
function PolicyDetails({ entry }: { entry: AuditEntry }) {
  const details = entry.details ?? {};
  const refused = entry.action === 'policy.change_refused';
  const proposed = record(details.proposed);
  // A refused change: what it would have changed (against the policy as it stood), else every proposed field.
  const changes = policyChanges(record(details.previous), (refused ? proposed : record(details.current)) ?? {});
  return (
    <div className="policy-details">
      {refused ? <p className="refusal">Refused: {typeof details.refusal === 'string' ? details.refusal : 'no reason recorded'}</p> : null}
      {changes.length > 0 ? (
        <ul className="changes" aria-label={refused ? 'Proposed changes' : 'Changed fields'}>
          {changes.map((change) => (
            <li key={change.field}>
              <strong>{change.label}</strong> <span className="old">{change.from}</span> → <span className="new">{change.to}</span>
            </li>
          ))}
        </ul>
      ) : null}
      {refused && proposed && !details.previous ? (
        <ul className="changes" aria-label="Proposed fields">
          {Object.entries(proposed)
            .filter(([field]) => isPolicyField(field))
            .map(([field, value]) => (
              <li key={field}>
                <strong>{isPolicyField(field) ? policyFieldLabels[field] : field}</strong> {isPolicyField(field) ? policyValueWords(field, value) : String(value)}
              </li>
            ))}
        </ul>
      ) : null}
      <div className="flags">
        {details.breaking === true ? <span className="badge fail">Breaking</span> : null}
        {details.acknowledged === true ? <span className="badge ack">Acknowledged</span> : null}
        {!refused && details.breaking === false ? <span className="muted small">Not breaking</span> : null}
      </div>
      <details className="kv-more">
        <summary className="small">All details</summary>
        <KeyValues value={entry.details} />
      </details>
    </div>
  );
}

/** Pairs shown before the rest fold away, so a policy change stays one short row. */
const SHOWN_PAIRS = 4;

function KeyValues({ value }: { value: Record<string, unknown> | null }) {
  const pairs = keyValues(value);
  if (pairs.length === 0) return <span className="muted">—</span>;
  const list = (items: typeof pairs) => (
    <ul className="kv">
      {items.map((pair) => (
        <li key={pair.key} title={pair.full}>
          <span className="muted">{pair.key}=</span>
          {pair.value}
        </li>
      ))}
    </ul>
  );
  // One more pair takes as much room as the "1 more" it would hide behind.
  if (pairs.length <= SHOWN_PAIRS + 1) return list(pairs);
  return (
    <div>
      {list(pairs.slice(0, SHOWN_PAIRS))}
      <details className="kv-more">
        <summary className="small">{pairs.length - SHOWN_PAIRS} more</summary>
        {list(pairs.slice(SHOWN_PAIRS))}
      </details>
    </div>
  );
}
