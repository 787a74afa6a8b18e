#!/usr/bin/env bash
# tools/lint.sh tidy|iwyu [FILE...]: static checks over weft's library sources (every .cc in git
# but tests, benchmarks, peers, examples and third_party/), or over the files named.
#   tidy: clang-tidy with .clang-tidy's checks; exits 1 if it finds anything.
#   iwyu: include-what-you-use's suggestions (advice to read, not a gate: it knows neither the
#         IWYU pragmas' intent everywhere nor which headers are a package's public face).
#
# It needs no Bazel build: it writes a compile_commands.json (in a temporary directory) whose
# flags mirror //platforms:copts.bzl's, with "weft/<pkg>/..." includes resolved through a
# symlink. Linux x86-64 sources only (the Windows and aarch64 variants are skipped). A few
# minutes for the whole tree on 2 cores; not run by CI.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$(pwd)

usage() { sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; }
case "${1:-}" in
  -h | --help)
    usage
    exit 0
    ;;
  tidy)
    tool=clang-tidy package=clang-tidy
    ;;
  iwyu)
    tool=iwyu_tool package=iwyu
    ;;
  *)
    usage >&2
    exit 2
    ;;
esac
mode=$1
shift

command -v "$tool" >/dev/null 2>&1 || tools/apt_install.sh "$package" ||
  { echo "lint.sh: no $tool (Debian package $package)" >&2; exit 1; }

if (($#)); then
  files=("$@")
  for f in "${files[@]}"; do
    [ -f "$f" ] || { echo "lint.sh: no such file: $f" >&2; exit 2; }
  done
else
  mapfile -t files < <(git ls-files '*.cc' | grep -vE \
    '(_test|_benchmark)\.cc$|^(third_party|examples|bench)/|_windows\.cc$|iocp|_ms\.cc$|aarch64|ucontext')
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/include" "$tmp/shim"
ln -s "$root" "$tmp/include/weft"
# Debian's clang 14 lacks __builtin_source_location, which libstdc++ 12's <source_location>
# needs: a stand-in that gives no locations, for the analysis only.
cat >"$tmp/shim/source_location" <<'SHIM'
#pragma once
#if __has_builtin(__builtin_source_location)
#include_next <source_location>
#else
namespace std {
struct source_location {
  static constexpr source_location current() noexcept { return {}; }
  constexpr unsigned line() const noexcept { return 0; }
  constexpr unsigned column() const noexcept { return 0; }
  constexpr const char* file_name() const noexcept { return ""; }
  constexpr const char* function_name() const noexcept { return ""; }
};
}  // namespace std
#endif
SHIM
{
  echo "["
  sep=""
  for f in "${files[@]}"; do
    printf '%s{"directory":"%s","file":"%s","arguments":["clang++","-std=c++20","-Wall","-Wextra","-Wno-unused-parameter","-isystem","%s/shim","-I%s/include","-iquote","%s","-iquote","%s","-c","%s"]}\n' \
      "$sep" "$root" "$root/$f" "$tmp" "$tmp" "$root" "$root/$(dirname "$f")" "$root/$f"
    sep=","
  done
  echo "]"
} >"$tmp/compile_commands.json"

out="$tmp/findings.txt"
jobs=$(nproc 2>/dev/null || echo 2)
if [ "$mode" = iwyu ]; then
  iwyu_tool -j "$jobs" -p "$tmp" "${files[@]}" -- -Xiwyu --no_fwd_decls >"$out" 2>&1
  grep -v '^$' "$out" | grep -vE 'has correct #includes/fwd-decls' || true
  echo "lint.sh iwyu: ${#files[@]} files, $(grep -c 'should add these lines' "$out") with suggestions"
  exit 0
fi
printf '%s\n' "${files[@]}" |
  xargs -P "$jobs" -I{} clang-tidy -p "$tmp" --quiet --header-filter="^($root|$tmp/include/weft)/" {} >"$out" 2>/dev/null
# A header's finding comes once per file that includes it: count each place once.
findings=$(grep -E ': (warning|error):' "$out" | sed "s|^$tmp/include/weft/|$root/|" | sort -u | wc -l)
cat "$out"
echo "lint.sh tidy: ${#files[@]} files, $findings finding(s)"
((findings == 0))
