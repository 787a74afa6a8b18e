#!/usr/bin/env bash
# bench/run_workloads.sh: the standard workloads W1..W10 (../shared/WORKLOADS.md) on weft and on the
# runtimes users would pick instead (Go, Tokio, Boost.Fiber, oneTBB; and weft_task, weft's stackless
# tasks on W2, W3, W6 and W8; and weft_c, W6 written in C
# against weft's C ABI), side by side in one run on this machine. Builds everything first (installing a peer's Debian packages when missing and
# possible, else skipping that peer with a note), then runs workload by workload, each runtime in
# turn (weft, then each peer: interleaved, so a slow minute of the machine hits all of them), each
# in its own process. Prints a progress line per step and per timed run (stderr) and a summary
# table; writes
#   bench/results/latest.jsonl     this run's JSON lines
#   bench/results/history.jsonl    every run's lines, keyed by commit (committed to the repo)
#   bench/results/dashboard.html   ratio plot of the newest run and history plots per workload
#   bench/results/export/          this run in github-action-benchmark's custom formats
#
#   bench/run_workloads.sh [--reps N] [--workers N] [--only W1,W2] [--peers go,tokio,...]
#                          [--no-history] [--check [BASELINE]] [--save-baseline] [--components]
#
#   --check       compare weft's results with BASELINE by `bench/report.py compare` and exit 1 on
#                 a regression (for CI). Without BASELINE: weft's lines of the last 3 runs in the
#                 history made on this machine from a committed tree, pooled (report.py baseline)
#   --save-baseline  also write this run's weft lines to bench/results/baseline.jsonl
#   --components  also run the component Google Benchmark suites (//...:*_benchmark) with
#                 --benchmark_format=json into bench/results/components/
# docs/bench.md explains the numbers.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

reps=5
workers=2
only="W1,W2,W3,W4,W5,W6,W7,W8,W9,W10"
want_peers="go,tokio,boost_fiber,tbb,weft_task,weft_c"
history=1
check=""
save_baseline=0
components=0
while [ $# -gt 0 ]; do
  case "$1" in
    --reps) reps="$2"; shift 2 ;;
    --workers) workers="$2"; shift 2 ;;
    --only) only="$2"; shift 2 ;;
    --peers) want_peers="$2"; shift 2 ;;
    --no-history) history=0; shift ;;
    --check)
      if [ $# -gt 1 ] && [ "${2#--}" = "$2" ]; then check="$2"; shift 2; else check=history; shift; fi ;;
    --save-baseline) save_baseline=1; shift ;;
    --components) components=1; shift ;;
    *) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2 ;;
  esac
done
[[ "$reps" =~ ^[1-9][0-9]*$ && "$workers" =~ ^[1-9][0-9]*$ ]] || {
  echo "--reps and --workers take a positive number" >&2
  exit 2
}

note() { echo "note: $*" >&2; }
# W10's 1 GiB file, made by the first runtime that reads it, then shared by all of them.
export WEFT_W10_FILE="${WEFT_W10_FILE:-${TMPDIR:-/tmp}/weft_w10.dat}"
# Debian's Python has python3-scipy (report.py compare's statistics); another python3 first on
# PATH (pyenv, a venv) may not.
python=python3
python3 -c 'import scipy' 2>/dev/null || { [ -x /usr/bin/python3 ] && python=/usr/bin/python3; }
[ -z "$check" ] || "$python" -c 'import scipy' 2>/dev/null || tools/apt_install.sh python3-scipy ||
  note "no scipy (apt-get install python3-scipy): --check will fail"
has_peer() { [[ ",$want_peers," == *",$1,"* ]]; }

