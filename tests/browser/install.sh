#!/usr/bin/env bash
# Installs what check.js and devtools.mjs need, idempotently: Debian's chromium (only when
# /usr/bin/chromium is missing) and the pinned npm packages from
# package-lock.json (only when node_modules is missing or incomplete).
# Needs root (or sudo) for apt, and Node >= 20 with npm on PATH.
set -euo pipefail
cd "$(dirname "$0")"

SUDO=
if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then SUDO=sudo; fi

if [ ! -x /usr/bin/chromium ]; then
  echo "install.sh: installing chromium (apt)" >&2
  $SUDO apt-get update -q
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium
fi

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "install.sh: node and npm are needed (Node >= 20)" >&2
  exit 1
fi
node_major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$node_major" -lt 20 ]; then
  echo "install.sh: Node >= 20 is needed (playwright-core), found $(node --version)" >&2
  exit 1
fi

if [ ! -f node_modules/speedscope/dist/release/index.html ] || [ ! -f node_modules/playwright-core/package.json ] \
    || [ ! -f node_modules/chrome-devtools-frontend/package.json ] || [ ! -f node_modules/esbuild/package.json ]; then
  echo "install.sh: installing npm packages (npm ci)" >&2
  npm ci --no-audit --no-fund --loglevel=error
fi
