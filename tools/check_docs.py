#!/usr/bin/env python3
"""tools/check_docs.py: checks that weft's docs stay true to the tree.

- Every relative link in README.md, docs/*.md and bench/results/history.md names a file or
  directory that exists, and every #anchor names a heading of the linked Markdown file (GitHub's
  anchors: lowercase, punctuation dropped, spaces to hyphens).
- README.md, docs/ and the C++ sources never say "stop N" or "issue N": the docs describe the
  design as it is, and how the work went belongs in commit messages.

Exits 1 listing each problem, 0 when there are none. CI runs it (.ci/run).
"""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
NARRATION = re.compile(r"\b(stop|issue) [0-9]+", re.IGNORECASE)


def slug(heading):
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)  # drops punctuation and backticks, keeps letters and digits
    return s.replace(" ", "-")


def anchors(path):
    found, seen, fence = set(), {}, False
    for line in open(path, encoding="utf-8"):
        if line.startswith("```"):
            fence = not fence
        if fence:
            continue
        m = re.match(r"#{1,6} (.*)", line)
        if m:
            a = slug(m.group(1))
            n = seen.get(a, 0)
            seen[a] = n + 1
            found.add(a if n == 0 else f"{a}-{n}")
    return found


def tracked(pattern_list):
    out = subprocess.run(["git", "ls-files", *pattern_list], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout
    return [p for p in out.split("\n") if p]


def main(argv):
    if len(argv) > 1:
        print(__doc__.strip())
        return 0 if argv[1] in ("-h", "--help") else 2
    problems = []
    docs = tracked(["README.md", "docs/*.md", "bench/results/history.md"])
    for doc in docs:
        base = os.path.dirname(os.path.join(ROOT, doc))
        text = open(os.path.join(ROOT, doc), encoding="utf-8").read()
        fence = False
        for n, line in enumerate(text.split("\n"), 1):
            if line.startswith("```"):
                fence = not fence
            if fence:
                continue
            for target in LINK.findall(line):
                if re.match(r"[a-z]+:", target):
                    continue  # http:, https:, mailto:
                path, _, anchor = target.partition("#")
                full = os.path.normpath(os.path.join(base, path)) if path else os.path.join(ROOT, doc)
                if not os.path.exists(full):
                    problems.append(f"{doc}:{n}: link to a missing file: {target}")
                    continue
                if anchor and full.endswith(".md") and anchor not in anchors(full):
                    problems.append(f"{doc}:{n}: no heading for #{anchor} in {os.path.relpath(full, ROOT)}")
            if doc != "bench/results/history.md" and NARRATION.search(line):
                problems.append(f"{doc}:{n}: narration (\"{NARRATION.search(line).group(0)}\"): "
                                "describe the design as it is")
    for src in tracked(["*.cc", "*.h"]):
        if src.startswith("third_party/"):
            continue
        for n, line in enumerate(open(os.path.join(ROOT, src), encoding="utf-8"), 1):
            m = NARRATION.search(line)
            if m:
                problems.append(f"{src}:{n}: narration (\"{m.group(0)}\") in a comment")
    for p in problems:
        print(p, file=sys.stderr)
    if problems:
        print(f"check_docs.py: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    print(f"check_docs.py: {len(docs)} documents, links and anchors ok, no narration")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
