#!/usr/bin/env python3
"""bench/report.py: reads the workloads' JSON lines (bench/workload_common.h has the format) and
Google Benchmark JSON, and writes what bench/run_workloads.sh shows. Python 3; `compare` needs
scipy (Debian's python3-scipy).

  report.py table LATEST.jsonl
      The terminal summary: weft against each peer, as ratios.
  report.py history LATEST.jsonl HISTORY.jsonl
      Appends LATEST's lines to HISTORY, each keyed by commit, run id and time.
  report.py dashboard HISTORY.jsonl OUT.html
      A static HTML page with SVG plots: the newest run's ratios per peer, and every workload's
      history (weft and the peers) across runs.
  report.py baseline HISTORY OUT [--runs 3]
      The regression check's baseline: weft's lines of the newest RUNS runs in HISTORY made on this
      machine from a committed tree, pooled (so the baseline moves with every committed run, and
      one noisy run does not set it).
  report.py export LATEST OUTDIR
      LATEST's figures in github-action-benchmark's custom formats: OUTDIR/smaller_is_better.json
      (customSmallerIsBetter) and OUTDIR/bigger_is_better.json (customBiggerIsBetter).
  report.py compare BASELINE CURRENT [--threshold 0.15] [--alpha 0.05] [--runtime weft]
      The regression check, for CI. BASELINE and CURRENT are both workload JSON lines or both
      Google Benchmark JSON (--benchmark_repetitions >= 5). A metric regresses when its median is
      worse than the baseline's by more than the threshold AND a one-sided Mann-Whitney U test on
      the repeated samples (scipy.stats.mannwhitneyu) says the difference is not noise (p < alpha).
      Each line also gives a 95% bootstrap interval of the change (scipy.stats.bootstrap). Exit status 1 on any
      regression, 0 otherwise; 2 on unusable input.
"""

import argparse
import glob
import html
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time

# What each workload is judged by: (workload, field, unit, higher_is_better, label).
METRICS = [
    ("yield_pingpong", "ns_per_op", "ns/yield", False, "W1 yield"),
    ("spawn_join", "ns_per_op", "ns/spawn+join", False, "W2 spawn+join"),
    ("channel_pingpong", "ns_per_op", "ns/round trip", False, "W3 channel"),
    ("fib", "wall_ms", "ms", False, "W4 fib(30)"),
    ("sleep_fanout", "wall_ms", "ms", False, "W5 sleep fan-out"),
    ("tcp_echo", "msgs_per_s", "msgs/s", True, "W6 TCP echo"),
    ("tcp_echo", "p99_us", "us p99", False, "W6 p99 round trip"),
    ("mutex_contended", "ns_per_op", "ns/lock", False, "W7 mutex"),
    ("park_many", "release_ms", "release ms", False, "W8 release"),
    ("park_many", "rss_kb_per_task", "KiB/task", False, "W8 RSS"),
    ("many_conn_echo", "msgs_per_s", "msgs/s", True, "W9 10k-connection echo"),
    ("many_conn_echo", "p99_us", "us p99", False, "W9 p99 round trip"),
    ("many_conn_echo", "rss_kb_per_conn", "KiB/conn", False, "W9 RSS"),
    ("file_read_4k", "mib_per_s", "MiB/s", True, "W10 file 4 KiB"),
    ("file_read_1m", "mib_per_s", "MiB/s", True, "W10 file 1 MiB"),
]
# Metrics measured once per line (no samples): the RSS figures, and the latency percentiles
# (each the median of the runs' own; the line has p50_us and p999_us beside p99_us).
SINGLE_VALUES = ("rss_kb_per_task", "rss_kb_per_conn", "p99_us")
PEER_ORDER = ["go", "tokio", "boost_fiber", "tbb", "weft_task", "weft_c"]
# Said wherever a workload's ratios are shown, on the same line or group (WORKLOADS.md allows each
# runtime its natural fork-join primitive for W4).
CAVEATS = {"fib": "weft runs W4 as stackless fork-join tasks, the peers a spawned task per call"}


