#!/usr/bin/env bash
# examples/consumer/check.sh: builds and tests this consumer workspace, which takes weft exactly as
# the README's recipe shows (CI runs it from .ci/run). Asserts:
#   - the echo test on @weft//api:weft passes, beside the consumer's own base/result.h and
#     sync/mutex.h (same paths as weft's headers);
#   - the deque-only program runs, and its dependency closure holds weft's deque and base only:
#     no reactor, scheduler, sync, api or liburing;
#   - the same program compiled without C++20 fails first with weft's "weft needs C++20" message.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
bazel="${BAZEL:-bazel}"
# Quiet test logs, as weft's own .bazelrc asks (optional for a consumer: Debian's 4.2.3
# linux-sandbox prints debug lines into every log).
flags=(--spawn_strategy=processwrapper-sandbox)
"$bazel" test "${flags[@]}" --test_output=errors //echo:echo_test
"$bazel" run "${flags[@]}" //deque_only
closure="$("$bazel" query 'deps(//deque_only)' 2>/dev/null)"
if grep -E '^@weft//(reactor|scheduler|sync|api)[/:]|^@liburing//' <<<"$closure"; then
  echo "consumer: //deque_only pulls in more of weft than the deque (above)" >&2
  exit 1
fi
grep -q '^@weft//deque:chase_lev$' <<<"$closure" || { echo "consumer: no @weft//deque:chase_lev in the closure" >&2; exit 1; }
# Code of the consumer's compiled without C++20 gets weft's one-line reason first.
if "$bazel" build "${flags[@]}" //deque_only:deque_only_without_cxx20 >/tmp/weft-consumer-cxx.log 2>&1; then
  echo "consumer: a pre-C++20 build of weft's headers succeeded; expected weft's C++20 error" >&2
  exit 1
fi
grep -m1 ": error:" /tmp/weft-consumer-cxx.log | grep -q "weft needs C++20" ||
  { echo "consumer: the first error is not weft's C++20 message:" >&2; grep -m3 ": error:" /tmp/weft-consumer-cxx.log >&2; exit 1; }
echo "consumer: ok ($(grep -c '^@weft//' <<<"$closure") weft targets in //deque_only's closure)"
