#!/usr/bin/env bash
# Starts llamatap in front of a working llama-server, then asks it one
# question, streamed, and prints the answer with its time to first token and
# to first sentence as llamatap measured them.
#
#   scripts/quickstart.sh                       # builds llamatap and llama-server if needed
#                                               # (about 20 minutes on 2 cores, once), fetches
#                                               # a small real model (SmolLM2-135M-Instruct,
#                                               # 98 MB, once), starts llama-server with it,
#                                               # then llamatap in front of it
#   scripts/quickstart.sh --model PATH          # the same with your own GGUF model
#   scripts/quickstart.sh --upstream URL        # use your own llama-server (its base URL)
#
# Ports (environment; all three are checked before anything is built):
#   LLAMATAP_PORT        proxy listener      (default 8080)
#   LLAMATAP_ADMIN_PORT  admin listener      (default 9464; /metrics, /latency)
#   LLAMA_SERVER_PORT    local llama-server  (default 8081)
#   LLAMATAP_HOST        bind address        (default 127.0.0.1)
#
# Binaries and model (environment):
#   LLAMATAP_BIN           a built llamatap binary (default: built by cargo build --release)
#   LLAMATAP_LLAMA_SERVER  a llama-server binary (default: built by scripts/ensure-deps.sh)
#   LLAMATAP_MODEL         a GGUF model, as --model PATH (default: SmolLM2-135M-Instruct,
#                          fetched by scripts/install-real-model.sh into ~/.cache/llamatap)
#   LLAMATAP_QUESTION      the first question (default "What is the capital of France?";
#                          empty: none asked)
#
# Stopping: SIGTERM or SIGINT sent to this script (as `kill`, `timeout` or a
# supervisor sends it) stops llamatap with SIGTERM (it drains for up to its
# grace period, 10 s by default), then the llama-server this script started,
# and exits with 143 or 130. Ctrl-C in a terminal reaches all three: llamatap
# exits at once, then the script stops llama-server. If llamatap exits on its
# own, the script stops llama-server and exits with llamatap's status.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

HOST="${LLAMATAP_HOST:-127.0.0.1}"
PORT="${LLAMATAP_PORT:-8080}"
ADMIN_PORT="${LLAMATAP_ADMIN_PORT:-9464}"
LLAMA_PORT="${LLAMA_SERVER_PORT:-8081}"
QUESTION="${LLAMATAP_QUESTION-What is the capital of France?}"

log() { echo "quickstart: $*" >&2; }

upstream=""
model="${LLAMATAP_MODEL:-}"
while [ $# -gt 0 ]; do
  case "$1" in
    --upstream) upstream="${2:?--upstream needs a URL}"; shift 2 ;;
    --upstream=*) upstream="${1#--upstream=}"; shift ;;
    --model) model="${2:?--model needs a path}"; shift 2 ;;
    --model=*) model="${1#--model=}"; shift ;;
    -h|--help) sed -n '2,33{s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
    *) log "unknown argument: $1 (try --help)"; exit 2 ;;
  esac
done

if [ -n "$upstream" ] && [ -n "$model" ]; then
  log "--model (or LLAMATAP_MODEL) starts a llama-server; --upstream uses yours: give one of them"
  exit 2
fi
if [ -n "$model" ] && [ ! -f "$model" ]; then
  log "no model file at $model (--model or LLAMATAP_MODEL: a .gguf file)"
  exit 1
fi

