#!/usr/bin/env bash
# Installs Mermaid's own parser for the tests that check perfgate's Mermaid charts
# (tests/report/test_report_mermaid.py, tests/mermaid/parse.mjs): mermaid and jsdom, pinned, from the npm
# registry into PERFGATE_MERMAID_DIR (default .cache/mermaid in this repository), with Node.js
# from Debian's packages when the machine has none. Idempotent; used by .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${PERFGATE_MERMAID_DIR:-.cache/mermaid}
MERMAID=11.17.2
JSDOM=29.1.1
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  command -v apt-get >/dev/null 2>&1 || { echo "install-mermaid: no node/npm and no apt-get: install Node.js 18+" >&2; exit 2; }
  apt-get update -qq && apt-get install -y -qq nodejs npm >/dev/null
fi
have() { node -e "process.exit(require(require('path').resolve('$dir/node_modules/$1/package.json')).version === '$2' ? 0 : 1)" 2>/dev/null; }
if have mermaid "$MERMAID" && have jsdom "$JSDOM"; then
  echo "install-mermaid: mermaid $MERMAID and jsdom $JSDOM already in $dir"
  exit 0
fi
mkdir -p "$dir"
[ -f "$dir/package.json" ] || echo '{"private": true}' > "$dir/package.json"
npm install --prefix "$dir" --no-audit --no-fund --silent "mermaid@$MERMAID" "jsdom@$JSDOM"
echo "install-mermaid: mermaid $MERMAID and jsdom $JSDOM in $dir (node $(node --version))"
