#!/usr/bin/env bash
# bench/report_test.sh: bench/report.py's regression check flags a real slowdown (exit 1), passes
# noise and speed-ups (exit 0), refuses unusable input (exit 2); the table and dashboard render.
set -euo pipefail
report="${TEST_SRCDIR:-$(dirname "$0")/..}/${TEST_WORKSPACE:-weft}/bench/report.py"
[ -f "$report" ] || report="$(dirname "$0")/report.py"
dir="${TEST_TMPDIR:-$(mktemp -d)}"
# Debian's Python, where python3-scipy (./bazelw installs it) lives.
python=/usr/bin/python3
[ -x "$python" ] || python=python3

line() {  # line RUNTIME WORKLOAD SAMPLES...
  local rt="$1" w="$2"
  shift 2
  local list
  list="$(IFS=,; echo "$*")"
  echo "{\"runtime\":\"$rt\",\"workload\":\"$w\",\"n\":1,\"workers\":2,\"ns_per_op\":1,\"wall_ms\":$1,\"rss_kb\":1,\"samples_ms\":[$list]}"
}
expect() {  # expect STATUS COMMAND...
  local want="$1" got=0
  shift
  "$@" >"$dir/out" 2>&1 || got=$?
  if [ "$got" != "$want" ]; then
    echo "FAIL: '$*' exited $got, expected $want:" >&2
    cat "$dir/out" >&2
    exit 1
  fi
}

line weft spawn_join 10.0 10.1 9.9 10.2 10.0 >"$dir/base.jsonl"
line weft spawn_join 12.0 12.1 11.9 12.2 12.3 >"$dir/slower.jsonl"      # +20%, clearly apart
line weft spawn_join 10.1 9.8 10.3 10.0 9.9 >"$dir/noise.jsonl"         # the same, reshuffled
line weft spawn_join 8.0 8.1 7.9 8.2 8.0 >"$dir/faster.jsonl"
line weft spawn_join 9.0 15.0 9.5 14.0 10.0 >"$dir/wild.jsonl"          # median +5%, no signal
line go spawn_join 9.0 9.0 9.0 9.0 9.0 >>"$dir/slower.jsonl"

expect 1 "$python" "$report" compare "$dir/base.jsonl" "$dir/slower.jsonl"
grep -q REGRESSION "$dir/out"
expect 0 "$python" "$report" compare "$dir/base.jsonl" "$dir/noise.jsonl"
expect 0 "$python" "$report" compare "$dir/base.jsonl" "$dir/faster.jsonl"
grep -q better "$dir/out"
expect 0 "$python" "$report" compare "$dir/base.jsonl" "$dir/wild.jsonl"
# A slowdown smaller than the threshold is not a regression, however certain.
expect 0 "$python" "$report" compare --threshold 0.25 "$dir/base.jsonl" "$dir/slower.jsonl"

echo "not json" >"$dir/bad.jsonl"
expect 2 "$python" "$report" compare "$dir/base.jsonl" "$dir/bad.jsonl"
expect 2 "$python" "$report" compare "$dir/base.jsonl" "$dir/missing.jsonl"
: >"$dir/empty.jsonl"
expect 2 "$python" "$report" compare "$dir/base.jsonl" "$dir/empty.jsonl"

# Google Benchmark JSON with repetitions: the same test on per-repetition real_time.
gbench() {  # gbench NAME TIMES...
  local name="$1" first=1
  shift
  echo '{"context":{},"benchmarks":['
  for t in "$@"; do
    [ $first = 1 ] || echo ','
    first=0
    echo "{\"name\":\"$name\",\"run_name\":\"$name\",\"run_type\":\"iteration\",\"real_time\":$t}"
  done
  echo ',{"name":"'"$name"'_mean","run_name":"'"$name"'","run_type":"aggregate","real_time":1}]}'
}
gbench BM_Switch 5.0 5.1 4.9 5.0 5.1 >"$dir/gb_base.json"
gbench BM_Switch 6.5 6.4 6.6 6.5 6.7 >"$dir/gb_slow.json"
expect 1 "$python" "$report" compare "$dir/gb_base.json" "$dir/gb_slow.json"
expect 0 "$python" "$report" compare "$dir/gb_base.json" "$dir/gb_base.json"

# Lines of several runs pool their samples: a baseline of two runs, each 5 samples around 10,
# against a current run slower by 20%: flagged, on all 10 baseline samples.
cat "$dir/base.jsonl" "$dir/noise.jsonl" >"$dir/base2.jsonl"
expect 1 "$python" "$report" compare "$dir/base2.jsonl" "$dir/slower.jsonl"
grep -q "spawn_join (wall ms) .* 10.0 " "$dir/out"

# A peer that ran a workload two ways (a "variant" field): the table uses its better way, marks
# the figure, and lists both.
variant() {  # variant RUNTIME WORKLOAD VARIANT NS
  echo "{\"runtime\":\"$1\",\"workload\":\"$2\",\"variant\":\"$3\",\"n\":1,\"workers\":2,\"ns_per_op\":$4,\"wall_ms\":1,\"rss_kb\":1,\"samples_ms\":[1]}"
}
{
  echo '{"runtime":"weft","workload":"mutex_contended","n":1,"workers":2,"ns_per_op":20,"wall_ms":1,"rss_kb":1,"samples_ms":[1]}'
  variant tokio mutex_contended tokio_mutex 160
  variant tokio mutex_contended std_mutex 40
} >"$dir/variants.jsonl"
expect 0 "$python" "$report" table "$dir/variants.jsonl"
grep -q "W7 mutex .* 40.0\* *2.00x" "$dir/out"
grep -q "tokio W7 mutex (ns/lock): tokio_mutex 160, std_mutex 40.0 (used)" "$dir/out"

# Table and dashboard.
expect 0 "$python" "$report" table "$dir/slower.jsonl"
grep -q "W2 spawn+join" "$dir/out"
expect 0 "$python" "$report" history "$dir/slower.jsonl" "$dir/history.jsonl"
expect 0 "$python" "$report" history "$dir/base.jsonl" "$dir/history.jsonl"
expect 0 "$python" "$report" dashboard "$dir/history.jsonl" "$dir/dash.html"
[ "$(grep -o '<svg' "$dir/dash.html" | wc -l)" -ge 2 ]
expect 0 "$python" "$report" history "$dir/variants.jsonl" "$dir/history.jsonl"
expect 0 "$python" "$report" dashboard "$dir/history.jsonl" "$dir/dash.html"
grep -q "tokio/std_mutex" "$dir/dash.html"
grep -q "std_mutex 40.0 (used)" "$dir/dash.html"
# The export for github-action-benchmark: a list of {name, unit, value[, range]} per direction.
expect 0 "$python" "$report" export "$dir/variants.jsonl" "$dir/export"
"$python" - "$dir/export" <<'PY'
import json, os, sys
small = json.load(open(os.path.join(sys.argv[1], "smaller_is_better.json")))
big = json.load(open(os.path.join(sys.argv[1], "bigger_is_better.json")))
names = {e["name"]: e for e in small}
assert names["W7 mutex: weft"]["value"] == 20 and names["W7 mutex: weft"]["unit"] == "ns/lock", names
assert "W7 mutex: tokio/std_mutex" in names and "W7 mutex: tokio/tokio_mutex" in names, names
assert all(set(e) <= {"name", "unit", "value", "range"} for e in small + big)
assert isinstance(big, list)
PY
echo PASS
