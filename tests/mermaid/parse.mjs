// Mermaid's own parser over diagrams given as a JSON list on stdin: prints a JSON list, per diagram
// {"ok": true, "type": <diagram type>} or {"ok": false, "error": <first line of the parser's error>}.
// Mermaid's parse sanitizes with DOMPurify, which needs a DOM: jsdom gives it one. The packages are
// those scripts/install-mermaid.sh installs (their folder: PERFGATE_MERMAID_DIR, default
// .cache/mermaid), found through NODE_PATH.
import { createRequire } from 'node:module';
import { readFileSync } from 'node:fs';
import path from 'node:path';

const dir = process.env.PERFGATE_MERMAID_DIR;
const require = createRequire(path.join(dir, 'node_modules', 'x.js'));
const { JSDOM } = require('jsdom');
const dom = new JSDOM('<!DOCTYPE html><body></body>');
globalThis.window = dom.window;
globalThis.document = dom.window.document;
const { default: mermaid } = await import(require.resolve('mermaid'));
const out = [];
for (const text of JSON.parse(readFileSync(0, 'utf8'))) {
  try {
    const parsed = await mermaid.parse(text);
    out.push({ ok: true, type: parsed.diagramType });
  } catch (e) {
    out.push({ ok: false, error: String(e.message || e).split('\n')[0] });
  }
}
process.stdout.write(JSON.stringify(out));
