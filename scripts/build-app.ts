// `npm run build` (scripts/launch.mjs build --app): the store and the server bundle (already
// built by the launcher), then the Next app if it is missing or older than its sources, with
// the source stamp `npm start` checks, so a start after a build does not build again.
import { buildIfStale } from './build';

const outcome = await buildIfStale((line) => process.stderr.write(`[retrysafe] ${line}\n`));
process.stderr.write(`[retrysafe] App build: ${outcome}\n`);
