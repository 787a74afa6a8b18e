#!/bin/bash
# Runs the tour, then starts the echo and chat example servers on free ports, floods each with the load driver
# (exact delivery, server fds back to their baseline after each round), then stops them with
# SIGTERM and checks they exit cleanly; then stops each with live connections (SIGTERM, SIGINT)
# and checks that it drains them and exits 0. When fds stay open, the driver prints them and the
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
# The chat room's grace for a full outbox is a second, as below: the churners' chatter fills a
# talker's outbox too, and a talker slowed by a sanitizer on a loaded machine, evicted as slow,
# would take its unsent lines with it.
run echo "$echo_server" -- --mode echo --conns 50 --messages 200 --rounds 2 --churn 4
run chat "$chat_server" --slow_grace_ms 1000 -- --mode chat --conns 20 --messages 50 --rounds 2 --churn 4
# A client that joins and never reads: the server evicts it after its outbox (64 lines) stays
# full for the grace, and the other clients get every line meanwhile. The grace is a second, so
# that a well-behaved client slowed by a sanitizer on a loaded machine is not taken for a slow one.
run chat-slow "$chat_server" --outbox 64 --slow_grace_ms 1000 -- \
  --mode chat --conns 10 --messages 400 --line_bytes 2000 --stall 1
grep -q '"stalled_disconnected":1' "$tmp/chat-slow.json" ||
  { echo "chat-slow: the stalled client was not disconnected" >&2; exit 1; }

# Graceful shutdown with live connections: five clients connected, each served once (echo: its
# line back; chat: its welcome), then a signal: the server stops accepting, cancels the group of
# connection fibers, drains them, and exits 0, saying how many it drained.
shutdown_live() {  # name server signal
  local name="$1" server="$2" sig="$3" log="$tmp/$1-shutdown.log"
  rm -f "$tmp/$name.port"
  "$server" --port 0 --workers 2 --port_file "$tmp/$name.port" 2>"$log" &
  local pid=$! status=0 fd line i
  for _ in $(seq 1 500); do [ -s "$tmp/$name.port" ] && break; sleep 0.01; done
  local port
  port="$(cat "$tmp/$name.port")"
  local fds=()
  for i in 1 2 3 4 5; do
    exec {fd}<>"/dev/tcp/127.0.0.1/$port"
    fds+=("$fd")
    printf 'hello %d\n' "$i" >&"$fd"
    read -r -t 20 line <&"$fd" ||
      { echo "$name: connection $i got no reply" >&2; kill -KILL "$pid"; exit 1; }
  done
  kill "-$sig" "$pid"
  wait "$pid" || status=$?
  for fd in "${fds[@]}"; do exec {fd}>&-; done
  cat "$log" >&2
  [ "$status" -eq 0 ] || { echo "$name: exit status $status after SIG$sig" >&2; exit 1; }
  grep -q "draining 5 connections" "$log" && grep -q "stopped; 5 connections drained" "$log" ||
    { echo "$name: did not drain its 5 live connections" >&2; exit 1; }
  echo "$name: graceful shutdown on SIG$sig with 5 live connections: ok"
}
shutdown_live echo-shutdown "$echo_server" TERM
# SIGINT, which a shell's background job starts with ignored: the server's SignalSet takes it.
shutdown_live chat-shutdown "$chat_server" INT
