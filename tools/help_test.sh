#!/usr/bin/env bash
# tools/help_test.sh: weft's programs and scripts behave like tools: --help prints usage and exits
# 0 without doing the work, and a bad value (a word for a number, a negative count, an unknown
# flag) is an error with a message and a non-zero exit, never a silent default.
set -uo pipefail
root="${TEST_SRCDIR:-$(dirname "$0")/..}/${TEST_WORKSPACE:-weft}"
[ -d "$root/tools" ] || root="$(dirname "$0")/.."
dir="${TEST_TMPDIR:-$(mktemp -d)}"
failures=0

# expect STATUS WANT_TEXT COMMAND...: COMMAND exits with STATUS ("nonzero": any but 0) and prints
# WANT_TEXT (stdout or stderr), within 20 s (a program that ignored --help would start its work).
expect() {
  local want="$1" text="$2" got=0
  shift 2
  timeout 20 "$@" >"$dir/out" 2>&1 || got=$?
  if { [ "$want" = nonzero ] && [ "$got" = 0 ]; } || { [ "$want" != nonzero ] && [ "$got" != "$want" ]; } ||
    ! grep -q -- "$text" "$dir/out"; then
    echo "FAIL: '$*' exited $got (want $want), output (want '$text'):" >&2
    head -20 "$dir/out" >&2
    failures=$((failures + 1))
  fi
}

expect 0 "WEFT_TEST_CONFIGS" "$root/tools/test_all.sh" --help
expect 2 "takes no arguments" "$root/tools/test_all.sh" --bogus
expect 0 "WEFT_SOAK_SCALE" "$root/tools/soak.sh" --help
expect 0 "pkgconfig" "$root/tools/install.sh" --help
expect 2 "PREFIX" "$root/tools/install.sh"
expect 0 "WEFT_SIM_SEED" "$root/tools/sim_explore" --help
expect 2 "take numbers" "$root/tools/sim_explore" --seeds many /bin/true
expect 2 "unknown flag" "$root/tools/sim_explore" --bogus /bin/true
expect 2 "no target" "$root/tools/sim_explore"

driver="$root/examples/load_driver"
expect 0 "--conns" "$driver" --help
expect nonzero "conns" "$driver" --mode echo --conns abc
expect 2 "--conns must be positive" "$driver" --mode echo --conns -1
expect 2 "--mode must be echo or chat" "$driver" --mode nope
expect nonzero "bogus" "$driver" --bogus 1
expect 2 "unexpected argument extra" "$driver" --mode echo extra
for server in echo_server chat_server; do
  expect 0 "--port_file" "$root/examples/$server" --help
  expect nonzero "port" "$root/examples/$server" --port seven
  expect 2 "--port must be 0..65535" "$root/examples/$server" --port 70000
done
expect 2 "--outbox must be" "$root/examples/chat_server" --outbox 0
expect 2 "--slow must be" "$root/examples/chat_server" --slow sometimes
expect 0 "--spin_ms" "$root/tools/stuck_worker" --help
expect 2 "--spin_ms must be" "$root/tools/stuck_worker" --spin_ms 1
expect 2 "--workers must be" "$root/tools/stuck_worker" --held --workers 0
expect 2 "--busy_ms must be" "$root/examples/echo_server" --busy_ms -5
expect 0 "--once" "$root/tools/weft-console" --help
expect 2 "--interval must be" "$root/tools/weft-console" --interval 0
expect 1 "no console socket" "$root/tools/weft-console" --dir "$dir/no-such-dir" 123
expect 0 "--reps" "$root/bench/weft_workloads" --help
expect 2 "--reps must be" "$root/bench/weft_workloads" --reps 0
expect 2 "--only takes workload ids" "$root/bench/weft_workloads" --only W1,,W2
expect nonzero "workers" "$root/bench/weft_workloads" --workers many

[ "$failures" = 0 ] || { echo "$failures failure(s)" >&2; exit 1; }
echo PASS
