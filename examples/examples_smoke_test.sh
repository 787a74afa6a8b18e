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

# shellcheck source=examples/drive_server.sh
source "$dir/drive_server.sh"
run() {  # name server [server flags...] -- driver flags...
  local name="$1"
  drive_server "$name" "$2" "$driver" "$tmp" "${@:3}" ||
    { echo "$name: the load driver's gate failed, or the server did not exit cleanly" >&2; exit 1; }
  echo "$name: ok"
}

# With clients that churn (vanish, half-close, stop reading, reconnect): tools/soak.sh's rounds.
run echo "$echo_server" -- --mode echo --conns 50 --messages 200 --rounds 2 --churn 4
run chat "$chat_server" -- --mode chat --conns 20 --messages 50 --rounds 2 --churn 4
# A client that joins and never reads: the server evicts it after its outbox (64 lines) stays
# full for the grace, and the other clients get every line meanwhile. The grace is a second, so
# that a well-behaved client slowed by a sanitizer on a loaded machine is not taken for a slow one.
run chat-slow "$chat_server" --outbox 64 --slow_grace_ms 1000 -- \
  --mode chat --conns 10 --messages 400 --line_bytes 2000 --stall 1
grep -q '"stalled_disconnected":1' "$tmp/chat-slow.json" ||
  { echo "chat-slow: the stalled client was not disconnected" >&2; exit 1; }