def read_lines(path):
    rows = []
    with open(path) as f:
        for n, raw in enumerate(f, 1):
            raw = raw.strip()
            if not raw:
                continue
            try:
                rows.append(json.loads(raw))
            except json.JSONDecodeError as e:
                print("%s:%d: not a JSON line (%s)" % (path, n, e), file=sys.stderr)
                sys.exit(2)
    return rows


def by_runtime(rows):
    """{runtime: {workload: [rows]}}: a workload may have several lines, one per variant (a peer
    that runs it two ways, each as its users might write it); the last line of each variant."""
    out = {}
    for r in rows:
        lines = out.setdefault(r.get("runtime"), {}).setdefault(r.get("workload"), [])
        lines[:] = [l for l in lines if l.get("variant") != r.get("variant")] + [r]
    return out


def best(lines, field, higher):
    """(value, variant) of the line of `lines` best by `field`: the headline figure of a runtime
    that ran a workload several ways is its faster way. (None, None) if no line has the field."""
    have = [l for l in lines or [] if l.get(field) is not None]
    if not have:
        return None, None
    pick = (max if higher else min)(have, key=lambda l: l[field])
    return pick[field], pick.get("variant")


def peers_in(rows):
    seen = {r.get("runtime") for r in rows} - {"weft"}
    return [p for p in PEER_ORDER if p in seen] + sorted(seen - set(PEER_ORDER))


def ratio(weft, peer, higher):
    """How many times better weft is than peer (> 1: weft ahead)."""
    if not weft or not peer:
        return None
    return weft / peer if higher else peer / weft


def comparisons(rt, peers):
    """Per metric of METRICS: (label, unit, weft's value, [(peer, peer's value, ratio, variant)]);
    a value or ratio is None where that runtime has no such result; variant names the peer's line
    used when it ran the workload several ways (its best), else None."""
    for workload, field, unit, higher, label in METRICS:
        w, _ = best(rt.get("weft", {}).get(workload), field, higher)
        cells = []
        for p in peers:
            pv, variant = best(rt.get(p, {}).get(workload), field, higher)
            cells.append((p, pv, ratio(w, pv, higher), variant))
        yield label, unit, w, cells


def variant_notes(rt):
    """Lines saying, for each runtime and workload run several ways, every way's figure and
    which one the table uses."""
    notes = []
    for workload, field, unit, higher, label in METRICS:
        for runtime in sorted(rt):
            lines = [l for l in rt[runtime].get(workload, []) if l.get(field) is not None]
            if len(lines) < 2:
                continue
            _, used = best(lines, field, higher)
            parts = ["%s %s%s" % (l.get("variant"), fmt(l[field]), " (used)" if l.get("variant") == used else "")
                     for l in lines]
            notes.append("%s %s (%s): %s" % (runtime, label, unit, ", ".join(parts)))
    return notes


def fmt_ratio(r):
    return "" if r is None else "%.2fx" % r


def fmt(v):
    if v is None:
        return "-"
    if v >= 1e5:
        return "%.0fk" % (v / 1e3)
    if v >= 100:
        return "%.0f" % v
    if v >= 10:
        return "%.1f" % v
    return "%.2f" % v


def cmd_table(args):
    rows = read_lines(args.latest)
    rt = by_runtime(rows)
    peers = peers_in(rows)
    head = "%-18s %-14s %9s" % ("workload", "unit", "weft")
    head += "".join("%13s %7s" % (p, "x") for p in peers)
    print("\n" + head)
    for (label, unit, w, cells), metric in zip(comparisons(rt, peers), METRICS):
        caveat = CAVEATS.get(metric[0])
        print("%-18s %-14s %9s" % (label, unit, fmt(w)) +
              "".join("%13s %7s" % (fmt(pv) + ("*" if v else ""), fmt_ratio(r)) for _, pv, r, v in cells) +
              ("  (%s)" % caveat if caveat else ""))
    print("\nx: how many times better weft is (> 1: weft ahead); -: the peer has no such workload.")
    notes = variant_notes(rt)
    if notes:
        print("*: the peer ran the workload several ways; the table uses its best:")
        for n in notes:
            print("  " + n)
    print("JSON lines: %s" % args.latest)


