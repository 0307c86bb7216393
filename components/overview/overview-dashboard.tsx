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
import type { ComponentProps, ReactNode } from 'react';
import { LocalTime } from '../local-time';
import { formatBytes, formatCount, formatDuration, formatPercent, formatRate, formatSweptRows, timeTick } from './format';
import { compareSettings, overviewApiUrl, overviewHref, rangeSeconds, ranges, refreshSettings, type OverviewSearch } from './search-params';
import { TimeChart, withEarlier, type Series, type TimeAxis } from './time-chart';
import { timeTicks, timeZoneText } from './axis';
import { useHydrated } from '../local-time';
import { PrincipalsTable } from './principals-table';
import { Options } from '../options';
import { LoadProblem, Notice } from '../banners';
import { CheckBanners } from './checks';


const colors = { a: 'var(--c1)', b: 'var(--c2)', c: 'var(--c3)', d: 'var(--c4)' };
const rangeLabels: Record<OverviewSearch['range'], string> = { '1h': 'Last hour', '6h': 'Last 6 hours', '24h': 'Last 24 hours', '7d': 'Last 7 days', '30d': 'Last 30 days' };
const refreshLabels: Record<OverviewSearch['refresh'], string> = { off: 'Off', '10': 'Every 10 s', '30': 'Every 30 s', '60': 'Every minute' };
const compareLabels: Record<NonNullable<OverviewSearch['compare']>, string> = { '1d': 'a day earlier', '7d': 'a week earlier' };

type FlowJson = OverviewJson['flow'][number];
/** A flow point with the point of the compared window at the same place (compare.flow is as long as flow). */
type ComparedPoint = FlowJson & { earlier: FlowJson | null };


