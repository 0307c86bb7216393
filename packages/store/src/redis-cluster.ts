// A Redis Cluster as the Redis code sees it (RedisCommands): node-redis's cluster client, each
// command routed to the master of its first key's slot (every script names only keys of one
// hash tag, `{principal:service}`, so one slot), MOVED and ASK followed by the client; the
// commands each server answers for itself (INFO, for the eviction watch) sent to every master,
// and WAIT sent pipelined behind the write on the connection that carried it. No SELECT: a cluster has one database.
import { createCluster, RESP_TYPES, type RedisClusterOptions } from 'redis';
import type { RedisCommands } from './redis-memory.js';

/** Commands that name no key: sent to any master (TIME) or to each one (INFO, through eachMaster). */
const KEYLESS: ReadonlySet<string> = new Set(['TIME', 'INFO', 'PING', 'SCRIPT', 'DBSIZE']);

/** The key a command's slot is chosen by: EVAL/EVALSHA's first key, or the first argument. */
export function routingKey(args: ReadonlyArray<string | Buffer>): string | Buffer | undefined {
  const name = String(args[0]).toUpperCase();
  if (name === 'EVAL' || name === 'EVALSHA') return Number(String(args[2])) > 0 ? args[3] : undefined;
  return KEYLESS.has(name) ? undefined : args[1];
}

/** The user and password of a node's URL (percent-decoded), as node-redis client options. */
function credentialsOf(url: string): { username?: string; password?: string } {
  if (!URL.canParse(url)) return {};
  const { username, password } = new URL(url);
  return { ...(username ? { username: decodeURIComponent(username) } : {}), ...(password ? { password: decodeURIComponent(password) } : {}) };
}

export interface RedisClusterConnection {
  commands: RedisCommands;
  close(): Promise<void>;
}

/**
 * Connects to a Redis Cluster through `nodes` (some or all of its nodes; the client discovers the
 * rest), as the user, with the password and TLS (`rediss:`) of the first node's URL on every node. As connectRedis for one server: bulk strings as Buffers, commands failing at once while
 * a node is disconnected (the store answers 503, not a request queued for an unknown time),
 * reconnection in the background. While a node's connection is down the client asks the cluster
 * for its topology again every second, so a promoted replica is found soon after a failover.
 * A cluster that cannot be reached at start fails the returned promise.
 */
export async function connectRedisCluster(
  nodes: readonly { url: string }[],
  options: { onError?: (error: unknown) => void; clusterOptions?: Partial<RedisClusterOptions> } = {},
): Promise<RedisClusterConnection> {
  if (nodes.length === 0) throw new TypeError('redis: { cluster: { nodes } } needs at least one node');
  let connected = false;
  const cluster = createCluster({
    rootNodes: nodes.map((node) => ({ url: node.url, socket: { connectTimeout: 5_000, reconnectStrategy: false as const } })),
    topologyRefreshOnReconnectionAttemptStrategy: 1_000,
    ...options.clusterOptions,
    defaults: {
      disableOfflineQueue: true,
      // node-redis applies a root node's URL only to its discovery connection: the clients of the
      // nodes it discovers (every command's) get `defaults`, so the user, password and TLS of the
      // first node's URL go there (else they would connect as the default user, or fail NOAUTH).
      ...credentialsOf(nodes[0]?.url ?? ''),
      ...options.clusterOptions?.defaults,
      socket: {
        ...(nodes[0]?.url.startsWith('rediss:') ? { tls: true as const } : {}),
        connectTimeout: 5_000,
        // Before the first connection: give up; after it: back off up to a second.
        reconnectStrategy: (retries: number, cause: Error) => (connected ? Math.min(50 * 2 ** retries, 1_000) : cause),
        ...options.clusterOptions?.defaults?.socket,
      },
    },
  });
  cluster.on('error', (error: unknown) => options.onError?.(error));
  await cluster.connect();
  connected = true;
  const binary = cluster.withTypeMapping({ [RESP_TYPES.BLOB_STRING]: Buffer });

  const commands: RedisCommands = {
    sendCommand: (args) => binary.sendCommand(routingKey(args), false, [...args]),
    async eachMaster() {
      return Promise.all(
        cluster.masters.map(async (master) => {
          const client = (await cluster.nodeClient(master)).withTypeMapping({ [RESP_TYPES.BLOB_STRING]: Buffer });
          return { node: `${master.host}:${master.port}`, commands: { sendCommand: (args: ReadonlyArray<string | Buffer>) => client.sendCommand([...args]) } };
        }),
      );
    },
    async sendAndWait(args, key, replicas, timeoutMs) {
      // WAIT counts the replicas that acknowledged this connection's writes, so it goes on the
      // connection to the key's master, behind the write (cluster.sendCommand would send it to
      // every master). A write the node redirects (MOVED, ASK: the slot moved) goes through the
      // cluster's routing, which learns the new topology, and then once more here.
      for (let attempt = 0; ; attempt += 1) {
        const client = (await cluster.getNodeClientForKey(key, false)).withTypeMapping({ [RESP_TYPES.BLOB_STRING]: Buffer });
        const write = client.sendCommand([...args]);
        const wait = client.sendCommand(['WAIT', String(replicas), String(timeoutMs)]);
        // A WAIT that fails after its write (the node turned replica in between: "WAIT cannot be
        // used with replica instances") confirms no replica: 0, and the backend decides.
        const acknowledged = wait.then(Number, () => 0);
        try {
          return [await write, await acknowledged];
        } catch (error) {
          if (attempt > 0 || !(error instanceof Error) || !/^(MOVED|ASK) /.test(error.message)) throw error;
          // The write did not run. A read of the key through the cluster's routing meets the same
          // redirection and makes the client learn where the slot lives now.
          await binary.sendCommand(key, false, ['EXISTS', key]).catch(() => undefined);
        }
      }
    },
  };
  return {
    commands,
    close: async () => {
      if (cluster.isOpen) await cluster.close();
    },
  };
}
