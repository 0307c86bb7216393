-- The key table of the MySQL/MariaDB backend (@retrysafe/store/mysql), beside the adopter's own
-- tables in their database, so a transactional endpoint's effects and its key commit together.
-- Columns as in the Postgres store's table (packages/store/migrations/0000, 0016, 0025); every
-- time is the server's UTC_TIMESTAMP(6), never the application's clock nor the session's time zone.
-- key and scope are VARBINARY: compared byte for byte with no trailing-space padding (a PAD SPACE
-- collation would make 'k' and 'k ' one key) and bounded in bytes as the store checks them.
-- The primary key (principal_id, service, scope, idempotency_key) is the concurrency control:
-- the claim is one INSERT, and a concurrent claim of the same key fails with 1062.
CREATE TABLE IF NOT EXISTS retrysafe_idempotency_keys (
  principal_id CHAR(36) CHARACTER SET ascii COLLATE ascii_general_ci NOT NULL,
  service VARCHAR(63) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  scope VARBINARY(200) NOT NULL,
  idempotency_key VARBINARY(255) NOT NULL,
  state ENUM('in_progress', 'completed', 'failed') NOT NULL,
  fingerprint BINARY(32) NOT NULL,
  correlation_id CHAR(36) CHARACTER SET ascii COLLATE ascii_general_ci NOT NULL,
  attempts INT NOT NULL DEFAULT 1,
  lease_expires_at DATETIME(6) NULL,
  created_at DATETIME(6) NOT NULL,
  completed_at DATETIME(6) NULL,
  expires_at DATETIME(6) NOT NULL,
  response_status SMALLINT NULL,
  response_content_type TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
  response_body MEDIUMBLOB NULL,
  response_key_id VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NULL,
  response_size INT NULL,
  response_ref TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
  PRIMARY KEY (principal_id, service, scope, idempotency_key),
  -- The sweep's chunked deletes walk this index in expiry order (no partial indexes in MySQL).
  KEY retrysafe_idempotency_keys_expires_at (expires_at),
  -- Stale claims: state = 'in_progress' ordered by age (what a partial index serves on Postgres).
  KEY retrysafe_idempotency_keys_state_created (state, created_at),
  CONSTRAINT retrysafe_keys_service CHECK (service REGEXP '^[a-z0-9][a-z0-9._-]{0,62}$'),
  CONSTRAINT retrysafe_keys_key_length CHECK (LENGTH(idempotency_key) BETWEEN 1 AND 255),
  CONSTRAINT retrysafe_keys_scope_length CHECK (LENGTH(scope) BETWEEN 1 AND 200),
  CONSTRAINT retrysafe_keys_attempts CHECK (attempts >= 1),
  CONSTRAINT retrysafe_keys_in_progress_has_lease CHECK (state <> 'in_progress' OR lease_expires_at IS NOT NULL),
  CONSTRAINT retrysafe_keys_completed_has_response CHECK (state <> 'completed' OR (response_status IS NOT NULL AND completed_at IS NOT NULL AND (response_body IS NOT NULL OR response_ref IS NOT NULL))),
  CONSTRAINT retrysafe_keys_response_status CHECK (response_status IS NULL OR response_status BETWEEN 100 AND 599),
  CONSTRAINT retrysafe_keys_body_has_key_id CHECK (response_body IS NULL OR response_key_id IS NOT NULL),
  CONSTRAINT retrysafe_keys_body_or_ref CHECK (response_body IS NULL OR response_ref IS NULL),
  CONSTRAINT retrysafe_keys_expiry_after_creation CHECK (expires_at > created_at)
) ENGINE = InnoDB ROW_FORMAT = DYNAMIC;
