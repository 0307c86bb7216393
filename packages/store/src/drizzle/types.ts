// Column types Drizzle 0.45 does not ship.
import { customType } from 'drizzle-orm/pg-core';

/** Raw bytes. node-postgres returns bytea as a Buffer and accepts a Buffer as a parameter. */
export const bytea = customType<{ data: Buffer; driverData: Buffer }>({
  dataType: () => 'bytea',
});
