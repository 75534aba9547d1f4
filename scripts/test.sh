#!/usr/bin/env bash
# The one test command of llamatap: installs what the tests need
# (scripts/ensure-deps.sh), then runs rustfmt, clippy and the whole test suite
# against a real llama-server. Exits non-zero on the first failure.
#
#   scripts/test.sh                  # everything
#   scripts/test.sh -- some_filter   # extra arguments go to `cargo test`
#
# LLAMATAP_LLAMA_SERVER / LLAMATAP_TINY_MODEL / LLAMATAP_REAL_MODEL / LLAMATAP_SLOW_MODEL /
# LLAMATAP_MEDIUM_MODEL / LLAMATAP_PYTHON (the venv's python, with `openai` and
# `kubernetes-validate`) /
# LLAMATAP_REDIS_SERVER / LLAMATAP_JAEGER / LLAMATAP_WEBUI (the built web UI,
# scripts/install-webui.sh), if set, override what
# ensure-deps.sh reports.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

if [ "${1:-}" = "--" ]; then
  shift
fi

step() { echo "==> $*" >&2; }

step "scripts/ensure-deps.sh"
deps="$(scripts/ensure-deps.sh)"
while IFS='=' read -r key value; do
  case "$key" in
    LLAMATAP_LLAMA_SERVER|LLAMATAP_TINY_MODEL|LLAMATAP_REAL_MODEL|LLAMATAP_SLOW_MODEL|LLAMATAP_MEDIUM_MODEL|LLAMATAP_PYTHON|LLAMATAP_REDIS_SERVER|LLAMATAP_JAEGER|LLAMATAP_WEBUI)
      # A value already in the environment wins (e.g. another llama-server build).
      export "$key=${!key:-$value}"
      echo "    $key=${!key}" >&2
      ;;
  esac
done <<<"$deps"

for var in LLAMATAP_LLAMA_SERVER LLAMATAP_TINY_MODEL LLAMATAP_REAL_MODEL LLAMATAP_SLOW_MODEL LLAMATAP_MEDIUM_MODEL LLAMATAP_PYTHON LLAMATAP_REDIS_SERVER LLAMATAP_JAEGER LLAMATAP_WEBUI; do
  if [ -z "${!var:-}" ]; then
    echo "test.sh: ensure-deps.sh did not report $var" >&2
    exit 1
  fi
done

# No incremental state: a one-off build gains nothing from it, and it roughly
# doubles the target directory on a machine whose free disk is not known.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"

step "cargo fmt --check"
cargo fmt --all --check

step "cargo clippy --workspace --all-targets -- -D warnings"
cargo clippy --workspace --all-targets -- -D warnings

step "cargo test --workspace --all-targets"
cargo test --workspace --all-targets "$@"

step "all checks passed"
