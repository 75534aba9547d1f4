# Sourced by the install scripts: runs a noisy command (cmake, ninja, pip,
# apt-get) with all its output in a log file, and shows only a few progress
# lines on stderr. Never writes to stdout, so a script's stdout stays its own.
#
#   . "$ROOT/scripts/lib/run-logged.sh"
#   run_logged "$CACHE/build.log" "building llama-server" cmake --build build
#
# Progress: ninja's `[N/M]` lines at each further tenth of the build, and a
# line every RUN_LOGGED_INTERVAL seconds (default 30) while output keeps
# coming. On failure: the log's last 40 lines and its path, and the command's
# exit status is returned.

# run_logged LOG WHAT COMMAND [ARG...]
run_logged() {
  local -
  set -o pipefail
  local log="$1" what="$2"
  shift 2
  local prefix="${RUN_LOGGED_PREFIX:-${0##*/}}"
  prefix="${prefix%.sh}"
  mkdir -p "$(dirname "$log")"
  echo "$prefix: $what (output in $log)" >&2
  echo "=== $(date -u +%FT%TZ) $what: $*" >>"$log"
  local rc=0
  "$@" </dev/null 2>&1 | _run_logged_progress "$prefix" 3>>"$log" || rc=$?
  if [ "$rc" != 0 ]; then
    echo "--- last 40 lines of $log ---" >&2
    tail -n 40 "$log" >&2
    echo "$prefix: $what failed (exit $rc); full log: $log" >&2
  fi
  return "$rc"
}

# Copies stdin to fd 3, line by line, printing progress on stderr.
_run_logged_progress() {
  local prefix="$1" interval="${RUN_LOGGED_INTERVAL:-30}"
  local line lines=0 next=10 last=$SECONDS n total pct
  while IFS= read -r line || [ -n "$line" ]; do
    printf '%s\n' "$line" >&3
    lines=$((lines + 1))
    if [[ "$line" =~ ^\[([0-9]+)/([0-9]+)\] ]]; then
      n="${BASH_REMATCH[1]}"
      total="${BASH_REMATCH[2]}"
      pct=$((total > 0 ? n * 100 / total : 0))
      if [ "$pct" -ge "$next" ] || [ $((SECONDS - last)) -ge "$interval" ]; then
        echo "$prefix:   [$n/$total] $pct%" >&2
        last=$SECONDS
        next=$((pct / 10 * 10 + 10))
      fi
    elif [ $((SECONDS - last)) -ge "$interval" ]; then
      echo "$prefix:   still running ($lines lines of output so far)" >&2
      last=$SECONDS
    fi
  done
}
