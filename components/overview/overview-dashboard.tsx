'use client';
// The overview: is idempotency working right now, and if not, where. Alerts with what to do
// first, then the store against its baseline, cleanup health, latency and client behaviour.
// Range, scope and refresh live in the URL; refresh pauses in hidden tabs and never overlaps.
import { useQuery } from '@tanstack/react-query';
import { useRouter } from 'next/navigation';
import { useEffect, useState } from 'react';
import type { OverviewJson } from '@/server/metrics/overview';
import { adminFetch, refreshEvery } from '../admin-fetch';
import { queryKeys } from '../query-keys';
import { RefreshControl } from '../refresh-control';
import type { ReactNode } from 'react';
import { LocalTime } from '../local-time';
import { formatBytes, formatCount, formatDuration, formatPercent, formatRate, timeTick } from './format';
import { overviewApiUrl, overviewHref, rangeSeconds, ranges, refreshSettings, type OverviewSearch } from './search-params';
import { TimeChart, type TimeAxis } from './time-chart';
import { timeTicks, timeZoneText } from './axis';
import { useHydrated } from '../local-time';
import { PrincipalsTable } from './principals-table';
import { Options } from '../options';
import { LoadProblem, Notice } from '../banners';
import { CheckBanners } from './checks';


const colors = { a: 'var(--c1)', b: 'var(--c2)', c: 'var(--c3)', d: 'var(--c4)' };
const rangeLabels: Record<OverviewSearch['range'], string> = { '1h': 'Last hour', '6h': 'Last 6 hours', '24h': 'Last 24 hours', '7d': 'Last 7 days', '30d': 'Last 30 days' };
const refreshLabels: Record<OverviewSearch['refresh'], string> = { off: 'Off', '10': 'Every 10 s', '30': 'Every 30 s', '60': 'Every minute' };


