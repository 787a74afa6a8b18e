#!/usr/bin/env bash
# api/c/weft_ctypes_test.sh: runs weft_ctypes_test.py against the libweft.so Bazel built ($1).
# A sanitizer build's libweft.so needs its sanitizer's runtime loaded first, which python3 is
# not built with: skipped there (the C test covers those configurations).
set -euo pipefail
if readelf -d "$1" 2>/dev/null | grep -qE 'lib(a|t|ub)san'; then
  echo "skipped: libweft.so is a sanitizer build"
  exit 0
fi
exec python3 "$(dirname "$0")/weft_ctypes_test.py" "$1"
