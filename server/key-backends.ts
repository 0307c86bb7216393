// Key records of services that keep them outside Postgres: DASHBOARD_KEYS_REDIS and
// DASHBOARD_KEYS_MYSQL map each such service to where the dashboard reads its keys (a Redis URL,
// or a Redis Cluster's nodes as redis+cluster://; a MySQL URL of a read-only user whose column
// grants exclude response_body). The dashboard's
// KeyRecordReads routes each read by service: a named service to its backend, an unnamed one to
// every backend, merged in the seam's order. Policies, metrics, the trace of attempts and the
// audit log stay in Postgres, so a lookup is audited there exactly as for a Postgres service.
import {
  isDatabaseUnavailable,
  KeyReadUnsupportedError,
  type CorrelationRecord,
  type KeyCursor,
  type KeyListQuery,
  type KeyPage,
  type KeyRecord,
  type KeyRecordReads,
  type KeySummary,
  type Queryable,
  type StaleClaim,
} from '@retrysafe/store';
import { createMysqlPool, MysqlKeyReads, mysqlMissingDashboardIndexes, mysqlReaderAccess } from '@retrysafe/store/mysql';
import { connectRedis, connectRedisCluster, RedisKeyReads, type RedisCommands, type RedisConnection } from '@retrysafe/store/redis';
import { parseRedisTarget, type RedisTarget } from './key-backend-settings';
import { ConfigurationError } from './config';
import type { StoreFiguresSource } from './metrics/store-elsewhere';
import { staleElsewhereReader, type StaleElsewhereReader } from './metrics/stale-elsewhere';
import { markNotKept, markUnanswered } from './unanswered-services';

/** A connection to a Redis or a Redis Cluster, as the dashboard opens it. */
function connectTarget(target: RedisTarget): Promise<RedisConnection> {
  return target.kind === 'cluster' ? connectRedisCluster(target.nodes.map((url) => ({ url }))) : connectRedis(target.url);
}

/**
 * A Redis (or Redis Cluster) connection opened on first use (the dashboard starts without waiting
 * on it), again after a failed attempt. A cluster's has eachMaster, which RedisKeyReads reads as "a cluster".
 */
class LazyRedis implements RedisCommands {
  private connection: Promise<RedisConnection> | null = null;
  readonly eachMaster?: RedisCommands['eachMaster'];

  constructor(private readonly target: RedisTarget) {
    if (target.kind === 'cluster') {
      this.eachMaster = async () => {
        const { commands } = await this.connect();
        if (!commands.eachMaster) throw new Error('a Redis Cluster connection without eachMaster');
        return commands.eachMaster();
      };
    }
  }

  private connect(): Promise<RedisConnection> {
    this.connection ??= connectTarget(this.target).catch((error: unknown) => {
      this.connection = null;
      throw error;
    });
    return this.connection;
  }

  async sendCommand(args: ReadonlyArray<string | Buffer>): Promise<unknown> {
    return (await this.connect()).commands.sendCommand(args);
  }

  async close(): Promise<void> {
    const connection = await this.connection?.catch(() => null);
    this.connection = null;
    await connection?.close();
  }
}

/** The services whose keys are elsewhere, each with its reads and its backend's store figures, and how to close their connections. */
export interface KeyBackends {
  byService: Map<string, KeyRecordReads>;
  /** For the overview's store panels: each service's backend figures, shared by the services of one URL. */
  storeFigures: Map<string, StoreFiguresSource>;
  /** Every such service's stale claims, for the Stale claims check, its alert and /api/metrics; undefined when there is none. */
  staleElsewhere: StaleElsewhereReader | undefined;
  end(): Promise<void>;
}

/**
 * Opens (lazily) the backends of `settings`; `policies`: the Postgres where the policies are (the
 * scopes a key may be under). One connection (pool) per distinct URL, shared by its services.
 */
