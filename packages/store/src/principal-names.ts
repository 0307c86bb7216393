// Principal display names: what the dashboard shows for a principal id (its principals table,
// the /keys search). One name per principal, the same for every service; naming again renames.
import { isStorableText, UNSTORABLE_TEXT } from './storable.js';
import type { Queryable } from './statements.js';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** Names (or renames) a principal; refuses an id that is not a UUID and a name of 0 or over 200 characters. */
export async function namePrincipal(db: Queryable, principalId: string, name: string): Promise<void> {
  if (!UUID.test(principalId)) throw new TypeError('principalId must be a UUID');
  const trimmed = name.trim();
  if (trimmed.length < 1 || Array.from(trimmed).length > 200) throw new RangeError('a principal name must be 1 to 200 characters');
  if (!isStorableText(trimmed)) throw new RangeError(`a principal name ${UNSTORABLE_TEXT}`);
  // The primary key serves the upsert.
  await db.query({
    name: 'retrysafe_name_principal',
    text: `INSERT INTO retrysafe.principal_names (principal_id, name) VALUES ($1, $2)
           ON CONFLICT (principal_id) DO UPDATE SET name = EXCLUDED.name, updated_at = now()`,
    values: [principalId, trimmed],
  });
}
