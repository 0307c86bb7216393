// Prometheus's own binaries (Debian's `prometheus` package: /usr/bin/prometheus and
// /usr/bin/promtool), found on PATH; null when absent, so a test can skip and say why.
import { accessSync, constants } from 'node:fs';
import { delimiter, join } from 'node:path';

function onPath(name: string): string | null {
  for (const folder of (process.env.PATH ?? '').split(delimiter)) {
    if (!folder) continue;
    const candidate = join(folder, name);
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {
      // not here
    }
  }
  return null;
}

export const promtoolPath = (): string | null => onPath('promtool');
export const prometheusPath = (): string | null => onPath('prometheus');