export function openKeyBackends(settings: { redis?: Map<string, string> | undefined; mysql?: Map<string, string> | undefined }, policies: Queryable): KeyBackends {
  const byService = new Map<string, KeyRecordReads>();
  const storeFigures = new Map<string, StoreFiguresSource>();
  const closers: (() => Promise<void>)[] = [];
  const servicesOf = (map: Map<string, string> | undefined, url: string) => [...(map ?? [])].filter(([, other]) => other === url).map(([service]) => service);
  const redisByUrl = new Map<string, { reads: RedisKeyReads; figures: StoreFiguresSource }>();
  for (const [service, url] of settings.redis ?? []) {
    let opened = redisByUrl.get(url);
    if (!opened) {
      const target = parseRedisTarget(url);
      // (server/key-backend-settings.ts validated it.)
      if (!target) throw new ConfigurationError(`DASHBOARD_KEYS_REDIS (${service}): not a Redis URL or redis+cluster:// nodes`);
      const redis = new LazyRedis(target);
      closers.push(() => redis.close());
      const reads = new RedisKeyReads(redis, policies);
      opened = { reads, figures: { backend: 'redis', services: servicesOf(settings.redis, url), reads, read: async () => ({ backend: 'redis', ...(await reads.storeFigures()) }) } };
      redisByUrl.set(url, opened);
    }
    byService.set(service, opened.reads);
    storeFigures.set(service, opened.figures);
  }
  const mysqlByUrl = new Map<string, { reads: MysqlKeyReads; figures: StoreFiguresSource }>();
  for (const [service, url] of settings.mysql ?? []) {
    let opened = mysqlByUrl.get(url);
    if (!opened) {
      const pool = createMysqlPool(url, 4);
      closers.push(() => pool.end());
      const reads = new MysqlKeyReads(pool, policies);
      opened = { reads, figures: { backend: 'mysql', services: servicesOf(settings.mysql, url), reads, read: async () => ({ backend: 'mysql', ...(await reads.storeFigures()) }) } };
      mysqlByUrl.set(url, opened);
    }
    byService.set(service, opened.reads);
    storeFigures.set(service, opened.figures);
  }
  return {
    byService,
    storeFigures,
    staleElsewhere: storeFigures.size === 0 ? undefined : staleElsewhereReader(storeFigures),
    async end() {
      await Promise.allSettled(closers.map((close) => close()));
    },
  };
}

/** Where a URL points, for messages: host and port, never credentials. */
const placeOf = (url: string) => {
  const parsed = new URL(url);
  return `${parsed.hostname}:${parsed.port || (parsed.protocol === 'mysql:' ? '3306' : '6379')}${parsed.pathname === '/' ? '' : parsed.pathname}`;
};
/** Where a Redis target points, for messages: its host:port, or its nodes' joined by `|`. */
const placeOfTarget = (target: RedisTarget) => (target.kind === 'server' ? placeOf(target.url) : `the cluster ${target.nodes.map(placeOf).join('|')}`);
const reasonOf = (error: unknown) => (error instanceof Error ? error.message : String(error)).split('\n')[0];

/**
 * Refuses at start, in one line naming the setting and the service, a key backend the dashboard
 * could not use: a Redis that does not answer, a MySQL that does not, whose user may select
 * response_body (the grants must exclude it: mysqlDashboardGrants), that cannot read the key
 * table's metadata (no grant, or not migrated), or lacks the indexes of migration 0003; a Redis
 * Cluster node given as a redis:// URL (a single-node client meets MOVED for every slot another node
 * holds: name it as redis+cluster://), or a redis+cluster:// node that is not one. A cluster's
 * user is checked on every master.
 */
