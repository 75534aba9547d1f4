#!/usr/bin/env bash
# Starts llamatap in front of a working llama-server.
#
#   scripts/quickstart.sh                       # builds llamatap and llama-server if needed
#                                               # (about 20 minutes on 2 cores, once), starts
#                                               # it with a tiny random model, then
#                                               # runs llamatap in front of it
#   scripts/quickstart.sh --upstream URL        # use your own llama-server
#
# Ports (environment):
#   LLAMATAP_PORT        proxy listener      (default 8080)
#   LLAMATAP_ADMIN_PORT  admin listener      (default 9464; /metrics, /latency)
#   LLAMA_SERVER_PORT    local llama-server  (default 8081)
#   LLAMATAP_HOST        bind address        (default 127.0.0.1)
#
# Binaries and model (environment):
#   LLAMATAP_BIN           a built llamatap binary (default: built by cargo build --release)
#   LLAMATAP_LLAMA_SERVER  llama-server binary } both set: used as they are,
#   LLAMATAP_TINY_MODEL    model file (.gguf)  } scripts/ensure-deps.sh is skipped
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

log() { echo "quickstart: $*" >&2; }

upstream=""
while [ $# -gt 0 ]; do
  case "$1" in
    --upstream) upstream="${2:?--upstream needs a URL}"; shift 2 ;;
    --upstream=*) upstream="${1#--upstream=}"; shift ;;
    -h|--help) sed -n '2,26{s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
    *) log "unknown argument: $1 (try --help)"; exit 2 ;;
  esac
done

llama_pid=""
tap_pid=""
# Stops llamatap (SIGTERM: it drains), then llama-server, waiting for each.
cleanup() {
  trap '' INT TERM
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

# Before any build or download: llamatap's own ports must be free.
for p in "$PORT:LLAMATAP_PORT" "$ADMIN_PORT:LLAMATAP_ADMIN_PORT"; do
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
  bin="${LLAMATAP_LLAMA_SERVER:-}"
  model="${LLAMATAP_TINY_MODEL:-}"
  if [ -z "$bin" ] || [ -z "$model" ]; then
    deps="$(scripts/ensure-deps.sh --minimal)"
    bin="$(sed -n 's/^LLAMATAP_LLAMA_SERVER=//p' <<<"$deps")"
    model="$(sed -n 's/^LLAMATAP_TINY_MODEL=//p' <<<"$deps")"
  fi

  if in_use "$LLAMA_PORT"; then
    log "something already listens on 127.0.0.1:$LLAMA_PORT; set LLAMA_SERVER_PORT or pass --upstream"
    exit 1
  fi

  llama_log="${TMPDIR:-/tmp}/llamatap-quickstart-llama-server.log"
  log "starting llama-server on 127.0.0.1:$LLAMA_PORT with $model (log: $llama_log)"
  "$bin" -m "$model" --host 127.0.0.1 --port "$LLAMA_PORT" \
    --chat-template chatml --cache-ram 0 -t 1 --metrics --slots --alias tiny.gguf >"$llama_log" 2>&1 &
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

cat >&2 <<EOF

  llamatap:      http://$HOST:$PORT  ->  $upstream
  metrics:       http://127.0.0.1:$ADMIN_PORT/metrics
  latency page:  http://127.0.0.1:$ADMIN_PORT/latency

  Try a streamed chat (in another terminal, once llamatap logs
  "llamatap listening on"):

    curl -N http://$HOST:$PORT/v1/chat/completions \\
      -H 'Content-Type: application/json' \\
      -d '{"messages":[{"role":"user","content":"Hello"}],"stream":true,"max_tokens":32}'

  Then look at the counts (requests, and how many reached each stage):

    curl -s http://127.0.0.1:$ADMIN_PORT/metrics | grep -E '^llamatap_(requests_total|stage_duration_seconds_count)' | grep -v ' 0\$'

  and at the latency page: open http://127.0.0.1:$ADMIN_PORT/latency in a browser.

EOF

# In the background, then `wait`: bash runs the INT and TERM traps only once
# a foreground command has returned, but they do interrupt `wait`.
"${llamatap[@]}" \
  --upstream "$upstream" --listen "$HOST:$PORT" --admin-listen "127.0.0.1:$ADMIN_PORT" &
tap_pid=$!
status=0
wait "$tap_pid" || status=$?
tap_pid=""
log "llamatap exited with status $status"
exit "$status"