llama_pid=""
tap_pid=""
ask_pid=""
# Stops the question, llamatap (SIGTERM: it drains), then llama-server,
# waiting for each.
cleanup() {
  trap '' INT TERM
  stop "$ask_pid" "the first question"
  stop "$tap_pid" llamatap
  stop "$llama_pid" llama-server
}
stop() {
  if [ -n "$1" ] && kill -0 "$1" 2>/dev/null; then
    log "stopping $2 (pid $1)"
    kill -TERM "$1" 2>/dev/null || true
    wait "$1" 2>/dev/null || true
  fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Whether something accepts connections on 127.0.0.1:$1.
in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# Before any build or download: every port this script will listen on must
# be free (llama-server's only when it starts one).
ports=("$PORT:LLAMATAP_PORT" "$ADMIN_PORT:LLAMATAP_ADMIN_PORT")
if [ -z "$upstream" ]; then
  ports+=("$LLAMA_PORT:LLAMA_SERVER_PORT (or pass --upstream)")
fi
for p in "${ports[@]}"; do
  if in_use "${p%%:*}"; then
    log "something already listens on port ${p%%:*}; stop it or set ${p#*:} (see --help)"
    exit 1
  fi
done

# Built first, so that llamatap starts at once once llama-server is up.
if [ -n "${LLAMATAP_BIN:-}" ]; then
  llamatap=("$LLAMATAP_BIN")
else
  log "building llamatap (cargo build --release; cargo shows its progress below)"
  cargo build --release --bin llamatap
  llamatap=(cargo run --release --quiet --bin llamatap --)
fi

if [ -z "$upstream" ]; then
  # Your model: its own chat template, llama-server's default threads.
  # The bundled one: plain ChatML (its own template adds a default system
  # prompt that makes a 135M model ramble) on one thread (plenty for it,
  # and it leaves the other cores alone).
  llama_args=()
  if [ -z "$model" ]; then
    llama_args=(--chat-template chatml -t 1)
  fi
  bin="${LLAMATAP_LLAMA_SERVER:-}"
  if [ -z "$bin" ]; then
    deps="$(scripts/ensure-deps.sh --minimal)"
    bin="$(sed -n 's/^LLAMATAP_LLAMA_SERVER=//p' <<<"$deps")"
    [ -n "$model" ] || model="$(sed -n 's/^LLAMATAP_REAL_MODEL=//p' <<<"$deps")"
  fi
  if [ -z "$model" ]; then
    model="$(scripts/install-real-model.sh)"
  fi

  if in_use "$LLAMA_PORT"; then
    log "something already listens on 127.0.0.1:$LLAMA_PORT; set LLAMA_SERVER_PORT or pass --upstream"
    exit 1
  fi

  llama_log="${TMPDIR:-/tmp}/llamatap-quickstart-llama-server.log"
  log "starting llama-server on 127.0.0.1:$LLAMA_PORT with $model (log: $llama_log)"
  # The model's file name is its name in llamatap (llama-server falls back
  # to ChatML for a file with no chat template).
  "$bin" -m "$model" --host 127.0.0.1 --port "$LLAMA_PORT" "${llama_args[@]}" \
    --cache-ram 0 --metrics --slots --alias "$(basename "$model")" >"$llama_log" 2>&1 &
  llama_pid=$!

  for _ in $(seq 1 600); do
    if curl -fsS --max-time 1 "http://127.0.0.1:$LLAMA_PORT/health" 2>/dev/null | grep -q '"ok"'; then
      break
    fi
    if ! kill -0 "$llama_pid" 2>/dev/null; then
      log "llama-server exited; last lines of $llama_log:"
      tail -n 20 "$llama_log" >&2
      exit 1
    fi
    sleep 0.2
  done
  if ! curl -fsS --max-time 1 "http://127.0.0.1:$LLAMA_PORT/health" 2>/dev/null | grep -q '"ok"'; then
    log "llama-server did not become healthy in 2 minutes; see $llama_log"
    exit 1
  fi
  upstream="http://127.0.0.1:$LLAMA_PORT"
fi

# In the background, then `wait`: bash runs the INT and TERM traps only once
# a foreground command has returned, but they do interrupt `wait`.
"${llamatap[@]}" \
  --upstream "$upstream" --listen "$HOST:$PORT" --admin-listen "127.0.0.1:$ADMIN_PORT" &
tap_pid=$!

# The first question, once llamatap is ready: streamed through it, the
# answer printed as it arrives, then llamatap's own figures for it.
if [ -n "$QUESTION" ]; then
  if command -v python3 >/dev/null 2>&1; then
    python3 "$ROOT/scripts/lib/first-question.py" "$HOST:$PORT" "127.0.0.1:$ADMIN_PORT" "$QUESTION" "$tap_pid" &
    ask_pid=$!
    wait "$ask_pid" || log "the first question was not answered (llamatap keeps running)"
    ask_pid=""
  else
    log "python3 not found: no first question asked (llamatap runs all the same)"
  fi
fi

cat >&2 <<EOF

  llamatap:      http://$HOST:$PORT  ->  $upstream
  metrics:       http://127.0.0.1:$ADMIN_PORT/metrics
  latency page:  http://127.0.0.1:$ADMIN_PORT/latency

  Ask your own (in another terminal):

    curl -N http://$HOST:$PORT/v1/chat/completions \\
      -H 'Content-Type: application/json' \\
      -d '{"messages":[{"role":"user","content":"Hello"}],"stream":true,"max_tokens":32}'

  Then look at the counts (requests, and how many reached each stage):

    curl -s http://127.0.0.1:$ADMIN_PORT/metrics | grep -E '^llamatap_(requests_total|stage_duration_seconds_count)' | grep -v ' 0\$'

  and at the latency page: open http://127.0.0.1:$ADMIN_PORT/latency in a browser.

EOF

status=0
wait "$tap_pid" || status=$?
tap_pid=""
log "llamatap exited with status $status"
exit "$status"
