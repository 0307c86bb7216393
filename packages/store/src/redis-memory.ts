// The eviction alarm: the failure mode of an idempotency store kept in a cache. A Redis whose
// maxmemory-policy is allkeys-* evicts key records under memory pressure, exactly when traffic
// and retries peak, and a retry whose record was evicted runs again. At start the watch reads
// the policy, maxmemory and evicted_keys (INFO, which managed services allow where CONFIG is
// renamed away) and refuses an evicting policy, naming the setting; then, every minute, any rise
// of evicted_keys or memory above 90% of maxmemory is a critical alert (onAlert, status(),
// prometheusText()). A volatile-* policy evicts only keys with an expiry, which every record has:
// records can still be evicted, so the alert, not the refusal, guards it.
import { periodicTask, type PeriodicTask } from './periodic.js';

/** What the Redis code sends commands through: a connected node-redis client whose bulk strings come back as Buffers (connectRedis). */
export interface RedisCommands {
  sendCommand(args: ReadonlyArray<string | Buffer>): Promise<unknown>;
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

function infoFields(reply: unknown): Map<string, string> {
  const info = Buffer.isBuffer(reply) ? reply.toString('utf8') : String(reply);
  const fields = new Map<string, string>();
  for (const line of info.split(/\r?\n/)) {
    const colon = line.indexOf(':');
    if (colon > 0 && !line.startsWith('#')) fields.set(line.slice(0, colon), line.slice(colon + 1).trim());
  }
  return fields;
}

/** Reads maxmemory-policy, maxmemory, used_memory and evicted_keys in one INFO (sections memory and stats). */
export async function readRedisMemory(redis: RedisCommands): Promise<RedisMemory> {
  const fields = infoFields(await redis.sendCommand(['INFO', 'memory', 'stats']));
  const number = (name: string): number => {
    const value = Number(fields.get(name));
    if (!Number.isFinite(value)) throw new Error(`Redis INFO has no ${name}`);
    return value;
  };
  const policy = fields.get('maxmemory_policy');
  if (!policy) throw new Error('Redis INFO has no maxmemory_policy');
  return { policy, maxmemoryBytes: number('maxmemory'), usedMemoryBytes: number('used_memory'), evictedKeys: number('evicted_keys') };
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
  memory: RedisMemory | null;
  /** Keys evicted since the watch started. */
  evictedSinceStart: number;
  /** The alerts of the last reading (empty: all well). */
  alerts: RedisMemoryAlert[];
  checkedAt: Date | null;
}

/** Watches one Redis for the settings and events that lose key records (see the module's comment). */
export class RedisMemoryWatch {
  private task: PeriodicTask | null = null;
  private first: RedisMemory | null = null;
  private last: RedisMemory | null = null;
  private alerts: RedisMemoryAlert[] = [];
  private checkedAt: Date | null = null;

  constructor(
    private readonly redis: RedisCommands,
    private readonly options: RedisMemoryWatchOptions = {},
  ) {}

  /** Reads the figures once; throws EvictingPolicyError for an allkeys-* policy unless told to alert; then checks every interval. */
  async start(): Promise<RedisMemoryStatus> {
    const memory = await readRedisMemory(this.redis);
    if (memory.policy.startsWith('allkeys-') && this.options.evictingPolicy !== 'alert') throw new EvictingPolicyError(memory.policy);
    this.first = memory;
    this.judge(memory, null);
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
    const memory = await readRedisMemory(this.redis);
    this.first ??= memory;
    this.judge(memory, this.last);
    return this.status();
  }

  private judge(memory: RedisMemory, previous: RedisMemory | null): void {
    const alerts: RedisMemoryAlert[] = [];
    if (memory.policy.startsWith('allkeys-')) {
      alerts.push({ kind: 'evicting-policy', severity: 'critical', message: `Redis maxmemory-policy is ${memory.policy}: idempotency records can be evicted before their retention ends` });
    }
    // A counter lower than before: the server restarted or CONFIG RESETSTAT; count from there.
    const evicted = previous === null ? 0 : memory.evictedKeys - (memory.evictedKeys >= previous.evictedKeys ? previous.evictedKeys : 0);
    if (evicted > 0) {
      alerts.push({ kind: 'evictions', severity: 'critical', evicted, message: `Redis evicted ${evicted} keys since the last reading (policy ${memory.policy}): retries of evicted records run again` });
    }
    if (memory.maxmemoryBytes > 0) {
      const ratio = memory.usedMemoryBytes / memory.maxmemoryBytes;
      if (ratio > MEMORY_ALERT_RATIO) {
        alerts.push({ kind: 'memory', severity: 'critical', ratio, message: `Redis uses ${(ratio * 100).toFixed(0)}% of maxmemory (${memory.maxmemoryBytes} bytes, policy ${memory.policy})` });
      }
    }
    this.last = memory;
    this.alerts = alerts;
    this.checkedAt = new Date();
    for (const alert of alerts) this.options.onAlert?.(alert);
  }

  status(): RedisMemoryStatus {
    const evictedSinceStart = this.first && this.last ? Math.max(0, this.last.evictedKeys - this.first.evictedKeys) : 0;
    return { memory: this.last, evictedSinceStart, alerts: [...this.alerts], checkedAt: this.checkedAt };
  }

  /**
   * The last reading as Prometheus text, for the service's own /metrics: used and maximum memory,
   * keys evicted (the server's counter: alert on any increase), and whether the policy evicts any key.
   */
  prometheusText(service: string): string {
    const memory = this.last;
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
