#!/usr/bin/env bash
# tools/test_cross.sh: weft's test suites cross-built for linux_aarch64 and run under qemu-user
# (docs/platforms.md). Installs the cross compiler and qemu from Debian when missing (as root or
# with password-less sudo), then runs `./bazelw test --config=aarch64` on the suites that the
# platform claims, and ends with a line `N passed, M failed` as tools/test_all.sh does.
#
#   tools/test_cross.sh                     # context, deque, timer, alloc, base, sync, reactor, scheduler
#   WEFT_CROSS_TARGETS="//context/..." tools/test_cross.sh
#
# Windows x64 (--config=windows, under Wine) is not in this run yet: see docs/platforms.md.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

packages=(g++-aarch64-linux-gnu qemu-user)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=()
  [ "$(id -u)" = 0 ] || sudo=(sudo -n)
  echo "test_cross: installing ${missing[*]}" >&2
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2 ||
    { "${sudo[@]}" apt-get update -qq >&2 &&
      DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2; }
fi

# The suites the aarch64 port claims. Shell tests (examples, bench) run host programs, and the api
# suites' 10,000-connection stress test takes too long under emulation: they stay native-only.
read -r -a targets <<<"${WEFT_CROSS_TARGETS:-//base/... //context/... //deque/... //timer/... //alloc/... //sync/... //reactor/... //scheduler/...}"

status=0
./bazelw test --config=aarch64 --build_tests_only "${targets[@]}" || status=$?
logs="$(./bazelw info --config=aarch64 bazel-testlogs 2>/dev/null)"
passed=0
failed=0
while IFS= read -r -d '' xml; do
  p=$(grep -o '<testcase ' "$xml" | wc -l)
  f=$(grep -c '<failure' "$xml" || true)
  passed=$((passed + p - f))
  failed=$((failed + f))
done < <(for t in "${targets[@]}"; do d="${t#//}"; d="${d%/...}"; d="${d%%:*}"; find "$logs/$d" -name test.xml -print0 2>/dev/null; done)
echo "aarch64 (qemu-user): $passed passed, $failed failed"
exit "$status"
