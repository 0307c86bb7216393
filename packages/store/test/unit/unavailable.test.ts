// Which errors answer 503 with Retry-After (the database cannot be reached, is shutting down,
// is full or timed out) and which stay a 500 (everything else: a bug, a constraint).
import { describe, expect, it } from 'vitest';
import { databaseUnavailableReason, problemFor, UNAVAILABLE_RETRY_AFTER_SECONDS } from '@retrysafe/store';
import { isTransientFailure } from '@retrysafe/store/postgres';

const withCode = (code: string, message = 'failed') => Object.assign(new Error(message), { code });
/** The fields mysql2 sets on a server's error. */
const mysqlError = (errno: number, code: string, sqlState: string, message: string) => Object.assign(new Error(message), { errno, code, sqlState, sqlMessage: message });

describe('databaseUnavailableReason', () => {
  it.each([
    [withCode('ECONNREFUSED', 'connect ECONNREFUSED 127.0.0.1:1'), 'connection'],
    [withCode('ECONNRESET', 'read ECONNRESET'), 'connection'],
    [withCode('ETIMEDOUT', 'connect ETIMEDOUT'), 'timeout'],
    [withCode('08006', 'connection failure'), 'connection'],
    // PgBouncer's own failures (its ErrorResponse carries 08P01).
    [withCode('08P01', 'server conn crashed?'), 'connection'],
    [withCode('08P01', 'query_wait_timeout'), 'connection'],
    [withCode('08P01', 'pgbouncer cannot connect to server'), 'connection'],
    [withCode('57P01', 'terminating connection due to administrator command'), 'shutdown'],
    [withCode('57P02', 'terminating connection due to crash of another server process'), 'shutdown'],
    [withCode('57P03', 'the database system is starting up'), 'shutdown'],
    [withCode('53300', 'sorry, too many clients already'), 'capacity'],
    [withCode('53100', 'could not extend file: No space left on device'), 'capacity'],
    [withCode('57014', 'canceling statement due to statement timeout'), 'timeout'],
    [new Error('timeout exceeded when trying to connect'), 'timeout'],
    [new Error('Connection terminated due to connection timeout'), 'timeout'],
    [new Error('Query read timeout'), 'timeout'],
    [new Error('Connection terminated unexpectedly'), 'connection'],
    [new Error('Client has encountered a connection error and is not queryable'), 'connection'],
    // A transaction the database rolled back whole (a transactional request's work or completion).
    [withCode('40P01', 'deadlock detected'), 'rollback'],
    [withCode('40001', 'could not serialize access due to concurrent update'), 'rollback'],
    // MySQL/MariaDB, as mysql2 raises them: the server's errno and SQLSTATE, or mysql2's own code.
    [mysqlError(1213, 'ER_LOCK_DEADLOCK', '40001', 'Deadlock found when trying to get lock; try restarting transaction'), 'rollback'],
    [mysqlError(1040, 'ER_CON_COUNT_ERROR', '08004', 'Too many connections'), 'capacity'],
    [mysqlError(1053, 'ER_SERVER_SHUTDOWN', '08S01', 'Server shutdown in progress'), 'shutdown'],
    [mysqlError(1927, 'ER_CONNECTION_KILLED', '70100', 'Connection was killed'), 'connection'],
    [withCode('PROTOCOL_CONNECTION_LOST', 'Connection lost: The server closed the connection.'), 'connection'],
    [withCode('PROTOCOL_SEQUENCE_TIMEOUT', 'Query inactivity timeout'), 'timeout'],
  ])('%s is %s', (error, reason) => {
    expect(databaseUnavailableReason(error)).toBe(reason);
  });

  it('finds a connect that failed on every address (AggregateError)', () => {
    const error = new AggregateError([withCode('ECONNREFUSED'), withCode('ECONNREFUSED')], 'connect failed');
    expect(databaseUnavailableReason(error)).toBe('connection');
  });

  it.each([
    ['a cancel by an operator (57014, user request)', withCode('57014', 'canceling statement due to user request')],
    ['a unique violation', withCode('23505', 'duplicate key value violates unique constraint')],
    ['a lock timeout (the store answers 409 for it)', withCode('55P03', 'canceling statement due to lock timeout')],
    ['a syntax error', withCode('42601', 'syntax error at or near')],
    ['a MySQL lock wait timeout (the statement alone undone; the store answers 409 for a claim)', mysqlError(1205, 'ER_LOCK_WAIT_TIMEOUT', 'HY000', 'Lock wait timeout exceeded; try restarting transaction')],
    ['a MySQL duplicate key', mysqlError(1062, 'ER_DUP_ENTRY', '23000', "Duplicate entry 'x' for key 'PRIMARY'")],
    ['a plain error', new Error('Query read timeout happened in my own code, with more words')],
    ['a non-error', 'ECONNREFUSED'],
    ['null', null],
  ])('%s is not unavailability', (_name, error) => {
    expect(databaseUnavailableReason(error)).toBeNull();
  });
});

describe('problemFor an unavailable database', () => {
  it('is a 503 problem with Retry-After', () => {
    const problem = problemFor(withCode('57P01', 'terminating connection due to administrator command'));
    expect(problem).toMatchObject({ status: 503, slug: 'database-unavailable', headers: { 'Retry-After': String(UNAVAILABLE_RETRY_AFTER_SECONDS) } });
  });

  it('leaves other errors to the 500', () => {
    expect(problemFor(withCode('23505'))).toBeNull();
  });
});

describe('isTransientFailure (a completion that failed so is sent again within its lease)', () => {
  it.each([
    withCode('ECONNREFUSED', 'connect ECONNREFUSED 127.0.0.1:1'),
    withCode('ECONNRESET', 'read ECONNRESET'),
    withCode('08P01', 'server conn crashed?'),
    withCode('08006', 'connection failure'),
    withCode('57P01', 'terminating connection due to administrator command'),
    withCode('40001', 'could not serialize access'),
    new Error('Connection terminated unexpectedly'),
    new Error('timeout exceeded when trying to connect'),
  ])('%s is transient', (error) => {
    expect(isTransientFailure(error)).toBe(true);
  });

  it.each([withCode('23505', 'duplicate key value'), withCode('22P02', 'invalid input syntax'), withCode('57014', 'canceling statement due to statement timeout'), new Error('a bug')])(
    '%s is not',
    (error) => {
      expect(isTransientFailure(error)).toBe(false);
    },
  );
});
