// Operator accounts for the dashboard, in the shape better-auth's Drizzle adapter expects
// (its user, session, account and verification models; the adapter finds columns by these
// property names), plus the sign-in throttle. The dashboard's database role reads operators and
// writes the throttle; operators, credentials and sessions it writes (and reads credentials and
// sessions) only through the SECURITY DEFINER functions. The Retrysafe server's tables (schema
// retrysafe_server, db/server-migrations 0001), not the store's: an adopting service has none.
import { sql } from 'drizzle-orm';
import { boolean, check, index, integer, text, timestamp } from 'drizzle-orm/pg-core';
import { retrysafeServer } from './schemas';

export const operatorRoles = ['viewer', 'operator', 'compliance', 'admin'] as const;
export type OperatorRole = (typeof operatorRoles)[number];

const at = (name: string) => timestamp(name, { withTimezone: true });

export const operators = retrysafeServer.table(
  'operators',
  {
    id: text('id').primaryKey(),
    name: text('name').notNull(),
    email: text('email').notNull().unique('operators_email_key'),
    emailVerified: boolean('email_verified').notNull().default(false),
    image: text('image'),
    createdAt: at('created_at').notNull().defaultNow(),
    updatedAt: at('updated_at').notNull().defaultNow(),
    // viewer < operator < compliance < admin; each includes the ones before it.
    role: text('role').notNull().default('viewer'),
    // A disabled operator: no new session, and every live one is deleted in the same transaction.
    banned: boolean('banned').notNull().default(false),
    banReason: text('ban_reason'),
    banExpires: at('ban_expires'),
  },
  (t) => [check('operators_role', sql`${t.role} IN ('viewer', 'operator', 'compliance', 'admin')`)],
);

export const operatorSessions = retrysafeServer.table(
  'operator_sessions',
  {
    id: text('id').primaryKey(),
    expiresAt: at('expires_at').notNull(),
    // The SHA-256 (hex) of the token the cookie carries (signed); every request looks the session
    // up by it (server/auth/operator-store.ts). The token itself is never stored.
    token: text('token').notNull().unique('operator_sessions_token_key'),
    createdAt: at('created_at').notNull().defaultNow(),
    updatedAt: at('updated_at').notNull().defaultNow(),
    ipAddress: text('ip_address'),
    userAgent: text('user_agent'),
    userId: text('user_id')
      .notNull()
      .references(() => operators.id, { onDelete: 'cascade' }),
    impersonatedBy: text('impersonated_by'),
  },
  // Serves "end every session of this operator" (disable, sign-out everywhere).
  (t) => [index('operator_sessions_user_id_idx').on(t.userId)],
);

export const operatorAccounts = retrysafeServer.table(
  'operator_accounts',
  {
    id: text('id').primaryKey(),
    accountId: text('account_id').notNull(),
    providerId: text('provider_id').notNull(),
    userId: text('user_id')
      .notNull()
      .references(() => operators.id, { onDelete: 'cascade' }),
    accessToken: text('access_token'),
    refreshToken: text('refresh_token'),
    idToken: text('id_token'),
    accessTokenExpiresAt: at('access_token_expires_at'),
    refreshTokenExpiresAt: at('refresh_token_expires_at'),
    scope: text('scope'),
    // argon2id PHC string (provider "credential").
    password: text('password'),
    createdAt: at('created_at').notNull().defaultNow(),
    updatedAt: at('updated_at').notNull().defaultNow(),
  },
  // Serves the credential lookup at sign-in (by operator).
  (t) => [index('operator_accounts_user_id_idx').on(t.userId)],
);

export const operatorVerifications = retrysafeServer.table(
  'operator_verifications',
  {
    id: text('id').primaryKey(),
    identifier: text('identifier').notNull(),
    value: text('value').notNull(),
    expiresAt: at('expires_at').notNull(),
    createdAt: at('created_at').notNull().defaultNow(),
    updatedAt: at('updated_at').notNull().defaultNow(),
  },
  (t) => [index('operator_verifications_identifier_idx').on(t.identifier)],
);

export const signInThrottle = retrysafeServer.table(
  'sign_in_throttle',
  {
    // "email:<address>" or "ip:<address>": failures are counted for both.
    subject: text('subject').primaryKey(),
    failures: integer('failures').notNull(),
    windowStartedAt: at('window_started_at').notNull(),
    lockedUntil: at('locked_until'),
  },
  () => [],
);
