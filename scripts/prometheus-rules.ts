// npm run prometheus:rules [-- --out FILE | --stdout]: writes the Prometheus rule file from the
// dashboard's alert thresholds (ALERT_THRESHOLDS overrides them, as on the server) with each
// runbook_url under RUNBOOK_BASE_URL (default: docs/operating.md, relative). With neither set it
// writes the committed monitoring/prometheus/retrysafe-alerts.yml.
import { writeFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { z } from 'zod';
import { alertThresholdOverrides, thresholdsWith } from '../server/metrics/alerts';
import { defaultRuleFileOptions, prometheusRuleFile } from '../server/metrics/prometheus-rules';

export const RULE_FILE_PATH = 'monitoring/prometheus/retrysafe-alerts.yml';

const parsed = z
  .object({
    ALERT_THRESHOLDS: z
      .string()
      .optional()
      .transform((value, context) => {
        try {
          return value ? (JSON.parse(value) as unknown) : {};
        } catch {
          context.addIssue({ code: 'custom', message: 'must be a JSON object' });
          return z.NEVER;
        }
      })
      .pipe(alertThresholdOverrides),
    RUNBOOK_BASE_URL: z.string().min(1).optional(),
  })
  .safeParse(Object.fromEntries(Object.entries(process.env).filter(([, value]) => value !== '')));
if (!parsed.success) {
  console.error(`prometheus:rules: ${parsed.error.issues.map((issue) => `${issue.path.join('.')}: ${issue.message}`).join('; ')}`);
  process.exit(1);
}
const environment = parsed.data;

const text = prometheusRuleFile(thresholdsWith(environment.ALERT_THRESHOLDS), {
  ...defaultRuleFileOptions,
  runbookBaseUrl: environment.RUNBOOK_BASE_URL ?? defaultRuleFileOptions.runbookBaseUrl,
});
const args = process.argv.slice(2);
if (args.includes('--stdout')) {
  process.stdout.write(text);
} else {
  const outAt = args.indexOf('--out');
  const out = resolve((outAt >= 0 ? args[outAt + 1] : undefined) ?? RULE_FILE_PATH);
  writeFileSync(out, text);
  console.error(`wrote ${out}`);
}
