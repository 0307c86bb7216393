// The bridge from Next's server code to server/: process-wide resources created once.
// Kept on globalThis because Next may evaluate this module in more than one bundle.
import 'server-only';
import type pg from 'pg';
import { createPool } from '@/db/client';
import { requireDatabaseUrl } from '@/server/config';

interface Runtime {
  ownerPool: pg.Pool;
}

const slot = Symbol.for('retrysafe.runtime');
type Holder = typeof globalThis & { [slot]?: Runtime };

export function runtime(): Runtime {
  const holder = globalThis as Holder;
  holder[slot] ??= {
    ownerPool: createPool(requireDatabaseUrl(), { applicationName: 'retrysafe-app', max: 20, connectionTimeoutMillis: 2_000 }),
  };
  return holder[slot];
}