export function OverviewDashboard({ search, notices = [] }: { search: OverviewSearch; notices?: string[] }) {
  const router = useRouter();
  // What the server corrected in the URL stays said after the URL itself is corrected.
  const [corrections] = useState(notices);
  const correctedHref = notices.length > 0 ? overviewHref(search) : null;
  useEffect(() => {
    if (correctedHref) router.replace(correctedHref, { scroll: false });
  }, [correctedHref, router]);
  const query = useQuery({
    queryKey: queryKeys.overview(search),
    queryFn: () => adminFetch<OverviewJson>(overviewApiUrl(search)),
    refetchInterval: refreshEvery(search.refresh === 'off' ? false : Number(search.refresh) * 1000),
    refetchIntervalInBackground: false,
    placeholderData: (previous) => previous,
  });
  // Range, service and scope are what was looked at: each change is a history entry, so Back
  // returns to it. The refresh setting is not, and replaces the entry.
  // Choosing a range leaves an absolute window (from/to) for the range ending now.
  const navigate = (change: Partial<OverviewSearch>) => {
    const href = overviewHref({ ...search, ...('range' in change ? { from: undefined, to: undefined } : {}), ...change });
    if (Object.keys(change).every((name) => name === 'refresh')) router.replace(href, { scroll: false });
    else router.push(href, { scroll: false });
  };
  const data = query.data;
  const hydrated = useHydrated();
  // An absolute window is read at the step of the shortest range as long (data.range).
  const shownRange = data?.range ?? search.range;
  const absolute = search.from !== undefined && search.to !== undefined;
  const tick = timeTick(rangeSeconds[shownRange]);
  const latest = data?.store.at(-1);
  // One time axis for every chart: the whole range, round local-clock ticks.
  const from = data ? Date.parse(data.from) : 0;
  const to = data ? Date.parse(data.to) : 0;
  const stepMs = (data?.stepSeconds ?? 60) * 1000;
  const storeAxis: TimeAxis = {
    from,
    to,
    ticks: data && hydrated ? timeTicks(shownRange, from, to) : [],
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
  // The flow charts' points: each with the compared window's point at the same place.
  const flowPoints: ComparedPoint[] = data ? data.flow.map((point, index) => ({ ...point, earlier: data.compare?.flow[index] ?? null })) : [];
  const comparedText = data?.compare ? (data.compare.offsetSeconds === 86_400 ? compareLabels['1d'] : data.compare.offsetSeconds === 604_800 ? compareLabels['7d'] : `${formatDuration(data.compare.offsetSeconds)} earlier`) : null;
  const withEarlierFlow = (series: Series<ComparedPoint>[]) => withEarlier(series, (point) => (point.earlier ? { ...point.earlier, earlier: null } : null), comparedText);
  const events = data?.events ?? [];
  const claimsInRange = data?.flow.reduce((sum, point) => sum + point.claims, 0) ?? 0;
  const noClaims = 'No claims in this range yet. With demo traffic on, they start a few seconds after npm start.';
  const noSamples = 'No store sample in this range yet: one is taken every minute.';
  const windowText = absolute && hydrated ? `${new Date(from).toLocaleString()} to ${new Date(to).toLocaleString()}` : absolute ? 'the chosen window' : rangeLabels[search.range].toLowerCase();
  // Drag across a chart: that stretch becomes the address's window (a history entry).
  const zoom = (start: number, end: number) => navigate({ from: new Date(start).toISOString(), to: new Date(end).toISOString() });

  return (
    <div className="overview">
      <div className="toolbar" role="group" aria-label="Overview settings">
        <label>
          Time range
          <select value={absolute ? 'window' : search.range} onChange={(event) => navigate({ range: event.target.value as OverviewSearch['range'] })}>
            {absolute ? (
              <option value="window" disabled>
                Chosen window
              </option>
            ) : null}
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
          Compare with
          <select value={search.compare ?? ''} onChange={(event) => navigate({ compare: event.target.value === '' ? undefined : (event.target.value as OverviewSearch['compare']) })}>
            <option value="">nothing</option>
            <Options values={compareSettings} label={(setting) => compareLabels[setting]} />
          </select>
        </label>
        <label>
          Auto-refresh
          <select value={search.refresh} onChange={(event) => navigate({ refresh: event.target.value as OverviewSearch['refresh'] })}>
            <Options values={refreshSettings} label={(setting) => refreshLabels[setting]} />
          </select>
        </label>
        <RefreshControl isFetching={query.isFetching} updatedAt={query.dataUpdatedAt} onRefresh={() => void query.refetch()} />
        <CopyLink search={search} window={data ? { from: data.from, to: data.to } : null} />
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

          {data.storeElsewhere ? <StoreElsewhereStats store={data.storeElsewhere} /> : null}

          <h2 id="store" className="section-title">
            Store now <span className="muted small">(store-wide)</span>
          </h2>
          <section aria-labelledby="store" className="stats">
            <Stat label="Rows (estimate)" value={latest ? formatCount(latest.rows) : '—'} detail={latest ? `baseline ${formatCount(latest.baseline)}${latest.ratio === null ? '' : `, ${latest.ratio.toFixed(2)}x`}` : 'no sample yet'} />
            <Stat label="Store size" value={latest ? formatBytes(latest.tableBytes + latest.indexBytes + latest.toastBytes) : '—'} detail={latest ? `table ${formatBytes(latest.tableBytes)}, indexes ${formatBytes(latest.indexBytes)}, TOAST ${formatBytes(latest.toastBytes)}` : ''} />
            <Stat
              label="Oldest row"
              value={latest ? formatDuration(latest.oldestRowAgeSeconds) : '—'}
              detail={data.capacity.layout === 'partitioned' ? 'age of the row that expires first (a key promised a day or more stays until its partition ends)' : 'age of the row that expires first'}
            />
            <Stat
              label="Cleanup lag"
              value={latest ? formatDuration(latest.cleanupLagSeconds) : '—'}
              detail={
                data.capacity.layout === 'partitioned'
                  ? `time since the oldest partition ended (a key promised ${formatDuration(data.capacity.keptPastExpirySeconds)} or more leaves with its partition, up to ${formatDuration(data.capacity.keptPastExpirySeconds)} past expiry), or since the sweeper's walk of shorter promises fell behind`
                  : 'how far past expiry the oldest row is'
              }
            />
            <Stat
              label={search.scope || search.service ? `Stale claims in ${[search.scope, search.service].filter(Boolean).join(' of ')}` : 'Stale claims'}
              value={data.storeElsewhere && data.storeElsewhere.staleClaims === null ? '—' : `${data.staleClaims.count}${data.storeElsewhere?.staleClaims?.atLeast ? '+' : ''}`}
              detail={
                data.storeElsewhere && data.storeElsewhere.staleClaims === null
                  ? `${data.storeElsewhere.backend === 'redis' ? 'Redis' : 'MySQL'} did not answer`
                  : data.staleClaims.oldestPastLeaseSeconds === null
                    ? 'in progress past their lease: none'
                    : `oldest ${formatDuration(data.staleClaims.oldestPastLeaseSeconds)} past its lease`
              }
            />
            <Stat
              label="Last sweep"
              value={data.lastSweep ? data.lastSweep.status : 'none yet'}
              detail={
                data.lastSweep ? (
                  <>
                    <LocalTime iso={data.lastSweep.finishedAt} />, {formatSweptRows(data.lastSweep.rowsDeleted, data.capacity.layout)}, {data.lastSweep.staleReleased} stale released
                  </>
                ) : (
                  ''
                )
              }
            />
            {data.replica ? <ReplicaStat replica={data.replica} /> : null}
            <CapacityStats capacity={data.capacity} service={search.service ?? null} />
          </section>

          <PrincipalsTable data={data.principals} service={search.service ?? null} scope={search.scope ?? null} />

          <p className="muted small chart-caption">
            Charts share one time axis ({windowText}, one point per {formatDuration(data.stepSeconds)}); times in {hydrated ? timeZoneText() : 'your time zone'}. A dotted end is the current step, still running. Drag across a chart to zoom in.
            {events.length > 0 ? ' Marks on the time axis: P a policy change, ! an alert starting, ✓ an alert ending, S a failed sweep, R a server (re)start with its package version (point at one for what happened).' : ''}
            {comparedText ? ` Dashed, fainter lines on the claim charts: the same window ${comparedText}.` : ''}
          </p>
          <div className="charts">
            <TimeChart
              title="Store rows against the baseline (store-wide)"
              description={
                data.capacity.layout === 'partitioned'
                  ? 'Estimated rows and what a store whose partition drops keep up holds: the keys claimed since the current partition began, less the retention (claim rate x retention, plus the part of the partition passed). A rising ratio means expiry is not keeping up.'
                  : 'Estimated rows and the expected steady state (claim rate x retention). A rising ratio means expiry is not keeping up.'
              }
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
              onZoom={zoom}
              events={events}
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
              onZoom={zoom}
              events={events}
              emptyMessage={noSamples}
            />
            {data.storeElsewhere && data.storeElsewhereSeries ? <StoreElsewhereCharts store={data.storeElsewhere} points={data.storeElsewhereSeries} axis={storeAxis} onZoom={zoom} events={events} /> : null}
            <TimeChart
              title="Claim latency"
              description="The claim statement's p50, p95 and p99, from histograms merged across instances."
              points={flowPoints}
              series={withEarlierFlow([
                { key: 'p50', label: 'p50', color: colors.a, value: (point) => point.p50Ms },
                { key: 'p95', label: 'p95', color: colors.b, value: (point) => point.p95Ms },
                { key: 'p99', label: 'p99', color: colors.c, value: (point) => point.p99Ms },
              ])}
              format={(value) => `${value < 10 ? value.toFixed(1) : Math.round(value)} ms`}
              
              kind="number"
              axis={flowAxis}
              onZoom={zoom}
              events={events}
              thresholds={[{ value: data.objectives.claimP99Ms, label: `p99 objective ${data.objectives.claimP99Ms} ms` }]}
              emptyMessage={noClaims}
            />
            <TimeChart
              title="Replays, conflicts and mismatches per second"
              description="Replays are retries answered from the store; conflicts hit a key still running; mismatches reuse a key for another request."
              points={flowPoints}
              series={withEarlierFlow([
                { key: 'replay', label: 'Replays', color: colors.a, value: (point) => point.perSecond.replay },
                { key: 'conflict', label: 'Conflicts', color: colors.b, value: (point) => point.perSecond.conflict },
                { key: 'mismatch', label: 'Mismatches', color: colors.c, value: (point) => point.perSecond.mismatch },
                { key: 'new', label: 'New keys', color: colors.d, value: (point) => point.perSecond.new, dashed: true },
              ])}
              format={formatRate}
              kind="number"
              axis={flowAxis}
              onZoom={zoom}
              events={events}
              emptyMessage={noClaims}
            />
            <TimeChart
              title="Share of claims"
              description="Each outcome as a share of all claims in the step."
              points={flowPoints}
              series={withEarlierFlow([
                { key: 'replay', label: 'Replays', color: colors.a, value: (point) => (point.claims > 0 ? point.share.replay : null) },
                { key: 'conflict', label: 'Conflicts', color: colors.b, value: (point) => (point.claims > 0 ? point.share.conflict : null) },
                { key: 'mismatch', label: 'Mismatches', color: colors.c, value: (point) => (point.claims > 0 ? point.share.mismatch : null) },
              ])}
              format={formatPercent}
              
              kind="share"
              axis={flowAxis}
              onZoom={zoom}
              events={events}
              thresholds={[
                { value: data.objectives.conflictShare, label: `conflict alert ${formatPercent(data.objectives.conflictShare)}` },
                { value: data.objectives.mismatchShare, label: `mismatch alert ${formatPercent(data.objectives.mismatchShare)}` },
              ]}
              emptyMessage={noClaims}
            />
            <TimeChart
              title="Cleanup health (store-wide)"
              description={
                data.capacity.layout === 'partitioned'
                  ? 'Age of the oldest row and the cleanup lag (the time since the oldest partition still attached ended), with stale claims on the right.'
                  : 'Age of the oldest row and how far past its expiry it is (cleanup lag), with stale claims on the right.'
              }
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
              onZoom={zoom}
              events={events}
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
            {formatCount(claimsInRange)} claims in {windowText}
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

/**
 * "Copy link": this view as an absolute link (the relative range resolved to the window the
 * server read), so whoever opens it later sees the same stretch of time.
 */
function CopyLink({ search, window: shown }: { search: OverviewSearch; window: { from: string; to: string } | null }) {
  const [status, setStatus] = useState<string | null>(null);
  const copy = async () => {
    const from = search.from ?? shown?.from;
    const to = search.to ?? shown?.to;
    const link = `${location.origin}${overviewHref({ ...search, from, to })}`;
    try {
      await navigator.clipboard.writeText(link);
      setStatus('Link copied');
    } catch {
      setStatus(`Copy this link: ${link}`);
    }
  };
  return (
    <span className="copy-link">
      <button type="button" onClick={() => void copy()} disabled={shown === null && search.from === undefined}>
        Copy link
      </button>{' '}
      <span role="status" className="muted small">
        {status}
      </span>
    </span>
  );
}

/** The standby the dashboard reads (DASHBOARD_READ_URL): how far behind the primary its figures are. */
/**
 * The chosen service's keys kept in Redis or MySQL (server/metrics/store-elsewhere.ts): that
 * backend's keys or rows and its memory or table size now, against the service's baseline.
 */
/**
 * A Redis Cluster's master closest to its maxmemory: it refuses (or evicts) the writes of its slots
 * however empty the others are, so its own share is said beside the sums.
 */
function tightestMasterText(figures: { tightestMaster?: { node: string; usedMemoryBytes: number; maxmemoryBytes: number } | undefined; masters?: unknown[] | undefined }): string {
  const master = figures.tightestMaster;
  if (!master) return '';
  const share = master.maxmemoryBytes > 0 ? `${formatPercent(master.usedMemoryBytes / master.maxmemoryBytes)} of its maxmemory` : `${formatBytes(master.usedMemoryBytes)}, no maxmemory`;
  return `; ${figures.masters?.length ?? 0} masters, the fullest ${master.node}: ${share}`;
}

function StoreElsewhereStats({ store }: { store: NonNullable<OverviewJson['storeElsewhere']> }) {
  const where = store.backend === 'redis' ? 'Redis' : 'MySQL';
  const shared = store.services.length > 1 ? ` (shared by ${store.services.join(', ')}: the figures count them all)` : '';
  const ratio = store.ratio === null ? '' : `, ${store.ratio.toFixed(2)}x`;
  const figures = store.figures;
  return (
    <>
      <h2 id="store-elsewhere" className="section-title">
        {`Keys in ${where}`} <span className="muted small">({store.service}, now{shared})</span>
      </h2>
      <section aria-labelledby="store-elsewhere" className="stats">
        {figures === null ? (
          <Stat label={`${where} keys`} value="—" detail={`${where} did not answer; baseline ${formatCount(store.baselineRecords)} records`} />
        ) : figures.backend === 'redis' ? (
          <>
            <Stat
              label="Redis keys"
              value={formatCount(figures.keys)}
              detail={`baseline ${formatCount(store.baselineRecords)} records${ratio} (${
                figures.masters ? `a Redis Cluster of ${figures.masters.length} masters: a record each, plus an index per principal` : 'a record and its correlation id each: about 2x, plus an index per principal'
              })`}
            />
            <Stat
              label="Redis memory"
              value={figures.maxmemoryBytes > 0 ? `${formatBytes(figures.usedMemoryBytes)} of ${formatBytes(figures.maxmemoryBytes)}` : formatBytes(figures.usedMemoryBytes)}
              detail={`${figures.maxmemoryBytes > 0 ? `${formatPercent(figures.usedMemoryBytes / figures.maxmemoryBytes)}, ` : 'no maxmemory, '}${figures.policy}${
                store.bytesPerRecord === null ? '' : `, ${formatBytes(store.bytesPerRecord)} a baseline record`
              }${tightestMasterText(figures)}`}
            />
            <Stat label="Evicted keys" value={formatCount(figures.evictedKeys)} detail="since the Redis started: any is a record lost before its retention" />
          </>
        ) : (
          <>
            <Stat label="MySQL rows (estimate)" value={formatCount(figures.estimatedRows)} detail={`baseline ${formatCount(store.baselineRecords)}${ratio}`} />
            <Stat label="MySQL table size" value={formatBytes(figures.dataBytes + figures.indexBytes)} detail={`data ${formatBytes(figures.dataBytes)}, indexes ${formatBytes(figures.indexBytes)}`} />
            <Stat label="Oldest row" value={formatDuration(figures.oldestRowAgeSeconds)} detail={`age of the row that expires first; cleanup lag ${formatDuration(figures.cleanupLagSeconds)}`} />
          </>
        )}
      </section>
    </>
  );
}

/**
 * The chosen kept-elsewhere service's backend over the range (the sampler's minute samples,
 * server/metrics/kept-elsewhere-samples.ts): keys or rows with its stale claims, and memory or
 * table bytes. A step whose backend did not answer is a gap, never 0.
 */
function StoreElsewhereCharts({
  store,
  points,
  axis,
  onZoom,
  events,
}: {
  store: NonNullable<OverviewJson['storeElsewhere']>;
  points: NonNullable<OverviewJson['storeElsewhereSeries']>;
  axis: TimeAxis;
  onZoom: (from: number, to: number) => void;
  events: ComponentProps<typeof TimeChart>['events'];
}) {
  const redis = store.backend === 'redis';
  const where = redis ? 'Redis' : 'MySQL';
  const empty = `No sample of ${store.service}'s ${where} in this range yet: the server takes one every minute.`;
  return (
    <>
      <TimeChart
        title={`Keys in ${where} (${store.service})`}
        description={`${redis ? "The Redis server's keys (every key, INFO keyspace)" : "The key table's estimated rows (InnoDB statistics)"}, and the service's claims past their lease (right). Gaps: ${where} did not answer.`}
        points={points}
        series={[
          { key: 'keys', label: redis ? 'Redis keys' : 'Rows (estimate)', color: colors.a, value: (point) => point.keys },
          { key: 'stale', label: 'Stale claims (right)', color: colors.c, value: (point) => point.staleClaims, right: true },
        ]}
        format={formatCount}
        rightFormat={formatCount}
        kind="number"
        rightKind="number"
        axis={axis}
        onZoom={onZoom}
        events={events}
        emptyMessage={empty}
      />
      <TimeChart
        title={`${redis ? 'Redis memory' : 'MySQL table size'} (${store.service})`}
        description={redis ? "The Redis server's used memory." : "The key table's data and index bytes (InnoDB statistics)."}
        points={points}
        series={[{ key: 'bytes', label: redis ? 'Used memory' : 'Data and indexes', color: colors.a, value: (point) => point.bytes }]}
        format={formatBytes}
        kind="bytes"
        axis={axis}
        onZoom={onZoom}
        events={events}
        emptyMessage={empty}
      />
    </>
  );
}

function ReplicaStat({ replica }: { replica: NonNullable<OverviewJson['replica']> }) {
  const paused = replica.replayPaused ? ', replay paused' : '';
  const value = !replica.inRecovery ? 'not a standby' : replica.bytes === 0 ? 'caught up' : replica.seconds === null ? 'behind' : formatDuration(replica.seconds);
  const detail = !replica.inRecovery
    ? 'no longer in recovery: its reads do not follow the primary'
    : `${replica.bytes === 0 ? 'nothing' : formatBytes(replica.bytes ?? 0)} of WAL to replay${paused}; alert over ${formatDuration(replica.thresholdSeconds)}`;
  return <Stat label="Dashboard standby lag" value={value} detail={detail} />;
}

/**
 * Capacity (server/metrics/capacity.ts): the unique index against the database's memory (the
 * figure claim p99 bends on once it no longer fits), and the steady state the current new-key
 * rate and the policies' retention lead to. The Retention page shows the same figures.
 */
export function CapacityStats({ capacity, service }: { capacity: OverviewJson['capacity']; service: string | null }) {
  const share = capacity.indexShareOfMemory;
  const memory = capacity.memorySource === 'DATABASE_MEMORY_BYTES' ? 'DATABASE_MEMORY_BYTES' : 'shared_buffers only';
  return (
    <>
      <Stat
        label="Unique index against memory"
        value={`${formatBytes(capacity.indexBytes)} of ${formatBytes(capacity.memoryBytes)}`}
        detail={`${share === null ? '—' : formatPercent(share)} (${memory}; the check fires over ${formatPercent(capacity.thresholdShare)}); the table's heap ${formatBytes(capacity.heapBytes)}${
          capacity.bytesPerKey === null ? '' : `, ${formatBytes(capacity.bytesPerKey)} a key with its heap row`
        }`}
      />
      <Stat
        label={service ? `Steady state of ${service}` : 'Steady state'}
        value={`${formatCount(capacity.steadyStateRows)} rows`}
        detail={
          <>
            {capacity.steadyStateIndexBytes === null ? 'no bytes per key measured yet' : `unique index ${formatBytes(capacity.steadyStateIndexBytes)}`} at {formatRate(capacity.newKeysPerSecond)} new keys and each policy&apos;s retention
            {capacity.layout === 'partitioned' ? ` plus ${formatDuration(capacity.keptPastExpirySeconds)} where it is that long or longer (such a row stays until its partition ends: the peak)` : ''};{' '}
            {capacity.outgrowsMemoryAt ? (
              <>
                outgrows memory <LocalTime iso={capacity.outgrowsMemoryAt} /> at the last day&apos;s trend
              </>
            ) : capacity.steadyStateIndexBytes !== null && capacity.steadyStateIndexBytes > capacity.memoryBytes ? (
              'over memory at the steady state'
            ) : (
              'fits in memory at this rate'
            )}
          </>
        }
      />
    </>
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
