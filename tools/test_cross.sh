#!/usr/bin/env bash
# tools/test_cross.sh: weft's test suites cross-built for the platforms this machine can only
# emulate (docs/platforms.md), then run there: linux_aarch64 under qemu-user, windows_x86_64
# under Wine. Installs the cross compilers, qemu and Wine from Debian when missing, then runs
# tools/test_all.sh in the `aarch64` and `windows` configurations of //:.bazelrc on the packages
# each port claims; the last line is tools/test_all.sh's "N passed, M failed" for the last one.
#
#   tools/test_cross.sh                 # both
#   tools/test_cross.sh windows         # one
#   WEFT_CROSS_TARGETS="//context/..." tools/test_cross.sh aarch64
#
# Left out: the api's 10,000-connection stress test (too slow under emulation; on aarch64 the
# whole api package), and the shell tests of examples and bench, which run host programs.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

platforms=("$@")
((${#platforms[@]})) || platforms=(aarch64 windows)
status=0
for p in "${platforms[@]}"; do
  case "$p" in
    aarch64)
      tools/apt_install.sh g++-aarch64-linux-gnu qemu-user ||
        { echo "test_cross: needs g++-aarch64-linux-gnu and qemu-user" >&2; exit 1; }
      default="//base/... //context/... //deque/... //timer/... //alloc/... //sync/... //reactor/... //scheduler/..."
      ;;
    windows)
      tools/apt_install.sh g++-mingw-w64-x86-64-posix wine wine64 ||
        { echo "test_cross: needs g++-mingw-w64-x86-64-posix, wine and wine64" >&2; exit 1; }
      default="//base/... //context/... //deque/... //timer/... //alloc/... //sync/... //reactor/... //scheduler/... //api:fs_test //api:io_test //api:signals_test //api:sim_test //api:udp_test"
      ;;
    *)
      echo "usage: tools/test_cross.sh [aarch64|windows]..." >&2
      exit 2
      ;;
  esac
  WEFT_TEST_CONFIGS="$p" WEFT_TEST_TARGETS="${WEFT_CROSS_TARGETS:-$default}" tools/test_all.sh ||
    status=1
done
exit "$status"
