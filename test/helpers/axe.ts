// axe-core in a page under test: its source is evaluated in the page (through the DevTools
// protocol, so the page's Content-Security-Policy does not have to allow it) and run on the
// whole document; any violation fails the test, listed with its rule, impact and elements.
import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import type { Page } from 'playwright-core';
import { expect } from 'vitest';

interface AxeViolation {
  id: string;
  impact: string | null;
  help: string;
  nodes: { target: unknown[]; failureSummary?: string }[];
}

let source: Promise<string> | undefined;
const axeSource = () => (source ??= readFile(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8'));

/** The page's accessibility violations by axe-core's WCAG 2.x A and AA rules and best practices. */
export async function axeViolations(page: Page): Promise<string[]> {
  // Next streams a dynamic page's metadata after its body: the <title> may arrive a moment
  // after the content a test waited for. Give it that moment (axe still fails a page without one).
  await page.waitForFunction(() => document.title !== '', undefined, { timeout: 10_000 }).catch(() => undefined);
  const loaded = await page.evaluate(() => 'axe' in window);
  if (!loaded) await page.evaluate(await axeSource());
  const violations = await page.evaluate(async () => {
    const axe = (window as unknown as { axe: { run: (context: Document, options: unknown) => Promise<{ violations: AxeViolation[] }> } }).axe;
    const result = await axe.run(document, { resultTypes: ['violations'], runOnly: { type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa', 'best-practice'] } });
    return result.violations.map((violation) => ({ id: violation.id, impact: violation.impact, help: violation.help, nodes: violation.nodes.map((node) => ({ target: node.target, failureSummary: node.failureSummary })) }));
  });
  return violations.map((violation) => `${violation.id} (${violation.impact ?? 'n/a'}): ${violation.help} at ${violation.nodes.map((node) => `${JSON.stringify(node.target)} ${node.failureSummary ?? ''}`).join(' | ')}`);
}

/** Fails the test on any axe-core violation in the page's current state. `state` names it in the message. */
export async function expectAccessible(page: Page, state: string): Promise<void> {
  expect(await axeViolations(page), `axe-core violations on ${state}`).toEqual([]);
}