def git(*argv):
    try:
        return subprocess.run(["git", *argv], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def first_line(argv):
    """The first line a command prints (stdout, else stderr), or None if it cannot run."""
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    text = (p.stdout or p.stderr).strip()
    return text.splitlines()[0] if text else None


def machine():
    """What a run's figures depend on besides the code: the CPU, cores, kernel, compiler and each
    peer's toolchain. Runs are compared only on the same machine (its "id")."""
    cpu = None
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), None)
    except OSError:
        pass
    boost = None
    try:
        with open("/usr/include/boost/version.hpp") as f:
            boost = next((l.split('"')[1].replace("_", ".") for l in f if "BOOST_LIB_VERSION" in l
                          and '"' in l), None)
    except OSError:
        pass
    tokio = sorted(glob.glob("/usr/share/cargo/registry/tokio-1.*"))
    m = {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "kernel": platform.release(),
        "cxx": first_line(["g++", "--version"]),
        "go": first_line(["go", "version"]),
        "rustc": first_line(["rustc", "--version"]) or first_line([os.path.expanduser("~/.cargo/bin/rustc"), "--version"]),
        "tokio": os.path.basename(tokio[-1])[len("tokio-"):] if tokio else None,
        "boost": boost,
        "tbb": first_line(["dpkg-query", "-W", "-f=${Version}", "libtbb-dev"]),
    }
    m["id"] = "%s, %s cores, Linux %s" % (cpu or "unknown CPU", m["cores"], m["kernel"])
    return m


def cmd_baseline(args):
    rows = read_lines(args.history)
    here = machine()["id"]
    runs = []
    for r in rows:
        if machine_id(r) == here and not r.get("dirty") and r.get("run") and r["run"] not in runs:
            runs.append(r["run"])
    chosen = set(runs[-args.runs:])
    lines = [r for r in rows if r.get("run") in chosen and r.get("runtime") == "weft"]
    if not lines:
        print("baseline: no committed run on this machine (%s) in %s" % (here, args.history), file=sys.stderr)
        return 2
    with open(args.out, "w") as f:
        for r in lines:
            f.write(json.dumps(r, sort_keys=True) + "\n")
    print("baseline: %s from %d run(s): %s" % (args.out, len(chosen), ", ".join(sorted(chosen))), file=sys.stderr)
    return 0


def cmd_export(args):
    """github-action-benchmark's custom formats: one entry per runtime and metric."""
    rows = read_lines(args.latest)
    rt = by_runtime(rows)
    out = {False: [], True: []}
    for workload, field, unit, higher, label in METRICS:
        for runtime in ["weft"] + [p for p in peers_in(rows)]:
            for line in rt.get(runtime, {}).get(workload, []):
                if line.get(field) is None:
                    continue
                entry = {"name": "%s: %s%s" % (label, runtime, "/" + line["variant"] if line.get("variant") else ""),
                         "unit": unit, "value": line[field]}
                rng = spread(line, field)
                if rng:
                    entry["range"] = "%s..%s" % (fmt(rng[0]), fmt(rng[1]))
                out[higher].append(entry)
    os.makedirs(args.outdir, exist_ok=True)
    for higher, name in ((False, "smaller_is_better.json"), (True, "bigger_is_better.json")):
        with open(os.path.join(args.outdir, name), "w") as f:
            json.dump(out[higher], f, indent=1)
    print("export: %s/{smaller,bigger}_is_better.json (%d and %d entries)"
          % (args.outdir, len(out[False]), len(out[True])), file=sys.stderr)


