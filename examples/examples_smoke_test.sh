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

run() {  # name server driver-args...
  local name="$1" server="$2"
  shift 2
  rm -f "$tmp/$name.port"
  "$server" --port 0 --workers 2 --port-file "$tmp/$name.port" &
  local pid=$!
  for _ in $(seq 1 500); do [ -s "$tmp/$name.port" ] && break; sleep 0.01; done
  local port
  port="$(cat "$tmp/$name.port")"
  "$driver" --port "$port" --server-pid "$pid" --workers 2 "$@"
  kill -TERM "$pid"
  wait "$pid"
  echo "$name: ok"
}

run echo "$echo_server" --mode echo --conns 50 --messages 200 --rounds 2
run chat "$chat_server" --mode chat --conns 20 --messages 50 --rounds 2
