// The eviction alarm: the failure mode of an idempotency store kept in a cache. A Redis whose
// maxmemory-policy is allkeys-* evicts key records under memory pressure, exactly when traffic
// and retries peak, and a retry whose record was evicted runs again. At start the watch reads
// the policy, maxmemory and evicted_keys (INFO, which managed services allow where CONFIG is
// renamed away) and refuses an evicting policy, naming the setting; then, every minute, any rise
// of evicted_keys or memory above 90% of maxmemory is a critical alert (onAlert, status(),
// prometheusText()). A volatile-* policy evicts only keys with an expiry, which every record has:
// records can still be evicted, so the alert, not the refusal, guards it.
import { periodicTask, type PeriodicTask } from './periodic.js';

/** What the Redis code sends commands through: a connected node-redis client whose bulk strings come back as Buffers (connectRedis, connectRedisCluster). */
export interface RedisCommands {
  sendCommand(args: ReadonlyArray<string | Buffer>): Promise<unknown>;
  /**
   * A cluster: the masters serving slots now, each with commands to it alone, for what each server
   * answers for itself (INFO). Absent for one server.
   */
  eachMaster?(): Promise<{ node: string; commands: RedisCommands }[]>;
  /**
   * Sends `args` (a write to `key`) and `WAIT replicas timeoutMs` pipelined on the same connection
   * (a cluster: the key's master's): the reply, and the replicas that acknowledged that
   * connection's writes. Absent for one server, where sendCommand has one connection.
   */
  sendAndWait?(args: ReadonlyArray<string | Buffer>, key: string, replicas: number, timeoutMs: number): Promise<[unknown, number]>;
}

/** What INFO says about the server's memory and evictions. */
export interface RedisMemory {
  /** maxmemory-policy, e.g. noeviction, volatile-lru, allkeys-lru. */
  policy: string;
  /** maxmemory in bytes; 0: no limit. */
  maxmemoryBytes: number;
  usedMemoryBytes: number;
  /** evicted_keys since the server started (or CONFIG RESETSTAT). */
  evictedKeys: number;
}

export interface RedisMemoryAlert {
  kind: 'evicting-policy' | 'evictions' | 'memory';
  severity: 'critical';
  message: string;
  /** For 'evictions': keys evicted since the previous reading. */
  evicted?: number;
  /** For 'memory': used_memory / maxmemory. */
  ratio?: number;
}

/** The Redis evicts keys regardless of their expiry (maxmemory-policy allkeys-*): createRetrysafe refuses to start. */
export class EvictingPolicyError extends Error {
  readonly code = 'REDIS_EVICTING_POLICY';
  constructor(readonly policy: string) {
    super(
      `Redis maxmemory-policy is ${policy}: under memory pressure it evicts idempotency records before their retention ends, and a retry then runs again. ` +
        "Set maxmemory-policy to noeviction (writes fail with a 503 when memory is full) or volatile-* with memory to spare, or pass redis: { evictingPolicy: 'alert' } to run with a critical alert instead",
    );
    this.name = 'EvictingPolicyError';
  }
}

/** Memory used above this share of maxmemory is an alert. */
export const MEMORY_ALERT_RATIO = 0.9;

/** An INFO reply's `name:value` lines, by name. */
export function infoFields(reply: unknown): Map<string, string> {
  const info = Buffer.isBuffer(reply) ? reply.toString('utf8') : String(reply);
  const fields = new Map<string, string>();
  for (const line of info.split(/\r?\n/)) {
    const colon = line.indexOf(':');
    if (colon > 0 && !line.startsWith('#')) fields.set(line.slice(0, colon), line.slice(colon + 1).trim());
  }
  return fields;
}

/** The memory figures of INFO's memory and stats sections (the policy undefined when INFO has none); a missing number throws. */
export function memoryOf(fields: Map<string, string>): Omit<RedisMemory, 'policy'> & { policy: string | undefined } {
  const number = (name: string): number => {
    const value = Number(fields.get(name));
    if (!Number.isFinite(value)) throw new Error(`Redis INFO has no ${name}`);
    return value;
  };
  return { policy: fields.get('maxmemory_policy') || undefined, maxmemoryBytes: number('maxmemory'), usedMemoryBytes: number('used_memory'), evictedKeys: number('evicted_keys') };
}