def cmd_history(args):
    rows = read_lines(args.latest)
    commit = git("rev-parse", "--short", "HEAD")
    # Dirty: uncommitted changes to the code. bench/results/ is left out: runs write it (a second
    # run after a first one is still of the committed code).
    status = git("status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)bench/results")
    dirty = bool(status) and status != "unknown"
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    run = "%s@%s" % (commit + ("+" if dirty else ""), when)
    m = machine()
    with open(args.history, "a") as f:
        for r in rows:
            r = dict(r, commit=commit, time=when, run=run, dirty=dirty, machine=m)
            f.write(json.dumps(r, sort_keys=True) + "\n")


# ---- dashboard ----------------------------------------------------------------------------------

COLORS = {"weft": "#1f77b4", "go": "#2ca02c", "tokio": "#d62728", "boost_fiber": "#9467bd",
          "tbb": "#ff7f0e", "weft_c": "#17becf",
          "weft_task": "#bcbd22"}


def color(runtime):
    return COLORS.get(runtime, "#7f7f7f")


def svg_ratio_chart(rt, peers):
    """Horizontal bars on a log axis: for each metric, weft's ratio against each peer."""
    caveat_of = {m[4]: CAVEATS[m[0]] for m in METRICS if m[0] in CAVEATS}
    bars = [(label, p, r) for label, _, _, cells in comparisons(rt, peers) for p, _, r, _ in cells if r]
    if not bars:
        return "<p>No peer results in the newest run.</p>"
    lo = min(0.25, min(r for _, _, r in bars) / 1.5)
    hi = max(4.0, max(r for _, _, r in bars) * 1.5)
    width, left, bar_h, gap = 760, 150, 14, 10
    plot_w = width - left - 60

    def x(r):
        return left + plot_w * (math.log10(r) - math.log10(lo)) / (math.log10(hi) - math.log10(lo))

    parts, y, last = [], 30, None
    for label, p, r in bars:
        if label != last:
            if last in caveat_of:  # the group's caveat, under its bars
                parts.append('<text x="%.1f" y="%d" font-size="10" fill="#555">%s</text>'
                             % (x(1.0) + 4, y + 10, html.escape(caveat_of[last])))
                y += 12
            y += gap
            parts.append('<text x="%d" y="%d" font-size="12" text-anchor="end">%s</text>'
                         % (left - 8, y + bar_h - 3, html.escape(label)))
            last = label
        x0, x1 = x(1.0), x(r)
        parts.append('<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"><title>%s: %.2fx</title></rect>'
                     % (min(x0, x1), y, abs(x1 - x0), bar_h - 2, color(p), html.escape(p), r))
        parts.append('<text x="%.1f" y="%d" font-size="10">%.2fx</text>' % (max(x0, x1) + 3, y + bar_h - 4, r))
        y += bar_h
    if last in caveat_of:
        parts.append('<text x="%.1f" y="%d" font-size="10" fill="#555">%s</text>'
                     % (x(1.0) + 4, y + 10, html.escape(caveat_of[last])))
        y += 12
    height = y + 40
    ticks = []
    t = 10 ** math.floor(math.log10(lo))
    while t <= hi:
        for m in (1, 2, 5):
            v = t * m
            if lo <= v <= hi:
                ticks.append('<line x1="%.1f" x2="%.1f" y1="25" y2="%d" stroke="#ddd"/>'
                             '<text x="%.1f" y="%d" font-size="10" text-anchor="middle">%gx</text>'
                             % (x(v), x(v), y, x(v), y + 14, v))
        t *= 10
    legend = "".join('<rect x="%d" y="6" width="10" height="10" fill="%s"/><text x="%d" y="15" font-size="11">%s</text>'
                     % (left + 110 * i, color(p), left + 110 * i + 14, html.escape(p)) for i, p in enumerate(peers))
    return ('<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d">%s%s'
            '<line x1="%.1f" x2="%.1f" y1="25" y2="%d" stroke="#333"/>%s'
            '<text x="%d" y="%d" font-size="11">weft behind &#8592; 1x &#8594; weft ahead (log scale)</text></svg>'
            % (width, height, legend, "".join(ticks), x(1.0), x(1.0), y, "".join(parts), left, height - 6))