# ---- build ----------------------------------------------------------------------------------------
# The C++ peers build with weft in one Bazel command (a failure there ends the run), so a peer
# whose target is added is a peer that runs.
peers=()
bazel_targets=(//bench:weft_workloads //bench:w9_client)
if has_peer tbb; then
  bazel_targets+=(//bench/peers/tbb:tbb_workloads)
  peers+=(tbb)
fi
# weft_task: W2, W3, W6, W8 and W9 on weft's stackless tasks (bench/weft_task_workloads.cc).
if has_peer weft_task; then
  bazel_targets+=(//bench:weft_task_workloads)
  peers+=(weft_task)
fi
# weft_c: W6 written in C against weft's C ABI, linked with libweft.so (bench/c).
if has_peer weft_c; then
  bazel_targets+=(//bench/c:weft_c_workloads)
  peers+=(weft_c)
fi
if has_peer boost_fiber; then
  # The library, not only the headers: Boost's headers come with other Boost packages too, and
  # without libboost_fiber the peer fails to link (and the whole build with it).
  if { [ -f /usr/include/boost/fiber/all.hpp ] && compgen -G "/usr/lib/*/libboost_fiber.so" >/dev/null; } ||
    tools/apt_install.sh libboost-fiber-dev; then
    bazel_targets+=(//bench/peers/boost_fiber:boost_fiber_workloads)
    peers+=(boost_fiber)
  else
    note "no Boost.Fiber (apt-get install libboost-fiber-dev); the boost_fiber peer is skipped"
  fi
fi
echo "building weft's workloads and the C++ peers (-c opt)..." >&2
if ! ./bazelw build -c opt "${bazel_targets[@]}" >/tmp/weft-bench-build.log 2>&1; then
  cat /tmp/weft-bench-build.log >&2
  echo "build failed: ./bazelw build -c opt ${bazel_targets[*]}" >&2
  exit 1
fi
bin="$(./bazelw info -c opt bazel-bin 2>/dev/null)"
weft_bin="$bin/bench/weft_workloads"
# W9's clients: one program, in a second process, for every runtime's server.
export WEFT_W9_CLIENT="$bin/bench/w9_client"

if has_peer go; then
  command -v go >/dev/null 2>&1 || tools/apt_install.sh golang-go || true
  if command -v go >/dev/null 2>&1; then
    echo "building the Go peer ($(go version | cut -d' ' -f3))..." >&2
    go_bin="$(mktemp -d)/go_workloads"
    (cd bench/peers/go && GOCACHE="${GOCACHE:-/tmp/weft-gocache}" GOFLAGS=-mod=mod GOPROXY=off \
      go build -o "$go_bin" .) && peers+=(go)
  else
    note "no Go toolchain (apt-get install golang-go); the Go peer is skipped"
  fi
fi

if has_peer tokio; then
  # Tokio's source comes from Debian (librust-tokio-dev, a directory registry); cargo from
  # Debian's package or a rustup install already on PATH.
  [ -d /usr/share/cargo/registry ] && ls -d /usr/share/cargo/registry/tokio-1.* >/dev/null 2>&1 ||
    tools/apt_install.sh librust-tokio-dev || true
  command -v cargo >/dev/null 2>&1 || [ -x "$HOME/.cargo/bin/cargo" ] || tools/apt_install.sh cargo || true
  cargo="$(command -v cargo || echo "$HOME/.cargo/bin/cargo")"
  if [ -x "$cargo" ] && ls -d /usr/share/cargo/registry/tokio-1.* >/dev/null 2>&1; then
    echo "building the Tokio peer ($("$cargo" --version | cut -d' ' -f1-2), tokio $(basename /usr/share/cargo/registry/tokio-1.* | cut -d- -f2))..." >&2
    if (cd bench/peers/tokio && "$cargo" build --release --offline -q) >/tmp/weft-bench-cargo.log 2>&1; then
      tokio_bin=bench/peers/tokio/target/release/tokio_workloads
      peers+=(tokio)
    else
      cat /tmp/weft-bench-cargo.log >&2
      note "the Tokio peer did not build (above); it is skipped"
    fi
  else
    note "no cargo or no librust-tokio-dev (apt-get install cargo librust-tokio-dev); the Tokio peer is skipped"
  fi
fi

# What each peer implements (the others are omitted: the peer's file says why).
peer_has() {
  case "$1:$2" in
    tbb:W2 | tbb:W4) return 0 ;;
    tbb:*) return 1 ;;
    weft_c:W6) return 0 ;;
    weft_c:*) return 1 ;;
    weft_task:W2 | weft_task:W3 | weft_task:W6 | weft_task:W8 | weft_task:W9) return 0 ;;
    weft_task:*) return 1 ;;
    boost_fiber:W6 | boost_fiber:W9 | boost_fiber:W10) return 1 ;;
    *) return 0 ;;
  esac
}
peer_cmd() {
  case "$1" in
    go) echo "$go_bin" ;;
    tokio) echo "$tokio_bin" ;;
    tbb) echo "$bin/bench/peers/tbb/tbb_workloads" ;;
    boost_fiber) echo "$bin/bench/peers/boost_fiber/boost_fiber_workloads" ;;
    weft_c) echo "$bin/bench/c/weft_c_workloads" ;;
    weft_task) echo "$bin/bench/weft_task_workloads" ;;
  esac
}

