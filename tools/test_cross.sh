#!/usr/bin/env bash
# tools/test_cross.sh: weft's test suites cross-built for linux_aarch64 and run under qemu-user
# (docs/platforms.md). Installs the cross compiler and qemu from Debian when missing, then runs
# tools/test_all.sh in the `aarch64` configuration of //:.bazelrc on the packages the port
# claims; the last line is tools/test_all.sh's "N passed, M failed".
#
#   tools/test_cross.sh
#   WEFT_CROSS_TARGETS="//context/..." tools/test_cross.sh
#
# Left out: the api suites (a 10,000-connection stress test, too slow under emulation) and the
# shell tests of examples and bench, which run host programs. Windows x64 (--config=windows,
# under Wine) is not in this run yet: see docs/platforms.md.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

tools/apt_install.sh g++-aarch64-linux-gnu qemu-user ||
  { echo "test_cross: needs g++-aarch64-linux-gnu and qemu-user" >&2; exit 1; }
WEFT_TEST_CONFIGS=aarch64 \
  WEFT_TEST_TARGETS="${WEFT_CROSS_TARGETS:-//base/... //context/... //deque/... //timer/... //alloc/... //sync/... //reactor/... //scheduler/...}" \
  exec tools/test_all.sh
