// Checks the links between the documentation pages: every relative link in README.md,
// docs/*.md and packages/store/CHANGELOG.md names a file that exists and, with a #fragment
// into a Markdown page, a heading of that page (GitHub's anchors). Exits 1 listing the
// broken ones. Run with `node scripts/check-doc-links.mjs`.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, normalize } from 'node:path';

const pages = ['README.md', 'packages/store/CHANGELOG.md', ...readdirSync('docs').filter((name) => name.endsWith('.md')).map((name) => join('docs', name))].filter((page) => existsSync(page));

/** GitHub's heading anchor: lower case, punctuation dropped, spaces to hyphens, repeats numbered. */
function anchorsOf(markdown) {
  const anchors = new Set();
  const seen = new Map();
  let fenced = false;
  for (const line of markdown.split('\n')) {
    if (line.startsWith('```')) fenced = !fenced;
    const heading = !fenced && /^#{1,6}\s+(.*)$/.exec(line);
    if (!heading) continue;
    const base = heading[1]
      .trim()
      .toLowerCase()
      .replace(/[^\p{L}\p{N}\s_-]/gu, '')
      .replace(/\s/g, '-');
    const count = seen.get(base) ?? 0;
    seen.set(base, count + 1);
    anchors.add(count === 0 ? base : `${base}-${count}`);
  }
  return anchors;
}

const withoutCode = (markdown) => markdown.replace(/```[\s\S]*?```/g, '').replace(/`[^`\n]*`/g, '');
const broken = [];
for (const page of pages) {
  const text = readFileSync(page, 'utf8');
  for (const [, target] of withoutCode(text).matchAll(/\]\(([^)\s]+)\)/g)) {
    if (/^[a-z]+:/i.test(target)) continue; // http(s):, mailto:
    const [path, fragment] = target.split('#');
    const file = path === '' ? page : normalize(join(dirname(page), path));
    if (!existsSync(file)) {
      broken.push(`${page}: ${target} (no file ${file})`);
      continue;
    }
    if (fragment !== undefined && file.endsWith('.md') && !anchorsOf(readFileSync(file, 'utf8')).has(fragment)) {
      broken.push(`${page}: ${target} (no heading #${fragment} in ${file})`);
    }
  }
}
if (broken.length > 0) {
  process.stderr.write(`${broken.length} broken documentation link(s):\n${broken.map((line) => `  ${line}`).join('\n')}\n`);
  process.exit(1);
}
process.stdout.write(`documentation links: ${pages.length} pages, none broken\n`);
