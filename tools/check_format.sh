#!/usr/bin/env bash
# tools/check_format.sh [--fix]: checks that every C++ file in git (but third_party/) is formatted
# as .clang-format says (clang-format --dry-run --Werror); lists the files that are not, and exits
# 1 if any. --fix reformats them in place instead. CI runs the check (.ci/run).
#
# clang-format's version matters (each release formats a little differently): this is Debian
# bookworm's clang-format 14, installed by tools/apt_install.sh when missing.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

case "${1:-}" in
  "") fix=0 ;;
  --fix) fix=1 ;;
  -h | --help)
    sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
    ;;
  *)
    echo "check_format.sh: unknown argument '$1' (want --fix or nothing)" >&2
    exit 2
    ;;
esac

if ! command -v clang-format >/dev/null 2>&1; then
  tools/apt_install.sh clang-format || { echo "check_format.sh: no clang-format" >&2; exit 1; }
fi

mapfile -t files < <(git ls-files '*.cc' '*.h' | grep -v '^third_party/')
if ((fix)); then
  clang-format -i "${files[@]}"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  clang-format --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if ((${#bad[@]})); then
  echo "check_format.sh: ${#bad[@]} file(s) not formatted (tools/check_format.sh --fix):" >&2
  printf '  %s\n' "${bad[@]}" >&2
  exit 1
fi
echo "check_format.sh: ${#files[@]} files formatted"
