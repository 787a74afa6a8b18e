#!/usr/bin/env bash
# bench/dashboard_test.sh: the dashboard opens in a browser. report.py renders one from a fixture
# history (two machines, a run from a dirty tree, a peer with variants); headless Chromium loads
# it, and the test fails on a script error, a chart with nothing drawn, or a blank page. Without
# Chromium (apt-get install chromium; .ci/run installs it) it checks the HTML only and says so.
set -euo pipefail
root="${TEST_SRCDIR:-$(dirname "$0")/..}/${TEST_WORKSPACE:-weft}"
[ -f "$root/bench/report.py" ] || root="$(dirname "$0")/.."
report="$root/bench/report.py"
dir="${TEST_TMPDIR:-$(mktemp -d)}"
python=/usr/bin/python3
[ -x "$python" ] || python=python3

# Three runs on one machine (the second from a dirty tree), one on another.
"$python" - "$dir/history.jsonl" <<'PY'
import json, sys
here = {"id": "Test CPU, 2 cores, Linux 6.1", "cpu": "Test CPU", "cores": 2, "kernel": "6.1"}
there = dict(here, id="Other CPU, 8 cores, Linux 6.1")
metrics = [("yield_pingpong", 10.0), ("spawn_join", 90.0), ("channel_pingpong", 100.0), ("fib", 3.0),
           ("sleep_fanout", 5.0), ("tcp_echo", 8000.0), ("mutex_contended", 20.0), ("park_many", 25.0)]
with open(sys.argv[1], "w") as f:
    for k, (commit, dirty, m) in enumerate([("aaa1111", False, here), ("bbb2222", True, here),
                                             ("ccc3333", False, here), ("ddd4444", False, there)]):
        run = "%s%s@2026-11-2%dT10:00:00Z" % (commit, "+" if dirty else "", k)
        for runtime, scale in (("weft", 1.0), ("go", 3.0), ("tokio", 4.0)):
            for w, v in metrics:
                r = {"runtime": runtime, "workload": w, "n": 1, "workers": 2, "run": run, "commit": commit,
                     "dirty": dirty, "machine": m, "wall_ms": v * scale, "ns_per_op": v * scale,
                     "rss_kb": 1, "samples_ms": [v * scale * (1 + d / 10) for d in (-1, 0, 1, 2, 0)]}
                if w == "tcp_echo":
                    r["msgs_per_s"] = 1e5 / scale
                if w == "park_many":
                    r.update(release_ms=v * scale, rss_kb_per_task=4.0 * scale)
                if runtime == "tokio" and w == "mutex_contended":
                    for variant, f2 in (("tokio_mutex", 2.0), ("std_mutex", 0.5)):
                        f.write(json.dumps(dict(r, variant=variant, ns_per_op=v * f2)) + "\n")
                    continue
                f.write(json.dumps(r) + "\n")
PY
# The newest line is from the other machine: move one of this machine's runs last.
grep 'ccc3333' "$dir/history.jsonl" >"$dir/last"
grep -v 'ccc3333' "$dir/history.jsonl" >"$dir/h" && cat "$dir/h" "$dir/last" >"$dir/history.jsonl"
"$python" "$report" dashboard "$dir/history.jsonl" "$dir/dash.html" >/dev/null
page="$dir/dash.html"

fail() { echo "FAIL: $*" >&2; exit 1; }
grep -q "Test CPU, 2 cores" "$page" || fail "the machine is not named"
grep -q "Other CPU, 8 cores, Linux 6.1 (1 runs)" "$page" || fail "the other machine's run is not set apart"
grep -q "tokio/std_mutex" "$page" || fail "a variant has no line of its own"
grep -q "uncommitted changes" "$page" || fail "the dirty run is not flagged"
grep -q "fork-join tasks" "$page" || fail "W4's caveat is missing"
[ "$(grep -o '<svg' "$page" | wc -l)" -ge 10 ] || fail "fewer than 10 charts"

browser="$(command -v chromium || command -v chromium-browser || true)"
if [ -z "$browser" ]; then
  echo "SKIPPED the browser check: no chromium (apt-get install chromium); the HTML checks passed"
  exit 0
fi
flags=(--headless --no-sandbox --disable-gpu --user-data-dir="$dir/profile" --enable-logging=stderr --v=0)
# The page as the browser built it (after any script), and the browser's log.
timeout 60 "$browser" "${flags[@]}" --dump-dom "file://$page" >"$dir/dom.html" 2>"$dir/log" ||
  fail "chromium could not load the page: $(tail -5 "$dir/log")"
if grep -E "Uncaught|SyntaxError|ReferenceError|TypeError" "$dir/log"; then
  fail "a script error while loading the dashboard"
fi
# Every chart drew something: a bar, or a line or point per series.
"$python" - "$dir/dom.html" <<'PY' || fail "an empty chart"
import re, sys
dom = open(sys.argv[1]).read()
charts = re.findall(r"<svg.*?</svg>", dom, re.S)
assert len(charts) >= 10, len(charts)
for c in charts:
    assert re.search(r"<(rect|polyline|circle)\b", c), c[:200]
PY
# And the screenshot is not blank: its pixels take more than a handful of values.
timeout 60 "$browser" "${flags[@]}" --window-size=1200,1600 --screenshot="$dir/shot.png" "file://$page" \
  >/dev/null 2>>"$dir/log" || fail "no screenshot"
"$python" - "$dir/shot.png" <<'PY' || fail "the screenshot is blank"
import struct, sys, zlib
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n"
pos, idat = 8, b""
while pos < len(data):
    n, kind = struct.unpack(">I4s", data[pos:pos + 8])
    if kind == b"IDAT":
        idat += data[pos + 8:pos + 8 + n]
    pos += 12 + n
raw = zlib.decompress(idat)
assert len(set(raw[::7])) > 16, len(set(raw[::7]))
PY
echo PASS
