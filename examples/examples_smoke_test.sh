#!/bin/bash
# Runs the tour, then starts the echo and chat example servers on free ports, floods each with the load driver
# (exact delivery, server fds back to their baseline after each round), then stops them with
# SIGTERM and checks they exit cleanly. When fds stay open, the driver prints them and the
# server's live fibers (the example servers dump them on SIGUSR1).
set -euo pipefail
dir="$(dirname "$0")"
echo_server="$dir/echo_server"
chat_server="$dir/chat_server"
driver="$dir/load_driver"
"$dir/tour" >/dev/null  # the docs/api.md tour checks its own results
tmp="${TEST_TMPDIR:-$(mktemp -d)}"

run() {  # name server driver-args... (server_args: extra server flags)
  local name="$1" server="$2"
  shift 2
  rm -f "$tmp/$name.port"
  # shellcheck disable=SC2086
  "$server" --port 0 --workers 2 --port_file "$tmp/$name.port" ${server_args:-} &
  local pid=$!
  for _ in $(seq 1 500); do [ -s "$tmp/$name.port" ] && break; sleep 0.01; done
  local port
  port="$(cat "$tmp/$name.port")"
  local status=0
  "$driver" --port "$port" --server_pid "$pid" --workers 2 "$@" | tee "$tmp/$name.json" || status=$?
  kill -TERM "$pid"  # also when the driver failed: the server prints its counts as it exits
  wait "$pid"
  [ "$status" = 0 ] || { echo "$name: the load driver's gate failed" >&2; exit 1; }
  echo "$name: ok"
}

# With clients that churn (vanish, half-close, stop reading, reconnect): tools/soak.sh's rounds.
run echo "$echo_server" --mode echo --conns 50 --messages 200 --rounds 2 --churn 4
run chat "$chat_server" --mode chat --conns 20 --messages 50 --rounds 2 --churn 4
# A client that joins and never reads: the server evicts it after its outbox (64 lines) stays
# full for the grace, and the other clients get every line meanwhile. The grace is a second, so
# that a well-behaved client slowed by a sanitizer on a loaded machine is not taken for a slow one.
server_args="--outbox 64 --slow_grace_ms 1000" \
  run chat-slow "$chat_server" --mode chat --conns 10 --messages 400 --line_bytes 2000 --stall 1
grep -q '"stalled_disconnected":1' "$tmp/chat-slow.json" ||
  { echo "chat-slow: the stalled client was not disconnected" >&2; exit 1; }