# ---- run ------------------------------------------------------------------------------------------
mkdir -p bench/results
out=bench/results/latest.jsonl
: >"$out"
IFS=',' read -r -a ids <<<"$only"
runtimes=(weft "${peers[@]}")
echo "runtimes: ${runtimes[*]}; $workers workers; median of $reps runs after a warm-up" >&2
step=0
for id in "${ids[@]}"; do
  step=$((step + 1))
  for rt in "${runtimes[@]}"; do
    if [ "$rt" != weft ] && ! peer_has "$rt" "$id"; then
      if [ "$rt" = weft_c ]; then note "weft_c has only W6 (bench/c)";
      elif [ "$rt" = weft_task ]; then note "weft_task has W2, W3, W6, W8 and W9";
      else note "$rt has no $id (see bench/peers/$rt)"; fi
      continue
    fi
    echo "[$id $step/${#ids[@]}] $rt..." >&2
    cmd="$weft_bin"
    [ "$rt" = weft ] || cmd="$(peer_cmd "$rt")"
    if ! WEFT_BENCH_PROGRESS=1 "$cmd" --reps "$reps" --workers "$workers" --only "$id" >>"$out"; then
      note "$rt failed on $id; its line is missing"
    fi
  done
done

if [ "$components" = 1 ]; then
  mkdir -p bench/results/components
  mapfile -t suites < <(./bazelw query 'attr(tags, "benchmark", kind(cc_binary, //...))' 2>/dev/null)
  ./bazelw build -c opt "${suites[@]}" >/dev/null 2>&1
  for t in "${suites[@]}"; do
    name="${t##*:}"
    echo "[components] $t..." >&2
    "$bin/$(echo "${t#//}" | tr ':' '/')" --benchmark_format=json --benchmark_repetitions=5 \
      --benchmark_out="bench/results/components/$name.json" --benchmark_out_format=json \
      >/dev/null || note "$t failed"
  done
  note "component benchmarks: bench/results/components/*.json (Debian's libbenchmark is a debug build)"
fi

# ---- report ---------------------------------------------------------------------------------------
if [ "$check" = history ]; then  # the baseline from the runs before this one
  check=bench/results/check_baseline.jsonl
  "$python" bench/report.py baseline bench/results/history.jsonl "$check" --runs 3 ||
    { note "no baseline for --check on this machine yet: run without --check first"; check=""; }
fi
if [ "$history" = 1 ]; then
  "$python" bench/report.py history "$out" bench/results/history.jsonl
  "$python" bench/report.py dashboard bench/results/history.jsonl bench/results/dashboard.html >&2
fi
"$python" bench/report.py export "$out" bench/results/export
"$python" bench/report.py table "$out"
if [ "$save_baseline" = 1 ]; then
  grep '"runtime": *"weft"' "$out" >bench/results/baseline.jsonl
  echo "baseline: bench/results/baseline.jsonl" >&2
fi
if [ -n "$check" ]; then
  echo >&2
  "$python" bench/report.py compare "$check" "$out"
fi
