#!/usr/bin/env bash
# tools/apt_install.sh PKG...: installs those of the Debian packages named that are missing, as
# root or through password-less sudo; tries the cached package lists first and refreshes them
# only if that fails. Exit status 0 when all are installed afterwards, 1 when they cannot be
# (not Debian, no root, or apt failed): the caller says what to do or skips what needs them.
# Used by ./bazelw, bench/run_workloads.sh and tools/test_cross.sh.
set -uo pipefail

command -v dpkg-query >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 || exit 1
missing=()
for p in "$@"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
done
((${#missing[@]})) || exit 0

if [ "$(id -u)" = 0 ]; then
  sudo=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  sudo=(sudo)
else
  echo "root is needed to install: sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "installing ${missing[*]} (Debian)" >&2
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2 ||
  { "${sudo[@]}" apt-get update -qq >&2 &&
    "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2; }
