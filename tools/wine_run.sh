#!/bin/bash
# tools/wine_run.sh: runs a Windows test binary under Wine; the windows config's --run_under.
#
# Wine keeps its state in a prefix (a fake C: drive and registry). Creating one takes ~10 s, so
# every test shares one, made once under a lock: $WEFT_WINEPREFIX, else
# /tmp/weft-wineprefix-$UID. WINEDEBUG=-all keeps Wine's own diagnostics out of the test logs.
set -euo pipefail

wine=$(command -v wine64 || command -v wine || true)
if [[ -z "$wine" ]]; then
  echo "wine_run.sh: Wine is not installed (tools/test_cross.sh installs it: apt-get install wine64)" >&2
  exit 127
fi

export WINEPREFIX="${WEFT_WINEPREFIX:-/tmp/weft-wineprefix-$(id -u)}"
export WINEDEBUG="${WINEDEBUG:--all}"
# No desktop integration or Mono/Gecko installers: a test prefix needs none of them.
export WINEDLLOVERRIDES="${WINEDLLOVERRIDES:-mscoree,mshtml,winemenubuilder.exe=}"

if [[ ! -f "$WINEPREFIX/system.reg" ]]; then
  mkdir -p "$(dirname "$WINEPREFIX")"
  (
    flock 9
    if [[ ! -f "$WINEPREFIX/system.reg" ]]; then
      "$wine" wineboot --init >/dev/null 2>&1 || true
      wineserver_bin=$(command -v wineserver || true)
      [[ -n "$wineserver_bin" ]] && "$wineserver_bin" --wait || true
    fi
  ) 9>"$WINEPREFIX.lock"
fi

# Bazel hands GoogleTest the path of its XML report in XML_OUTPUT_FILE, a Unix path. GoogleTest
# built for Windows takes "/x/y" for a relative path and prefixes the working directory; Wine maps
# the Unix root to drive Z:, so Z:\x\y names the same file. (Other files Bazel names, such as
# TEST_PREMATURE_EXIT_FILE, are opened as given, which Wine resolves on the current drive, Z:.)
if [[ "${XML_OUTPUT_FILE:-}" == /* ]]; then
  export XML_OUTPUT_FILE="Z:${XML_OUTPUT_FILE//\//\\}"
fi

exec "$wine" "$@"
