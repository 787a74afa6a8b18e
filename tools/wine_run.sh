#!/bin/bash
# tools/wine_run.sh: runs a Windows test binary under Wine; the windows config's --run_under.
#
# Wine keeps its state in a prefix (a fake C: drive and registry). Creating one takes ~10 s, so
# every test shares one, made once under a lock: $WEFT_WINEPREFIX, else
# /tmp/weft-wineprefix-$UID. WINEDEBUG=-all keeps Wine's own diagnostics out of the test logs.
set -euo pipefail

wine=$(command -v wine64 || command -v wine || true)
if [[ -z "$wine" ]]; then
  echo "wine_run.sh: Wine is not installed (tools/test_cross.sh installs it: apt-get install wine wine64)" >&2
  exit 127
fi

wineserver_bin=$(command -v wineserver || true)

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
      [[ -n "$wineserver_bin" ]] && "$wineserver_bin" --wait || true
    fi
  ) 9>"$WINEPREFIX.lock"
fi

# Every Wine process of a prefix talks to one wineserver, started by the first of them, as its
# child. Bazel kills a test's whole process group when the test ends, wineserver included, and
# every other test still running under Wine then dies or hangs with it. So the server is started
# here in a session of its own (setsid), kept for 60 s after its last client exits; when one
# already runs, wineserver exits at once (status 2).
if [[ -n "$wineserver_bin" ]]; then
  (
    flock 9
    setsid "$wineserver_bin" -p60 >/dev/null 2>&1 || true
  ) 9>"$WINEPREFIX.lock"
fi

# Bazel hands GoogleTest the path of its XML report in XML_OUTPUT_FILE, a Unix path. GoogleTest
# built for Windows takes "/x/y" for a relative path and prefixes the working directory; Wine maps
# the Unix root to drive Z:, so Z:\x\y names the same file. (Other files Bazel names, such as
# TEST_PREMATURE_EXIT_FILE, are opened as given, which Wine resolves on the current drive, Z:.)
if [[ "${XML_OUTPUT_FILE:-}" == /* ]]; then
  export XML_OUTPUT_FILE="Z:${XML_OUTPUT_FILE//\//\\}"
fi

# A crash starts winedbg, which prints a backtrace (worth keeping in the log) and then lets
# Wine exit 0 as if the test had passed. GoogleTest creates TEST_PREMATURE_EXIT_FILE when it
# starts and deletes it when it finishes, so a file left behind means the test died.
rc=0
"$wine" "$@" || rc=$?
if [[ $rc -eq 0 && -n "${TEST_PREMATURE_EXIT_FILE:-}" && -f "$TEST_PREMATURE_EXIT_FILE" ]]; then
  echo "wine_run.sh: the test exited before GoogleTest finished (a crash?); failing it" >&2
  rc=1
fi
exit $rc
