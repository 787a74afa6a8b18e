#!/usr/bin/env bash
# tools/console_test.sh: tools/weft-console as a user runs it, in a terminal (tmux): attached to
# the echo example server (2 workers, --console, a fiber that computes 40 ms once a second)
# while the load driver floods it, the screen shows the workers, the parked fibers and what
# they wait on, and the busy fiber's stuck report; q quits. A server that did not opt in has no
# socket; another user cannot attach (when run as root: as nobody); the socket goes away when
# the server exits. Skips (passes, saying so) without tmux.
set -uo pipefail
root="${TEST_SRCDIR:-$(dirname "$0")/..}/${TEST_WORKSPACE:-weft}"
[ -d "$root/tools" ] || root="$(dirname "$0")/.."
command -v tmux >/dev/null || { echo "SKIP: no tmux (tools/apt_install.sh tmux)"; exit 0; }
# Under /tmp, short: a socket's path must fit in 108 bytes.
work="$(mktemp -d /tmp/weft-console-test.XXXXXX)"
chmod 755 "$work"
export WEFT_CONSOLE_DIR="$work/consoles" TMUX_TMPDIR="$work"
unset WEFT_CONSOLE
pids=()
cleanup() {
  tmux kill-server 2>/dev/null
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*" >&2
  [ -f "$work/screen" ] && { echo "--- screen:" >&2; cat "$work/screen" >&2; }
  exit 1
}

# A server that did not opt in exposes nothing.
"$root/examples/echo_server" --port 0 --port_file "$work/plain.port" --workers 1 2>"$work/plain.err" &
plain=$!
pids+=("$plain")
for _ in $(seq 1 500); do [ -s "$work/plain.port" ] && break; sleep 0.01; done
[ -s "$work/plain.port" ] || fail "the plain server did not start: $(cat "$work/plain.err")"
ls "$WEFT_CONSOLE_DIR"/*.sock >/dev/null 2>&1 && fail "a console socket without --console"
kill -TERM "$plain"
wait "$plain"

"$root/examples/echo_server" --port 0 --port_file "$work/echo.port" --workers 2 --console \
  --busy_ms 40 2>"$work/echo.err" &
server=$!
pids+=("$server")
for _ in $(seq 1 500); do [ -s "$work/echo.port" ] && break; sleep 0.01; done
[ -s "$work/echo.port" ] || fail "the server did not start: $(cat "$work/echo.err")"
sock="$(ls "$WEFT_CONSOLE_DIR"/"$server"-*.sock 2>/dev/null)"
[ -S "$sock" ] || fail "no console socket for $server in $WEFT_CONSOLE_DIR"
[ "$(stat -c %a "$sock")" = 600 ] || fail "socket mode $(stat -c %a "$sock"), want 600"
[ "$(stat -c %a "$WEFT_CONSOLE_DIR")" = 700 ] || fail "directory mode, want 700"

# Load: the driver floods the server for the rest of the test (rounds until killed).
"$root/examples/load_driver" --mode echo --port "$(cat "$work/echo.port")" --conns 50 \
  --messages 200000 --rounds 1000 --workers 1 >"$work/driver.out" 2>&1 &
pids+=("$!")

tmux new-session -d -s console -x 150 -y 40 \
  "WEFT_CONSOLE_DIR='$WEFT_CONSOLE_DIR' '$root/tools/weft-console' --interval 0.2 $server; sleep 30"
# The screen, once it shows a stuck report of the busy fiber (the server's monitor sees it
# within a second and a threshold; the cap only turns a hang into a failure).
ok=0
for _ in $(seq 1 300); do
  tmux capture-pane -p -t console >"$work/screen" 2>/dev/null
  # The busy fiber's longest run shows once one of its 40 ms runs has ended (the stuck report
  # comes during its first): wait for all three.
  if grep -q '"busy-loop" held worker' "$work/screen" && grep -q 'recv fd' "$work/screen" &&
    grep -q '^LONGEST    fiber [0-9]* "busy-loop"' "$work/screen"; then
    ok=1
    break
  fi
  sleep 0.1
done
[ "$ok" = 1 ] || fail "the console never showed the busy fiber, its longest run and the parked readers"
grep -q "^weft console  pid $server  2 workers" "$work/screen" || fail "no header"
grep -Eq '^WORKERS +busy +run/s' "$work/screen" || fail "no workers table"
grep -Eq '^0 .*(io_uring|epoll)' "$work/screen" || fail "no worker 0 line"
grep -Eq '^1 .*(io_uring|epoll)' "$work/screen" || fail "no worker 1 line"
grep -Eq '^FIBERS +.*parked [0-9]+' "$work/screen" || fail "no fiber states"
grep -Eq '^PARKED ON .*io recv fd [0-9]+' "$work/screen" || fail "no parked readers"
grep -q '^STUCK FIBERS' "$work/screen" || fail "no stuck section"
grep -q '"busy-loop" held worker .*spawned at weft/examples/server_main.h:[0-9]' "$work/screen" || fail "no spawn site"
grep -q '^LONG RUNS  >=' "$work/screen" || fail "no long-run histogram"
grep -q '^LONGEST    fiber [0-9]* "busy-loop"' "$work/screen" || fail "no longest runs"
cp "$work/screen" "${TEST_UNDECLARED_OUTPUTS_DIR:-$work}/console_screen.txt" 2>/dev/null

# q quits: the console's process ends (the pane then runs the sleep, no longer the console).
tmux send-keys -t console q
for _ in $(seq 1 100); do
  pgrep -f "weft-console --interval 0.2 $server" >/dev/null || break
  sleep 0.05
done
pgrep -f "weft-console --interval 0.2 $server" >/dev/null && fail "q did not quit the console"

# Another user: cannot reach the socket (the directory is 0700), and even with the directory and
# socket opened up, the server drops a peer that is not its own user.
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null; then
  as_nobody=(setpriv --reuid=65534 --regid=65534 --clear-groups)
  cp "$root/tools/weft-console" "$work/weft-console"  # where nobody may read it
  chmod 755 "$work/weft-console"
  if "${as_nobody[@]}" python3 "$work/weft-console" --once "$sock" >"$work/nobody.out" 2>&1; then
    fail "another user attached: $(cat "$work/nobody.out")"
  fi
  grep -q "cannot connect" "$work/nobody.out" || fail "nobody: $(cat "$work/nobody.out")"
  chmod 755 "$WEFT_CONSOLE_DIR"
  chmod 666 "$sock"
  if "${as_nobody[@]}" python3 "$work/weft-console" --once "$sock" >"$work/nobody.out" 2>&1; then
    fail "another user attached through an opened socket: $(cat "$work/nobody.out")"
  fi
  grep -q "closed the console" "$work/nobody.out" || fail "nobody (opened): $(cat "$work/nobody.out")"
  chmod 700 "$WEFT_CONSOLE_DIR"
  chmod 600 "$sock"
else
  echo "note: not root (or no setpriv): the second-user check is skipped"
fi

kill -TERM "$server"
wait "$server" || fail "the server did not exit cleanly: $(tail -5 "$work/echo.err")"
[ -e "$sock" ] && fail "the socket outlived the server"
echo PASS