export function OverviewDashboard({ search, notices = [] }: { search: OverviewSearch; notices?: string[] }) {
  const router = useRouter();
  // What the server corrected in the URL stays said after the URL itself is corrected.
  const [corrections] = useState(notices);
  const correctedHref = notices.length > 0 ? overviewHref(search) : null;
  useEffect(() => {
    if (correctedHref) router.replace(correctedHref, { scroll: false });
  }, [correctedHref, router]);
  const query = useQuery({
    queryKey: queryKeys.overview(search.range, search.service ?? null, search.scope ?? null),
    queryFn: () => adminFetch<OverviewJson>(overviewApiUrl(search)),
    refetchInterval: refreshEvery(search.refresh === 'off' ? false : Number(search.refresh) * 1000),
    refetchIntervalInBackground: false,
    placeholderData: (previous) => previous,
  });
  // Range, service and scope are what was looked at: each change is a history entry, so Back
  // returns to it. The refresh setting is not, and replaces the entry.
  const navigate = (change: Partial<OverviewSearch>) => {
    const href = overviewHref({ ...search, ...change });
    if (Object.keys(change).every((name) => name === 'refresh')) router.replace(href, { scroll: false });
    else router.push(href, { scroll: false });
  };
  const data = query.data;
  const hydrated = useHydrated();
  const tick = timeTick(rangeSeconds[search.range]);
  const latest = data?.store.at(-1);
  // One time axis for every chart: the whole range, round local-clock ticks.
  const from = data ? Date.parse(data.from) : 0;
  const to = data ? Date.parse(data.to) : 0;
  const stepMs = (data?.stepSeconds ?? 60) * 1000;
  const storeAxis: TimeAxis = {
    from,
    to,
    ticks: data && hydrated ? timeTicks(search.range, from, to) : [],
    format: (ms) => tick(new Date(ms).toISOString()),
    partialFrom: null,
    dataFrom: null,
  };
  const lastStep = data?.flow.at(-1);
  const flowAxis: TimeAxis = {
    ...storeAxis,
    partialFrom: lastStep && lastStep.seconds < (data?.stepSeconds ?? 0) ? Date.parse(lastStep.t) : null,
    // A step that ended before the first recorded bucket is a gap, not zero traffic.
    dataFrom: data?.dataSince ? Date.parse(data.dataSince) - stepMs + 1 : to,
  };
  const claimsInRange = data?.flow.reduce((sum, point) => sum + point.claims, 0) ?? 0;
  const noClaims = 'No claims in this range yet. With demo traffic on, they start a few seconds after npm start.';
  const noSamples = 'No store sample in this range yet: one is taken every minute.';

  return (
    <div className="overview">
      <div className="toolbar" role="group" aria-label="Overview settings">
        <label>
          Time range
          <select value={search.range} onChange={(event) => navigate({ range: event.target.value as OverviewSearch['range'] })}>
            <Options values={ranges} label={(range) => rangeLabels[range]} />
          </select>
        </label>
        <label>
          Service
          <select value={search.service ?? ''} onChange={(event) => navigate({ service: event.target.value === '' ? undefined : event.target.value, scope: undefined })}>
            <option value="">All services</option>
            <Options values={[...new Set([...(data?.services ?? []), ...(search.service ? [search.service] : [])])]} />
          </select>
        </label>
        <label>
          Scope
          <select value={search.scope ?? ''} onChange={(event) => navigate({ scope: event.target.value === '' ? undefined : event.target.value })}>
            <option value="">All scopes</option>
            <Options values={[...new Set([...(data?.scopes ?? []), ...(search.scope ? [search.scope] : [])])]} />
          </select>
        </label>
        <label>
          Auto-refresh
          <select value={search.refresh} onChange={(event) => navigate({ refresh: event.target.value as OverviewSearch['refresh'] })}>
            <Options values={refreshSettings} label={(setting) => refreshLabels[setting]} />
          </select>
        </label>
        <RefreshControl isFetching={query.isFetching} updatedAt={query.dataUpdatedAt} onRefresh={() => void query.refetch()} />
      </div>

      {corrections.length > 0 ? (
        <Notice>
          {corrections.join(' ')} The address has been corrected.
        </Notice>
      ) : null}
      {query.error ? (
        <LoadProblem error={query.error} what="the overview" stale={data !== undefined} />
      ) : null}

      {data ? (
        <>
          <CheckBanners checks={data.checks} search={search} />

          <h2 id="store" className="section-title">
            Store now <span className="muted small">(store-wide)</span>
          </h2>
          <section aria-labelledby="store" className="stats">
            <Stat label="Rows (estimate)" value={latest ? formatCount(latest.rows) : '—'} detail={latest ? `baseline ${formatCount(latest.baseline)}${latest.ratio === null ? '' : `, ${latest.ratio.toFixed(2)}x`}` : 'no sample yet'} />
            <Stat label="Store size" value={latest ? formatBytes(latest.tableBytes + latest.indexBytes + latest.toastBytes) : '—'} detail={latest ? `table ${formatBytes(latest.tableBytes)}, indexes ${formatBytes(latest.indexBytes)}, TOAST ${formatBytes(latest.toastBytes)}` : ''} />
            <Stat label="Oldest row" value={latest ? formatDuration(latest.oldestRowAgeSeconds) : '—'} detail="age of the row that expires first" />
            <Stat label="Cleanup lag" value={latest ? formatDuration(latest.cleanupLagSeconds) : '—'} detail="how far past expiry the oldest row is" />
            <Stat
              label={search.scope || search.service ? `Stale claims in ${[search.scope, search.service].filter(Boolean).join(' of ')}` : 'Stale claims'}
              value={String(data.staleClaims.count)}
              detail={data.staleClaims.oldestPastLeaseSeconds === null ? 'in progress past their lease: none' : `oldest ${formatDuration(data.staleClaims.oldestPastLeaseSeconds)} past its lease`}
            />
            <Stat
              label="Last sweep"
              value={data.lastSweep ? data.lastSweep.status : 'none yet'}
              detail={
                data.lastSweep ? (
                  <>
                    <LocalTime iso={data.lastSweep.finishedAt} />, {formatCount(data.lastSweep.rowsDeleted)} rows deleted, {data.lastSweep.staleReleased} stale released
                  </>
                ) : (
                  ''
                )
              }
            />
          </section>

          <PrincipalsTable data={data.principals} service={search.service ?? null} scope={search.scope ?? null} />

          <p className="muted small chart-caption">
            Charts share one time axis ({rangeLabels[search.range].toLowerCase()}, one point per {formatDuration(data.stepSeconds)}); times in {hydrated ? timeZoneText() : 'your time zone'}. A dotted end is the current step, still running.
          </p>
          <div className="charts">
            <TimeChart
              title="Store rows against the baseline (store-wide)"
              description="Estimated rows and the expected steady state (claim rate x retention). A rising ratio means expiry is not keeping up."
              points={data.store}
              series={[
                { key: 'rows', label: 'Rows', color: colors.a, value: (point) => point.rows },
                { key: 'baseline', label: 'Baseline', color: colors.b, value: (point) => point.baseline, dashed: true },
                { key: 'ratio', label: 'Ratio (right)', color: colors.c, value: (point) => point.ratio, right: true },
              ]}
              format={formatCount}
              rightFormat={(value) => `${value.toFixed(2)}x`}
              
              kind="number"
              rightKind="number"
              axis={storeAxis}
              thresholds={[{ value: data.objectives.rowsOverBaselineRatio, label: `alert over ${data.objectives.rowsOverBaselineRatio}x baseline`, right: true }]}
              emptyMessage={noSamples}
            />
            <TimeChart
              title="Store size (store-wide)"
              description="Bytes of the key table, its indexes and its TOAST data."
              points={data.store}
              series={[
                { key: 'table', label: 'Table', color: colors.a, value: (point) => point.tableBytes },
                { key: 'indexes', label: 'Indexes', color: colors.b, value: (point) => point.indexBytes },
                { key: 'toast', label: 'TOAST', color: colors.c, value: (point) => point.toastBytes },
              ]}
              format={formatBytes}
              
              kind="bytes"
              axis={storeAxis}
              emptyMessage={noSamples}
            />
            <TimeChart
              title="Claim latency"
              description="The claim statement's p50, p95 and p99, from histograms merged across instances."
              points={data.flow}
              series={[
                { key: 'p50', label: 'p50', color: colors.a, value: (point) => point.p50Ms },
                { key: 'p95', label: 'p95', color: colors.b, value: (point) => point.p95Ms },
                { key: 'p99', label: 'p99', color: colors.c, value: (point) => point.p99Ms },
              ]}
              format={(value) => `${value < 10 ? value.toFixed(1) : Math.round(value)} ms`}
              
              kind="number"
              axis={flowAxis}
              thresholds={[{ value: data.objectives.claimP99Ms, label: `p99 objective ${data.objectives.claimP99Ms} ms` }]}
              emptyMessage={noClaims}
            />
            <TimeChart
              title="Replays, conflicts and mismatches per second"
              description="Replays are retries answered from the store; conflicts hit a key still running; mismatches reuse a key for another request."
              points={data.flow}
              series={[
                { key: 'replay', label: 'Replays', color: colors.a, value: (point) => point.perSecond.replay },
                { key: 'conflict', label: 'Conflicts', color: colors.b, value: (point) => point.perSecond.conflict },
                { key: 'mismatch', label: 'Mismatches', color: colors.c, value: (point) => point.perSecond.mismatch },
                { key: 'new', label: 'New keys', color: colors.d, value: (point) => point.perSecond.new, dashed: true },
              ]}
              format={formatRate}
              
              kind="number"
              axis={flowAxis}
              emptyMessage={noClaims}
            />
            <TimeChart
              title="Share of claims"
              description="Each outcome as a share of all claims in the step."
              points={data.flow}
              series={[
                { key: 'replay', label: 'Replays', color: colors.a, value: (point) => (point.claims > 0 ? point.share.replay : null) },
                { key: 'conflict', label: 'Conflicts', color: colors.b, value: (point) => (point.claims > 0 ? point.share.conflict : null) },
                { key: 'mismatch', label: 'Mismatches', color: colors.c, value: (point) => (point.claims > 0 ? point.share.mismatch : null) },
              ]}
              format={formatPercent}
              
              kind="share"
              axis={flowAxis}
              thresholds={[
                { value: data.objectives.conflictShare, label: `conflict alert ${formatPercent(data.objectives.conflictShare)}` },
                { value: data.objectives.mismatchShare, label: `mismatch alert ${formatPercent(data.objectives.mismatchShare)}` },
              ]}
              emptyMessage={noClaims}
            />
            <TimeChart
              title="Cleanup health (store-wide)"
              description="Age of the oldest row and how far past its expiry it is (cleanup lag), with stale claims on the right."
              points={data.store}
              series={[
                { key: 'oldest', label: 'Oldest row age', color: colors.a, value: (point) => point.oldestRowAgeSeconds },
                { key: 'lag', label: 'Cleanup lag', color: colors.b, value: (point) => point.cleanupLagSeconds },
                { key: 'stale', label: 'Stale claims (right)', color: colors.c, value: (point) => point.staleClaims, right: true },
              ]}
              format={formatDuration}
              rightFormat={(value) => String(value)}
              
              kind="seconds"
              rightKind="count"
              axis={storeAxis}
              emptyMessage={noSamples}
            />
          </div>

          <section className="card" aria-labelledby="scopes-heading">
            <h3 id="scopes-heading">Stored responses per scope</h3>
            {data.storeByScope && data.storeByScope.scopes.length > 0 ? (
              <>
                <div className="table-scroll">
                <table className="stack">
                  <caption className="visually-hidden">Stored responses per scope</caption>
                  <thead>
                    <tr>
                      <th scope="col">Service</th>
                      <th scope="col">Scope</th>
                      <th scope="col" className="num">
                        Rows (estimate)
                      </th>
                      <th scope="col" className="num">
                        Response bytes
                      </th>
                    </tr>
                  </thead>
                  <tbody>
                    {data.storeByScope.scopes.map((scope) => (
                      <tr key={`${scope.service} ${scope.scope}`}>
                        <td data-label="Service">{scope.service}</td>
                        <td data-label="Scope">{scope.scope}</td>
                        <td className="num" data-label="Rows">
                          {formatCount(scope.estimatedRows)}
                        </td>
                        <td className="num" data-label="Bytes">
                          {formatBytes(scope.responseBytes)}
                        </td>
                      </tr>
                    ))}
                  </tbody>
                </table>
                </div>
                <p className="muted small">
                  Estimated from a page sample taken <LocalTime iso={data.storeByScope.sampledAt} />.
                </p>
              </>
            ) : (
              <p className="empty">{noSamples}</p>
            )}
          </section>
          <p className="muted small">
            {formatCount(claimsInRange)} claims in {rangeLabels[search.range].toLowerCase()}
            {search.service ? ` of ${search.service}` : ''}
            {search.scope ? ` on ${search.scope}` : ''}, in steps of {formatDuration(data.stepSeconds)}.
          </p>
        </>
      ) : query.isPending ? (
        <p className="empty">Loading the overview…</p>
      ) : null}
    </div>
  );
}

function Stat({ label, value, detail }: { label: string; value: string; detail: ReactNode }) {
  return (
    <div className="stat card">
      <div className="muted small">{label}</div>
      <div className="stat-value">{value}</div>
      <div className="muted small">{detail}</div>
    </div>
  );
}