def spread(r, field):
    """(lowest, highest) of a line's repeated samples, in the units of `field` (every timed metric
    is a fixed amount of work over a wall, so it scales with each sample's wall; msgs/s inversely),
    or None when there is one value only (W8's RSS)."""
    samples, wall = r.get("samples_ms"), r.get("wall_ms")
    if not samples or not wall or field in SINGLE_VALUES or r.get(field) is None:
        return None
    if field in ("msgs_per_s", "mib_per_s"):
        vals = [r[field] * wall / x for x in samples if x > 0]
    else:
        vals = [r[field] * x / wall for x in samples]
    return (min(vals), max(vals)) if vals else None


def svg_history(points_by_runtime, runs, title, unit, dirty_runs=()):
    """One metric across runs: a polyline per runtime through each run's median, a vertical bar
    from its fastest to its slowest repetition, the x axis in run order labelled by commit and
    date. A run made from a tree with uncommitted changes is drawn hollow and labelled "+"."""
    width, height, left, bottom, top = 560, 230, 60, 50, 24
    values = [v for pts in points_by_runtime.values() for p in pts for v in (p[1], *(p[2] or ()))]
    if not values:
        return ""
    vmax = max(values) * 1.1 or 1.0
    # A wide spread reads better on a log axis (which needs every value above 0).
    log = min(values) > 0 and max(values) / min(values) > 50
    vmin = min(values) / 1.3 if log else 0.0

    def y(v):
        if log:
            f = (math.log10(v) - math.log10(vmin)) / (math.log10(vmax) - math.log10(vmin))
        else:
            f = (v - vmin) / (vmax - vmin)
        return height - bottom - f * (height - bottom - top)

    n = max(len(runs), 2)

    def x(i):
        return left + i * (width - left - 20) / (n - 1)

    parts = ['<text x="%d" y="16" font-size="13"><tspan font-weight="bold">%s</tspan> %s%s</text>'
             % (left, html.escape(title), html.escape(unit), ", log scale" if log else "")]
    for frac in (0, 0.5, 1):
        v = (vmin * (vmax / vmin) ** frac) if log else vmin + frac * (vmax - vmin)
        parts.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#eee"/><text x="%d" y="%.1f" font-size="9" text-anchor="end">%s</text>'
                     % (left, width - 20, y(v), y(v), left - 4, y(v) + 3, fmt(v)))
    for i, run in enumerate(runs):
        if len(runs) <= 12 or i % math.ceil(len(runs) / 12) == 0 or i == len(runs) - 1:
            commit, _, when = run.partition("@")
            label = "%s %s" % (commit, when[5:10])  # commit, then the date as MM-DD
            parts.append('<text x="%.1f" y="%d" font-size="9" text-anchor="end" transform="rotate(-30 %.1f %d)">%s</text>'
                         % (x(i), height - bottom + 14, x(i), height - bottom + 14, html.escape(label)))
    for rt_name, pts in points_by_runtime.items():
        if not pts:
            continue
        base = rt_name.split("/")[0]
        path = " ".join("%.1f,%.1f" % (x(i), y(v)) for i, v, _ in pts)
        dash = "" if rt_name == "weft" else ' stroke-dasharray="4 3"'
        parts.append('<polyline fill="none" stroke="%s" stroke-width="2"%s points="%s"/>' % (color(base), dash, path))
        for i, v, rng in pts:
            if rng:
                parts.append('<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="%s" stroke-width="1" opacity="0.6"/>'
                             % (x(i), x(i), y(rng[0]), y(rng[1]), color(base)))
            hollow = runs[i] in dirty_runs
            parts.append('<circle cx="%.1f" cy="%.1f" r="2.5" fill="%s" stroke="%s"><title>%s %s: %s %s%s%s</title></circle>'
                         % (x(i), y(v), "white" if hollow else color(base), color(base), html.escape(rt_name),
                            html.escape(runs[i]), fmt(v), html.escape(unit),
                            " (runs %s to %s)" % (fmt(rng[0]), fmt(rng[1])) if rng else "",
                            ", uncommitted changes" if hollow else ""))
    legend = "".join('<rect x="%d" y="%d" width="10" height="3" fill="%s"/><text x="%d" y="%d" font-size="10">%s</text>'
                     % (width - 130, top + 12 * k, color(r.split("/")[0]), width - 116, top + 12 * k + 4, html.escape(r))
                     for k, r in enumerate(points_by_runtime) if points_by_runtime[r])
    return '<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d">%s%s</svg>' % (width, height, "".join(parts), legend)