export async function checkKeyBackends(settings: { redis?: Map<string, string> | undefined; mysql?: Map<string, string> | undefined }): Promise<void> {
  for (const [service, url] of settings.redis ?? []) {
    const target = parseRedisTarget(url);
    if (!target) throw new ConfigurationError(`DASHBOARD_KEYS_REDIS (${service}): not a Redis URL or redis+cluster:// nodes`);
    const place = placeOfTarget(target);
    let connection: RedisConnection | undefined;
    let cluster: boolean;
    const missing: string[] = [];
    try {
      connection = await connectTarget(target);
      const { commands } = connection;
      const masters = commands.eachMaster ? await commands.eachMaster() : [{ node: place, commands }];
      const infos = await Promise.all(masters.map((master) => master.commands.sendCommand(['INFO', 'cluster'])));
      cluster = infos.every((info) => /^cluster_enabled:1\s*$/m.test(Buffer.isBuffer(info) ? info.toString('utf8') : String(info)));
      if (cluster === (target.kind === 'cluster')) {
        // Each command once, with the masters that refuse it (an ACL is set node by node).
        const refusedAt = new Map<string, string[]>();
        for (const master of masters) {
          for (const name of await missingRedisCommands(master.commands, target.kind === 'cluster')) refusedAt.set(name, [...(refusedAt.get(name) ?? []), master.node]);
        }
        for (const [name, nodes] of refusedAt) missing.push(target.kind === 'cluster' ? `${name} (on ${nodes.join(', ')})` : name);
      }
    } catch (error) {
      throw new ConfigurationError(`DASHBOARD_KEYS_REDIS (${service}): cannot reach Redis at ${place}: ${reasonOf(error)}`);
    } finally {
      await connection?.close().catch(() => undefined);
    }
    if (cluster && target.kind === 'server') {
      throw new ConfigurationError(`DASHBOARD_KEYS_REDIS (${service}): ${place} is a Redis Cluster node; name the cluster as ${service}=redis+cluster://host:port|host:port... (docs/deploying.md)`);
    }
    if (!cluster && target.kind === 'cluster') {
      throw new ConfigurationError(`DASHBOARD_KEYS_REDIS (${service}): ${place} is not a Redis Cluster (cluster_enabled:0); name a single Redis as ${service}=redis://host:port`);
    }
    if (missing.length > 0) {
      throw new ConfigurationError(`DASHBOARD_KEYS_REDIS (${service}): its user may not send ${missing.join(', ')} on retrysafe:* at ${place}; grant them as docs/redis.md says`);
    }
  }
  for (const [service, url] of settings.mysql ?? []) {
    const pool = createMysqlPool(url, 1);
    try {
      let access: Awaited<ReturnType<typeof mysqlReaderAccess>>;
      try {
        access = await mysqlReaderAccess(pool);
      } catch (error) {
        throw new ConfigurationError(`DASHBOARD_KEYS_MYSQL (${service}): cannot read the key table at ${placeOf(url)}: ${reasonOf(error)}`);
      }
      if (access === 'bodies') {
        throw new ConfigurationError(
          `DASHBOARD_KEYS_MYSQL (${service}): its user may select response_body at ${placeOf(url)}; give the dashboard a read-only user with the column grants of docs/mysql.md (no response_body)`,
        );
      }
      if (access === 'none') {
        throw new ConfigurationError(`DASHBOARD_KEYS_MYSQL (${service}): its user may not select the key table's metadata at ${placeOf(url)}; grant it as docs/mysql.md says`);
      }
      let missing: string[];
      try {
        missing = await mysqlMissingDashboardIndexes(pool);
      } catch (error) {
        throw new ConfigurationError(`DASHBOARD_KEYS_MYSQL (${service}): cannot read the key table at ${placeOf(url)}: ${reasonOf(error)}`);
      }
      if (missing.length > 0) {
        throw new ConfigurationError(`DASHBOARD_KEYS_MYSQL (${service}): the key table at ${placeOf(url)} lacks the dashboard's indexes (${missing.join(', ')}): run \`retrysafe migrate --mysql\``);
      }
    } finally {
      await pool.end().catch(() => undefined);
    }
  }
}

/**
 * The read commands the dashboard sends besides those start already sent (INFO), which the user at
 * `commands` (one server, or one master of a cluster) may not (an ACL's NOPERM), each tried once
 * on a key no record has: an older least-privilege user of docs/redis.md lacks GET (the
 * correlation-id lookup, which a cluster has not: not asked of one). On a master that does not
 * serve the probe's slot the answer is MOVED, which Redis checks after the ACL: the user may.
 */
async function missingRedisCommands(commands: RedisCommands, cluster: boolean): Promise<string[]> {
  const probe = 'retrysafe:dashboard-start-check';
  const missing: string[] = [];
  const reads: [string, string[]][] = [
    ['HMGET', ['HMGET', probe, 'state']],
    ['ZRANGE', ['ZRANGE', probe, '0', '0']],
    ...(cluster ? [] : ([['GET', ['GET', probe]]] as [string, string[]][])),
    ['TIME', ['TIME']],
  ];
  for (const [name, args] of reads) {
    try {
      await commands.sendCommand(args);
    } catch (error) {
      const reason = reasonOf(error) ?? '';
      if (cluster && /^(MOVED|ASK) /.test(reason)) continue;
      if (!/^NOPERM/.test(reason)) throw error;
      missing.push(name);
    }
  }
  return missing;
}

