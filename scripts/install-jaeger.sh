#!/usr/bin/env bash
# Builds Jaeger (v2, the `jaeger` binary: OTLP in, query API out) from its Go
# module and caches the binary, for the test suite's real-Jaeger tests.
# Idempotent: a second run returns at once.
#
#   scripts/install-jaeger.sh        # prints the binary's path
#
# The version is pinned by tools/jaeger/go.mod and go.sum (a Go tool
# dependency: `go get -tool github.com/jaegertracing/jaeger/cmd/jaeger@v1.75.0`;
# `go install ...@version` refuses the module, whose go.mod has replace
# directives). The module cache goes to $LLAMATAP_CACHE/go. The build's
# output goes to $LLAMATAP_CACHE/install-jaeger.log; stderr shows a few
# progress lines, and on failure the log's last 40 lines.
#
# Cache directory: $LLAMATAP_CACHE (default ~/.cache/llamatap). Needs Go
# and the Go module proxy.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=lib/run-logged.sh
. "$ROOT/scripts/lib/run-logged.sh"

CACHE="${LLAMATAP_CACHE:-$HOME/.cache/llamatap}"
VERSION="$(sed -n 's/.*github\.com\/jaegertracing\/jaeger v\([0-9.]*\).*/\1/p' "$ROOT/tools/jaeger/go.mod" | head -n1)"
BIN="$CACHE/bin/jaeger"
STAMP="$CACHE/bin/jaeger.version"
LOG="$CACHE/install-jaeger.log"

log() { echo "install-jaeger: $*" >&2; }

if [ -x "$BIN" ] && [ "$(cat "$STAMP" 2>/dev/null)" = "$VERSION" ]; then
  echo "$BIN"
  exit 0
fi
# Go's own install directory, when it is not on the PATH.
if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
  PATH="/usr/local/go/bin:$PATH"
fi
if ! command -v go >/dev/null 2>&1; then
  log "go not found: install Go (https://go.dev/dl/), then run this again"
  exit 1
fi

mkdir -p "$CACHE/bin" "$CACHE/go"
: >"$LOG"
# An older local Go fetches the toolchain tools/jaeger/go.mod names from the
# module proxy (GOTOOLCHAIN=auto, Go's default).
export GOPATH="$CACHE/go" GOFLAGS=-mod=mod
log "building jaeger $VERSION from its Go module (once per machine)"
start=$SECONDS
cd "$ROOT/tools/jaeger"
run_logged "$LOG" "downloading jaeger's modules" go mod download
run_logged "$LOG" "compiling jaeger" \
  go build -v -o "$BIN.tmp" github.com/jaegertracing/jaeger/cmd/jaeger
mv "$BIN.tmp" "$BIN"
echo "$VERSION" >"$STAMP"
log "built $BIN ($VERSION) in $((SECONDS - start)) s"
echo "$BIN"