/** Reads maxmemory-policy, maxmemory, used_memory and evicted_keys in one INFO (sections memory and stats). */
export async function readRedisMemory(redis: RedisCommands): Promise<RedisMemory> {
  const { policy, ...memory } = memoryOf(infoFields(await redis.sendCommand(['INFO', 'memory', 'stats'])));
  if (!policy) throw new Error('Redis INFO has no maxmemory_policy');
  return { policy, ...memory };
}

/** One server's reading; `node` is its host:port on a cluster, '' for one server. */
export interface RedisNodeMemory extends RedisMemory {
  node: string;
}

/** Reads every server that holds records: the one server, or each master of a cluster. */
export async function readRedisMemoryOfEachServer(redis: RedisCommands): Promise<RedisNodeMemory[]> {
  if (!redis.eachMaster) return [{ node: '', ...(await readRedisMemory(redis)) }];
  const masters = await redis.eachMaster();
  if (masters.length === 0) throw new Error('the Redis Cluster has no master serving slots');
  return Promise.all(masters.map(async ({ node, commands }) => ({ node, ...(await readRedisMemory(commands)) })));
}

/** A cluster's readings as one: summed figures, an evicting policy if any master has one; maxmemory 0 when a master has no limit. */
function combined(readings: readonly RedisNodeMemory[]): RedisMemory {
  const policy = readings.find((reading) => reading.policy.startsWith('allkeys-'))?.policy ?? readings.find((reading) => reading.policy.startsWith('volatile-'))?.policy ?? readings[0]?.policy ?? 'noeviction';
  const sum = (pick: (reading: RedisMemory) => number) => readings.reduce((total, reading) => total + pick(reading), 0);
  return {
    policy,
    maxmemoryBytes: readings.every((reading) => reading.maxmemoryBytes > 0) ? sum((reading) => reading.maxmemoryBytes) : 0,
    usedMemoryBytes: sum((reading) => reading.usedMemoryBytes),
    evictedKeys: sum((reading) => reading.evictedKeys),
  };
}

export interface RedisMemoryWatchOptions {
  /** 'refuse' (default): an allkeys-* policy fails start(). 'alert': it is a critical alert instead. */
  evictingPolicy?: 'refuse' | 'alert';
  /** How often the figures are read again (default a minute). */
  intervalMs?: number;
  /** Told each critical alert as it is raised. */
  onAlert?: (alert: RedisMemoryAlert) => void;
  /** Told when a reading fails. */
  onError?: (error: unknown) => void;
}

export interface RedisMemoryStatus {
  /** The last reading (a cluster: its masters' figures summed). */
  memory: RedisMemory | null;
  /** The last reading of each server (one for a single server, each master of a cluster). */
  nodes: RedisNodeMemory[];
  /** Keys evicted since the watch started. */
  evictedSinceStart: number;
  /** The alerts of the last reading (empty: all well). */
  alerts: RedisMemoryAlert[];
  checkedAt: Date | null;
}

/**
 * Watches one Redis, or every master of a cluster, for the settings and events that lose key
 * records (see the module's comment). On a cluster each master is judged by its own figures
 * (its maxmemory, its evicted_keys): one full master loses records however empty the others are.
 */
export class RedisMemoryWatch {
  private task: PeriodicTask | null = null;
  /** Each server's first and last reading, by node. */
  private readonly first = new Map<string, RedisMemory>();
  private last = new Map<string, RedisNodeMemory>();
  private alerts: RedisMemoryAlert[] = [];
  private checkedAt: Date | null = null;

  constructor(
    private readonly redis: RedisCommands,
    private readonly options: RedisMemoryWatchOptions = {},
  ) {}

  /** Reads the figures once; throws EvictingPolicyError for an allkeys-* policy (on any master) unless told to alert; then checks every interval. */
  async start(): Promise<RedisMemoryStatus> {
    const readings = await readRedisMemoryOfEachServer(this.redis);
    const evicting = readings.find((reading) => reading.policy.startsWith('allkeys-'));
    if (evicting && this.options.evictingPolicy !== 'alert') throw new EvictingPolicyError(evicting.policy);
    this.judge(readings);
    this.task = periodicTask({
      name: 'redis memory watch',
      intervalMs: this.options.intervalMs ?? 60_000,
      run: () => this.check(),
      onError: (error) => this.options.onError?.(error),
    });
    this.task.start();
    return this.status();
  }

