-- The dashboard's lookup of a request by the X-Correlation-Id a customer quotes, for MySQL-kept
-- keys (MysqlKeyReads.correlationRecords): retrysafe_idempotency_keys_correlation (correlation_id)
-- serves it, an equality range of a handful of rows (a replay and a takeover keep their claim's
-- id), as idempotency_keys_correlation_idx does on Postgres (packages/store/migrations/0018).
-- Without it no bounded read finds an id. Every claim writes one more index entry (36 bytes and
-- the primary key's columns).
-- ALGORITHM=INPLACE, LOCK=NONE: built online on InnoDB (MariaDB 10.0+, MySQL 5.6+), claims go on
-- while it builds; a server that could not build it so refuses it rather than blocking writes.
-- One statement (MySQL 8 has no ADD INDEX IF NOT EXISTS): built, or not.
ALTER TABLE retrysafe_idempotency_keys
  ADD INDEX retrysafe_idempotency_keys_correlation (correlation_id), ALGORITHM = INPLACE, LOCK = NONE;