/** Newest first: created, then service, scope and key, descending (the seam's list order; across backends to the millisecond). */
function newerFirst(a: KeySummary, b: KeySummary): number {
  const created = Date.parse(b.createdAt) - Date.parse(a.createdAt);
  if (created !== 0) return created;
  for (const field of ['service', 'scope', 'key'] as const) {
    if (a[field] !== b[field]) return a[field] < b[field] ? 1 : -1;
  }
  return 0;
}

const byCode = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);

const sameKey = (a: { service: string; scope: string; key: string }, b: { service: string; scope: string; key: string }) => a.service === b.service && a.scope === b.scope && a.key === b.key;

/** A cursor at `key` when its exact instant is not known: the end of its millisecond (the next page leaves the key itself out). */
function cursorAt(key: KeySummary): KeyCursor {
  return { createdAtMicros: String(Date.parse(key.createdAt) * 1000 + 999), service: key.service, scope: key.scope, key: key.key };
}

/** How far a page's cursor reaches, as a key to compare (-infinity: its backend has nothing older). */
const frontierOf = (next: KeyCursor): KeySummary => ({
  service: next.service,
  scope: next.scope,
  key: next.key,
  createdAt: new Date(Math.floor(Number(next.createdAtMicros) / 1000)).toISOString(),
  state: 'completed',
  statusCode: null,
  expiresAt: '',
});

/**
 * Every source's answer, null for a source kept elsewhere whose backend is unavailable
 * (isDatabaseUnavailable: down, cut, timed out), its services in `missing`. Postgres's failure,
 * or any other failure, fails the read.
 */
async function settle<T>(sources: readonly { services: readonly string[] | null; read: () => Promise<T> }[]): Promise<{ answers: (T | null)[]; missing: string[] }> {
  const settled = await Promise.allSettled(sources.map((source) => source.read()));
  const missing: string[] = [];
  const answers = settled.map((outcome, index) => {
    if (outcome.status === 'fulfilled') return outcome.value;
    const services = sources[index]?.services;
    if (!services || !isDatabaseUnavailable(outcome.reason)) throw outcome.reason;
    missing.push(...services);
    return null;
  });
  return { answers, missing: missing.sort(byCode) };
}

/**
 * KeyRecordReads over Postgres and the services kept elsewhere: a read naming a service goes to
 * that service's backend (Postgres when it has none; unavailable there, the read fails: a 503),
 * one naming none goes to all and is merged: a backend kept elsewhere that is unavailable is left
 * out, its services named by unansweredServices(answer), so that one Redis or MySQL down does not
 * hide the keys of every other.
 * Postgres's answers for a service kept elsewhere are left out (its keys are not there).
 */
