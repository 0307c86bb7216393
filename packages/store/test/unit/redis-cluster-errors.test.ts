// Which failures of a Redis Cluster answer 503 with Retry-After: a slot without a master
// (CLUSTERDOWN), a slot moving (MOVED, ASK, TRYAGAIN, or more redirections than the client
// follows), no node reachable. And which key routes each command the store sends to a cluster.
import { describe, expect, it } from 'vitest';
import { DisconnectsClientError, ErrorReply, MaxCommandRedirectionsError, RootNodesUnavailableError, TimeoutReadError } from 'redis';
import { problemFor } from '@retrysafe/store';
import { redisUnavailableReason, RedisUnavailableError, routingKey } from '@retrysafe/store/redis';

describe('a Redis Cluster that cannot take the command now', () => {
  const cases: [Error, 'shutdown' | 'connection' | 'timeout'][] = [
    [new ErrorReply('CLUSTERDOWN The cluster is down'), 'shutdown'],
    [new ErrorReply('CLUSTERDOWN Hash slot not served'), 'shutdown'],
    [new ErrorReply('MOVED 3999 127.0.0.1:6381'), 'shutdown'],
    [new ErrorReply('ASK 3999 127.0.0.1:6381'), 'shutdown'],
    [new ErrorReply('TRYAGAIN Multiple keys request during rehashing of slot'), 'shutdown'],
    [new MaxCommandRedirectionsError(new ErrorReply('MOVED 3999 127.0.0.1:6381')), 'shutdown'],
    [new RootNodesUnavailableError(), 'connection'],
    // The client destroys a node's connection when a topology refresh drops the node (the failed
    // master): its pending commands fail with this (seen as a 500 in the failover test before).
    [new DisconnectsClientError(), 'connection'],
    [new TimeoutReadError(1_000), 'timeout'],
  ];
  it.each(cases)('%s is %s, answered 503 with Retry-After', (error, reason) => {
    expect(redisUnavailableReason(error)).toBe(reason);
    const problem = problemFor(new RedisUnavailableError(reason, error));
    expect(problem?.status).toBe(503);
    expect(problem?.headers?.['Retry-After']).toBeDefined();
  });

  it('leaves a script error a 500 (a bug, not a server state)', () => {
    expect(redisUnavailableReason(new ErrorReply('ERR Error running script'))).toBeNull();
    expect(redisUnavailableReason(new ErrorReply('CROSSSLOT Keys in request don\'t hash to the same slot'))).toBeNull();
  });
});

describe('routingKey', () => {
  it("routes a script by its first key, a command by its first argument, TIME and INFO by none", () => {
    expect(routingKey(['EVALSHA', 'abc', '2', 'retrysafe:{p:s}:1:x:k', 'retrysafe:{p:s}:keys', 'arg'])).toBe('retrysafe:{p:s}:1:x:k');
    expect(routingKey(['EVAL', 'return 1', '0'])).toBeUndefined();
    expect(routingKey(['HMGET', 'retrysafe:{p:s}:1:x:k', 'state'])).toBe('retrysafe:{p:s}:1:x:k');
    expect(routingKey(['TIME'])).toBeUndefined();
    expect(routingKey(['INFO', 'memory', 'stats'])).toBeUndefined();
  });
});
