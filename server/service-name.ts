// A service's name at the dashboard's trust boundary: the rule the key table's check and
// createRetrysafe enforce, so a bad name is a 400 naming the field, never a failed statement.
import { z } from 'zod';
import { SERVICE_NAME_PATTERN } from '@retrysafe/store';

export const serviceNameSchema = z
  .string()
  .regex(SERVICE_NAME_PATTERN, "a service name is 1 to 63 characters of a-z, 0-9, '.', '_' or '-', starting with a letter or digit");
