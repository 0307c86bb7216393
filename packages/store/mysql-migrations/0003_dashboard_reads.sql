-- The dashboard's reads of MySQL-kept keys (mysql-key-reads.ts), each walking an index in the
-- order it returns, bounded by a LIMIT:
--   retrysafe_idempotency_keys_principal_created (principal_id, created_at): a principal's recent
--     keys, newest first, from a cursor (InnoDB appends the primary key's columns, so the index
--     order is the list's order, created_at, service, scope, idempotency_key);
--   retrysafe_idempotency_keys_state_lease (state, lease_expires_at): stale claims, in progress
--     with the oldest lease first.
-- One ALTER (MySQL 8 has no ADD INDEX IF NOT EXISTS): both indexes are built, or neither.
ALTER TABLE retrysafe_idempotency_keys
  ADD INDEX retrysafe_idempotency_keys_principal_created (principal_id, created_at),
  ADD INDEX retrysafe_idempotency_keys_state_lease (state, lease_expires_at);