UNRECORDED = "machine not recorded"  # history lines written before runs recorded their machine


def machine_id(r):
    return (r.get("machine") or {}).get("id") or UNRECORDED


def cmd_dashboard(args):
    rows = read_lines(args.history)
    if not rows:
        sys.exit("%s is empty: run bench/run_workloads.sh first" % args.history)
    for r in rows:
        r["run"] = r.get("run") or "%s@%s" % (r.get("commit", "?"), r.get("time", "?"))
    # Figures from different machines are not comparable: the history shows the runs made on
    # the newest run's machine, and says how many others there are.
    here = machine_id(rows[-1])
    others = {}
    runs = []
    for r in rows:
        if machine_id(r) != here:
            others.setdefault(machine_id(r), set()).add(r["run"])
        elif r["run"] not in runs:
            runs.append(r["run"])
    runs = runs[-args.last:]
    index = {run: i for i, run in enumerate(runs)}
    dirty_runs = {r["run"] for r in rows if r["run"] in index and (r.get("dirty") or "+@" in r["run"])}
    newest = [r for r in rows if r["run"] == runs[-1]]
    nrt = by_runtime(newest)
    shown = [r for r in rows if r["run"] in index]
    peers = peers_in(shown)
    # The chart shows the newest run; if that ran no peer, each runtime's latest result instead.
    chart = (nrt, peers_in(newest)) if peers_in(newest) else (by_runtime(shown), peers)
    m = newest[-1].get("machine") or {}
    tools = ", ".join("%s %s" % (k, m[k]) for k in ("cxx", "go", "rustc", "tokio", "boost", "tbb") if m.get(k))
    body = ["<h1>weft: standard workloads</h1>",
            "<p>Workloads W1..W10 of WORKLOADS.md, run by <code>bench/run_workloads.sh</code>: weft and each "
            "peer interleaved, the same worker count, the median of repeated runs after a warm-up. Newest run: "
            "<b>%s</b>%s (%d runs on this machine in the history shown). A ratio above 1 means weft is ahead.</p>"
            % (html.escape(runs[-1]), " <b>(uncommitted changes)</b>" if runs[-1] in dirty_runs else "",
               len(runs)),
            "<p id=machine>Machine: <b>%s</b>%s</p>" % (html.escape(here), ("; " + html.escape(tools)) if tools else ""),
            "<h2>Newest ratios</h2>", svg_ratio_chart(*chart)]
    table = ["<table border=1 cellpadding=4 cellspacing=0><tr><th>workload</th><th>unit</th><th>weft</th>"]
    table += ["<th>%s</th><th>x</th>" % html.escape(p) for p in peers]
    table.append("</tr>")
    for (label, unit, w, cells), metric in zip(comparisons(nrt, peers), METRICS):
        caveat = CAVEATS.get(metric[0])
        table.append("<tr><td>%s%s</td><td>%s</td><td>%s</td>%s</tr>" % (
            html.escape(label), "<br><small>%s</small>" % html.escape(caveat) if caveat else "", unit, fmt(w),
            "".join("<td>%s</td><td>%s</td>" % (fmt(pv) + ("*" if v else ""), fmt_ratio(r))
                    for _, pv, r, v in cells)))
    table.append("</table>")
    notes = variant_notes(nrt)
    if notes:
        table.append("<p>*: the peer ran the workload several ways; the table uses its best:</p><ul>%s</ul>"
                     % "".join("<li>%s</li>" % html.escape(n) for n in notes))
    body += ["<h2>Newest run</h2>", "".join(table), "<h2>History</h2>",
             "<p>weft solid, peers dashed (a peer's variants each their own line); a dot is a run's "
             "median, its bar the fastest to the slowest repetition; hollow: a run from a tree with "
             "uncommitted changes (its commit labelled +). x axis: runs in order, by commit and date.</p>"]
    if others:
        body.append("<p>Not plotted, from other machines: %s.</p>" % "; ".join(
            "%s (%d runs)" % (html.escape(k), len(v)) for k, v in sorted(others.items())))
    for workload, field, unit, higher, label in METRICS:
        pts = {}
        for r in shown:
            if r["workload"] == workload and r.get(field) is not None:
                name = r["runtime"] + ("/" + r["variant"] if r.get("variant") else "")
                pts.setdefault(name, []).append((index[r["run"]], r[field], spread(r, field)))
        ordered = {k: pts[k] for k in ["weft"] + PEER_ORDER + sorted(pts) if k in pts}
        body.append(svg_history(ordered, runs, label + (" (higher is better)" if higher else ""), unit,
                                dirty_runs))
    page = ("<!doctype html><html><head><meta charset=utf-8><title>weft benchmarks</title>"
            "<style>body{font-family:sans-serif;max-width:1200px;margin:1em auto}svg{margin:6px}"
            "td{text-align:right}</style></head><body>%s</body></html>\n" % "\n".join(body))
    with open(args.out, "w") as f:
        f.write(page)
    print("dashboard: %s (%d runs on %s)" % (args.out, len(runs), here))