  /** Reads the figures now and raises what they call for. */
  async check(): Promise<RedisMemoryStatus> {
    this.judge(await readRedisMemoryOfEachServer(this.redis));
    return this.status();
  }

  private judge(readings: readonly RedisNodeMemory[]): void {
    const alerts: RedisMemoryAlert[] = [];
    const where = (reading: RedisNodeMemory) => (reading.node ? ` on ${reading.node}` : '');
    const evicting = readings.find((reading) => reading.policy.startsWith('allkeys-'));
    if (evicting) {
      alerts.push({ kind: 'evicting-policy', severity: 'critical', message: `Redis maxmemory-policy is ${evicting.policy}${where(evicting)}: idempotency records can be evicted before their retention ends` });
    }
    let evicted = 0;
    for (const reading of readings) {
      const previous = this.last.get(reading.node);
      if (!this.first.has(reading.node)) this.first.set(reading.node, reading);
      // A counter lower than before: the server restarted or CONFIG RESETSTAT; count from there.
      if (previous) evicted += reading.evictedKeys - (reading.evictedKeys >= previous.evictedKeys ? previous.evictedKeys : 0);
    }
    if (evicted > 0) {
      const policy = combined(readings).policy;
      alerts.push({ kind: 'evictions', severity: 'critical', evicted, message: `Redis evicted ${evicted} keys since the last reading (policy ${policy}): retries of evicted records run again` });
    }
    for (const reading of readings) {
      if (reading.maxmemoryBytes === 0) continue;
      const ratio = reading.usedMemoryBytes / reading.maxmemoryBytes;
      if (ratio > MEMORY_ALERT_RATIO) {
        alerts.push({ kind: 'memory', severity: 'critical', ratio, message: `Redis${where(reading)} uses ${(ratio * 100).toFixed(0)}% of maxmemory (${reading.maxmemoryBytes} bytes, policy ${reading.policy})` });
      }
    }
    this.last = new Map(readings.map((reading) => [reading.node, reading]));
    this.alerts = alerts;
    this.checkedAt = new Date();
    for (const alert of alerts) this.options.onAlert?.(alert);
  }

  status(): RedisMemoryStatus {
    const nodes = [...this.last.values()];
    let evictedSinceStart = 0;
    for (const reading of nodes) evictedSinceStart += Math.max(0, reading.evictedKeys - (this.first.get(reading.node)?.evictedKeys ?? reading.evictedKeys));
    return { memory: nodes.length > 0 ? combined(nodes) : null, nodes, evictedSinceStart, alerts: [...this.alerts], checkedAt: this.checkedAt };
  }

  /**
   * The last reading as Prometheus text, for the service's own /metrics: used and maximum memory,
   * keys evicted (the server's counter: alert on any increase), and whether the policy evicts any key.
   */
  prometheusText(service: string): string {
    const memory = this.status().memory;
    if (!memory) return '';
    const labels = `{service="${service}"}`;
    return [
      '# HELP retrysafe_redis_used_memory_bytes used_memory of the Redis holding this service\'s key records',
      '# TYPE retrysafe_redis_used_memory_bytes gauge',
      `retrysafe_redis_used_memory_bytes${labels} ${memory.usedMemoryBytes}`,
      '# HELP retrysafe_redis_maxmemory_bytes maxmemory of that Redis (0: no limit)',
      '# TYPE retrysafe_redis_maxmemory_bytes gauge',
      `retrysafe_redis_maxmemory_bytes${labels} ${memory.maxmemoryBytes}`,
      '# HELP retrysafe_redis_evicted_keys_total evicted_keys of that Redis: any increase means key records may have been lost',
      '# TYPE retrysafe_redis_evicted_keys_total counter',
      `retrysafe_redis_evicted_keys_total${labels} ${memory.evictedKeys}`,
      '# HELP retrysafe_redis_evicting_policy 1 when maxmemory-policy is allkeys-* (records evicted whatever their expiry)',
      '# TYPE retrysafe_redis_evicting_policy gauge',
      `retrysafe_redis_evicting_policy${labels} ${memory.policy.startsWith('allkeys-') ? 1 : 0}`,
      '',
    ].join('\n');
  }

  async stop(): Promise<void> {
    await this.task?.stop();
    this.task = null;
  }
}