export function routedKeyReads(postgres: KeyRecordReads, elsewhere: Map<string, KeyRecordReads>): KeyRecordReads {
  if (elsewhere.size === 0) return postgres;
  const of = (service: string) => elsewhere.get(service) ?? postgres;
  const inPostgres = (record: { service: string }) => !elsewhere.has(record.service);
  const services = [...elsewhere.keys()];
  return {
    async keyRecords(query) {
      if (query.service !== undefined) return of(query.service).keyRecords(query);
      const { answers, missing } = await settle([
        { services: null, read: () => postgres.keyRecords(query).then((records) => records.filter(inPostgres)) },
        ...services.map((service) => ({ services: [service], read: () => of(service).keyRecords({ ...query, service }) })),
      ]);
      // Stable: each backend's expiry order within a (service, scope) stays.
      const found = answers.flatMap((records) => records ?? []).sort((a: KeyRecord, b: KeyRecord) => byCode(a.service, b.service) || byCode(a.scope, b.scope));
      return markUnanswered(found, missing);
    },

    async principalKeys(query: KeyListQuery): Promise<KeyPage> {
      if (query.service !== undefined) return of(query.service).principalKeys(query);
      const sources: { reads: KeyRecordReads; query: KeyListQuery; services: string[] | null }[] = [
        { reads: postgres, query, services: null },
        ...services.map((service) => ({ reads: of(service), query: { ...query, service }, services: [service] })),
      ];
      const settled = await settle(
        sources.map((source, index) => ({
          services: source.services,
          read: async () => {
            const page = await source.reads.principalKeys(source.query);
            return { ...page, keys: index === 0 ? page.keys.filter(inPostgres) : page.keys };
          },
        })),
      );
      // An unavailable backend: an empty page here (its services named by unansweredServices).
      const pages = settled.answers.map((page): KeyPage => page ?? { keys: [], next: null, searchedBackTo: null });
      // Each page is complete down to its cursor: keep only what is newer than the nearest of them,
      // so a backend that stopped early (its scan bound, or a full page) skips nothing. The cursor's
      // own key is left out (a cursor rounded to its millisecond may reach it again).
      const stopped = pages.flatMap((page) => (page.next ? [{ page, at: frontierOf(page.next) }] : [])).sort((a, b) => newerFirst(a.at, b.at))[0];
      const merged = pages
        .flatMap((page, source) => page.keys.map((key, position) => ({ key, source, position })))
        .filter((entry) => !query.after || !sameKey(entry.key, query.after))
        .sort((a, b) => newerFirst(a.key, b.key))
        .filter((entry) => !stopped || newerFirst(entry.key, stopped.at) <= 0);
      const page = merged.slice(0, query.limit);
      const last = page.at(-1);
      let next: KeyCursor | null = null;
      let searchedBackTo: string | null = null;
      if (merged.length > query.limit && last) {
        // The last key's exact cursor (microseconds) from its own backend: its page's, or a page
        // ending at it; else the end of its millisecond.
        const own = pages[last.source]?.next;
        const source = sources[last.source];
        const exact =
          own && sameKey(last.key, own) ? own : source ? (await source.reads.principalKeys({ ...source.query, limit: last.position + 1 })).next : null;
        next = exact && sameKey(last.key, exact) ? exact : cursorAt(last.key);
      } else if (stopped) {
        next = stopped.page.next;
        if (page.length < query.limit) searchedBackTo = stopped.page.searchedBackTo ?? stopped.at.createdAt;
      }
      return markUnanswered({ keys: page.map((entry) => entry.key), next, searchedBackTo }, settled.missing);
    },

    async correlationRecords(correlationId) {
      const distinct = [...new Set(elsewhere.values())];
      // A backend that keeps no index by correlation id (a Redis Cluster) says so
      // (KeyReadUnsupportedError): its services are marked not kept, with why, never "not found".
      const notKept: { service: string; reason: string }[] = [];
      const { answers, missing } = await settle([
        { services: null, read: () => postgres.correlationRecords(correlationId) },
        ...distinct.map((reads) => {
          const of = services.filter((service) => elsewhere.get(service) === reads);
          return {
            services: of,
            read: () =>
              reads.correlationRecords(correlationId).catch((error: unknown) => {
                if (!(error instanceof KeyReadUnsupportedError)) throw error;
                notKept.push(...of.map((service) => ({ service, reason: error.message })));
                return [] as CorrelationRecord[];
              }),
          };
        }),
      ]);
      const found = answers
        .flatMap((records) => records ?? [])
        .sort((a: CorrelationRecord, b: CorrelationRecord) => Date.parse(b.createdAt) - Date.parse(a.createdAt))
        .slice(0, 20);
      return markNotKept(markUnanswered(found, missing), notKept.sort((a, b) => byCode(a.service, b.service)));
    },

    async staleClaims(limit, service) {
      if (service !== undefined) return of(service).staleClaims(limit, service);
      // Every backend that can list them (a backend that cannot says KeyReadUnsupportedError: left out).
      const { answers, missing } = await settle([
        { services: null, read: () => postgres.staleClaims(limit).then((claims) => claims.filter(inPostgres)) },
        ...services.map((name) => ({
          services: [name],
          read: () =>
            of(name)
              .staleClaims(limit, name)
              .catch((error: unknown) => {
                if (error instanceof KeyReadUnsupportedError) return [] as StaleClaim[];
                throw error;
              }),
        })),
      ]);
      const found = answers
        .flatMap((claims) => claims ?? [])
        .sort((a, b) => Date.parse(a.leaseExpiredAt) - Date.parse(b.leaseExpiredAt))
        .slice(0, limit);
      return markUnanswered(found, missing);
    },

    releaseStaleClaim(id, by) {
      return of(id.service).releaseStaleClaim(id, by);
    },
  };
}
