-- Evidence of the MySQL sweeps (mysql-retention.ts), in the same database as the keys so each
-- chunk's evidence commits in the chunk's own transaction: a sweeper killed mid-run leaves a record
-- of everything it deleted. Per (run, service, scope): rows deleted and the youngest deleted row's
-- age at deletion, beside the documented retry window the sweeper was given, and the margin.
CREATE TABLE IF NOT EXISTS retrysafe_sweep_runs (
  id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
  started_at DATETIME(6) NOT NULL,
  finished_at DATETIME(6) NULL,
  status ENUM('running', 'completed', 'failed') NOT NULL,
  chunks INT NOT NULL DEFAULT 0,
  rows_deleted BIGINT NOT NULL DEFAULT 0,
  stale_released INT NOT NULL DEFAULT 0,
  stop_reason VARCHAR(64) CHARACTER SET ascii NULL,
  error TEXT NULL
) ENGINE = InnoDB;
CREATE TABLE IF NOT EXISTS retrysafe_sweep_run_scopes (
  run_id BIGINT NOT NULL,
  service VARCHAR(63) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  scope VARBINARY(200) NOT NULL,
  rows_deleted BIGINT NOT NULL,
  min_age_seconds DOUBLE NOT NULL,
  retry_window_seconds INT NULL,
  min_margin_seconds DOUBLE NULL,
  PRIMARY KEY (run_id, service, scope),
  CONSTRAINT retrysafe_sweep_run_scopes_run FOREIGN KEY (run_id) REFERENCES retrysafe_sweep_runs (id) ON DELETE CASCADE
) ENGINE = InnoDB;
