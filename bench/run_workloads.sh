#!/usr/bin/env bash
# bench/run_workloads.sh: the standard workloads W1..W8 (../shared/WORKLOADS.md) on weft and on the
# peers whose toolchains are present, interleaved workload by workload (weft, then each peer), in
# one run on this machine. Prints a progress line per step and a summary table; writes the JSON
# lines to bench/results/latest.jsonl and appends them, keyed by commit, to
# bench/results/history.jsonl.
#
#   bench/run_workloads.sh [--reps N] [--workers N] [--only W1,W2]
#
# Peers so far: Go (Debian's golang-go; installed here when missing and possible, else skipped
# with a note). Tokio, Boost.Fiber and oneTBB, the dashboard and the regression check: issue 8.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

reps=5
workers=2
only="W1,W2,W3,W4,W5,W6,W7,W8"
while [ $# -gt 0 ]; do
  case "$1" in
    --reps) reps="$2"; shift 2 ;;
    --workers) workers="$2"; shift 2 ;;
    --only) only="$2"; shift 2 ;;
    *) echo "usage: $0 [--reps N] [--workers N] [--only W1,W2,...]" >&2; exit 2 ;;
  esac
done

echo "building weft's workloads (-c opt)..." >&2
./bazelw build -c opt //bench:weft_workloads >/dev/null 2>&1 || {
  echo "weft build failed: ./bazelw build -c opt //bench:weft_workloads" >&2
  exit 1
}
weft_bin="$(./bazelw info -c opt bazel-bin 2>/dev/null)/bench/weft_workloads"

peers=()
if ! command -v go >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  echo "installing golang-go (Debian) for the Go peer..." >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q golang-go >/dev/null 2>&1 || true
fi
if command -v go >/dev/null 2>&1; then
  echo "building the Go peer ($(go version | cut -d' ' -f3))..." >&2
  go_bin="$(mktemp -d)/go_workloads"
  (cd bench/peers/go && GOCACHE="${GOCACHE:-/tmp/weft-gocache}" GOFLAGS=-mod=mod GOPROXY=off \
    go build -o "$go_bin" .) && peers+=("go")
else
  echo "note: no Go toolchain (apt-get install golang-go); the Go peer is skipped" >&2
fi

mkdir -p bench/results
out=bench/results/latest.jsonl
: >"$out"
IFS=',' read -r -a ids <<<"$only"
for id in "${ids[@]}"; do
  echo "[$id] weft..." >&2
  "$weft_bin" --reps "$reps" --workers "$workers" --only "$id" >>"$out"
  for peer in "${peers[@]}"; do
    echo "[$id] $peer..." >&2
    case "$peer" in
      go) "$go_bin" --reps "$reps" --workers "$workers" --only "$id" >>"$out" ;;
    esac
  done
done

commit="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
when="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
python3 - "$out" "$commit" "$when" <<'PY' >>bench/results/history.jsonl
import json, sys
path, commit, when = sys.argv[1:4]
for raw in open(path):
    rec = json.loads(raw)
    rec["commit"], rec["time"] = commit, when
    print(json.dumps(rec, sort_keys=True))
PY

python3 - "$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
by = {}
for r in rows:
    by.setdefault(r["workload"], {})[r["runtime"]] = r
def metric(r):
    w = r["workload"]
    if w == "tcp_echo":
        return r["msgs_per_s"], "msgs/s", True        # higher is better
    if w == "park_many":
        return r["release_ms"], "release ms", False
    if w in ("fib", "sleep_fanout"):
        return r["wall_ms"], "wall ms", False
    return r["ns_per_op"], "ns/op", False
peers = sorted({r["runtime"] for r in rows} - {"weft"})
print("\n%-18s %-10s %12s" % ("workload", "unit", "weft") + "".join("%14s %8s" % (p, "x") for p in peers))
for w, rs in by.items():
    if "weft" not in rs:
        continue
    v, unit, higher = metric(rs["weft"])
    line = "%-18s %-10s %12.2f" % (w, unit, v)
    for p in peers:
        if p in rs:
            pv = metric(rs[p])[0]
            ratio = (v / pv) if higher else (pv / v)   # > 1: weft is better
            line += "%14.2f %7.2fx" % (pv, ratio)
        else:
            line += "%14s %8s" % ("-", "")
    print(line)
print("\nx: how many times better weft is (> 1: weft ahead). JSON lines: bench/results/latest.jsonl")
PY