# ---- regression check ---------------------------------------------------------------------------

def mann_whitney_greater(a, b):
    """One-sided p-value that samples a tend to be larger than samples b: scipy's Mann-Whitney U
    test (exact for small samples without ties, else the normal approximation with a continuity
    correction)."""
    if not a or not b:
        return 1.0
    try:
        from scipy.stats import mannwhitneyu
    except ImportError:
        sys.exit("report.py compare needs scipy: apt-get install python3-scipy (Debian), then run it "
                 "with that Python (/usr/bin/python3)")
    return float(mannwhitneyu(a, b, alternative="greater", method="auto").pvalue)


def change_interval(b, c):
    """95% bootstrap interval (scipy.stats.bootstrap, percentile, seeded) of the relative change
    of the median from samples b to samples c, or None with fewer than 2 samples a side."""
    if len(b) < 2 or len(c) < 2:
        return None
    import numpy as np
    from scipy.stats import bootstrap
    r = bootstrap((b, c), lambda x, y: np.median(y) / np.median(x) - 1, vectorized=False,
                  n_resamples=2000, confidence_level=0.95, method="percentile", random_state=1)
    return r.confidence_interval.low, r.confidence_interval.high


def load_samples(path, runtime):
    """{metric name: (samples, higher_is_better)} from workload lines or Google Benchmark JSON."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError as e:
        print("compare: %s" % e, file=sys.stderr)
        sys.exit(2)
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        doc = None
    out = {}
    if isinstance(doc, dict) and "benchmarks" in doc:  # Google Benchmark JSON
        for b in doc["benchmarks"]:
            if b.get("run_type", "iteration") != "iteration":
                continue
            name = b.get("run_name", b["name"])
            t = b.get("real_time")
            if t is not None:
                out.setdefault(name, ([], False))[0].append(float(t))
        return out
    # Several lines of one metric (a file of several runs, as a baseline made of more than one
    # run is) pool their samples.
    for r in read_lines(path):
        if r.get("runtime") != runtime:
            continue
        suffix = " [%s]" % r["variant"] if r.get("variant") else ""
        for workload, field, unit, higher, label in METRICS:
            if r.get("workload") != workload:
                continue
            if field in ("ns_per_op", "wall_ms", "release_ms", "msgs_per_s", "mib_per_s") and r.get("samples_ms"):
                # Every timed metric is a fixed amount of work over a wall: compare the walls.
                name = "%s (wall ms)%s" % (workload, suffix)
                out.setdefault(name, ([], False))[0].extend(float(s) for s in r["samples_ms"])
            elif field in SINGLE_VALUES and r.get(field) is not None:
                out.setdefault(label + suffix, ([], False))[0].append(float(r[field]))
    return out


def cmd_compare(args):
    base = load_samples(args.baseline, args.runtime)
    cur = load_samples(args.current, args.runtime)
    if not base or not cur:
        print("compare: no %s results in %s" % (args.runtime, args.baseline if not base else args.current))
        return 2
    regressions = 0
    print("%-36s %12s %12s %8s %17s %8s  %s" % ("metric", "baseline", "current", "change", "95% interval", "p",
                                                "verdict"))
    for name in sorted(set(base) & set(cur)):
        (b, higher), (c, _) = base[name], cur[name]
        mb, mc = statistics.median(b), statistics.median(c)
        change = (mc - mb) / mb if mb else 0.0
        worse = -change if higher else change
        if len(b) >= 2 and len(c) >= 2:
            p = mann_whitney_greater(b, c) if higher else mann_whitney_greater(c, b)
            regressed = worse > args.threshold and p < args.alpha
            ptxt = "%.3f" % p
        else:  # a single value (W8's RSS): the threshold alone, doubled for lack of samples
            regressed = worse > 2 * args.threshold
            ptxt = "n/a"
        regressions += regressed
        verdict = "REGRESSION" if regressed else ("better" if worse < -args.threshold else "ok")
        ci = change_interval(b, c)
        citxt = "[%+.0f%%, %+.0f%%]" % (100 * ci[0], 100 * ci[1]) if ci else "n/a"
        print("%-36s %12s %12s %+7.1f%% %17s %8s  %s" % (name[:36], fmt(mb), fmt(mc), 100 * change, citxt, ptxt,
                                                        verdict))
    for name in sorted(set(base) - set(cur)):
        print("%-36s missing from the current run" % name[:36])
    print("\n%d regression(s) beyond %.0f%% at p < %.2f" % (regressions, 100 * args.threshold, args.alpha))
    return 1 if regressions else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("table")
    t.add_argument("latest")
    h = sub.add_parser("history")
    h.add_argument("latest")
    h.add_argument("history")
    d = sub.add_parser("dashboard")
    d.add_argument("history")
    d.add_argument("out")
    d.add_argument("--last", type=int, default=40, help="how many runs of the history to plot")
    b = sub.add_parser("baseline")
    b.add_argument("history")
    b.add_argument("out")
    b.add_argument("--runs", type=int, default=3)
    e = sub.add_parser("export")
    e.add_argument("latest")
    e.add_argument("outdir")
    c = sub.add_parser("compare")
    c.add_argument("baseline")
    c.add_argument("current")
    c.add_argument("--threshold", type=float, default=0.15)
    c.add_argument("--alpha", type=float, default=0.05)
    c.add_argument("--runtime", default="weft")
    args = ap.parse_args()
    if args.cmd == "table":
        cmd_table(args)
    elif args.cmd == "history":
        cmd_history(args)
    elif args.cmd == "dashboard":
        cmd_dashboard(args)
    elif args.cmd == "baseline":
        sys.exit(cmd_baseline(args))
    elif args.cmd == "export":
        cmd_export(args)
    else:
        sys.exit(cmd_compare(args))


if __name__ == "__main__":
    main()
