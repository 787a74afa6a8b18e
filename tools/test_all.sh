#!/usr/bin/env bash
# tools/test_all.sh: runs every weft test in every configuration CI checks, then prints one line
# "N passed, M failed" counting test cases (GoogleTest cases from each test's XML; a test binary
# that did not build or produced no result counts as one failure, unless the configuration's
# platform cannot build it: then it is skipped). Exit status is non-zero on any failure.
#
#   tools/test_all.sh                      # default asan tsan ubsan ucontext epoll faults asan_faults model
#   WEFT_TEST_CONFIGS="default tsan" tools/test_all.sh
#   WEFT_STRESS_SCALE=10 tools/test_all.sh # stress tests run 10x longer
#   WEFT_TEST_TARGETS="//context/... //deque/..." tools/test_all.sh   # some packages (default //...)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

case "${1:-}" in
  "") ;;
  -h | --help)
    sed -n '2,/^set /{/^set /d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"
    exit 0
    ;;
  *)
    echo "tools/test_all.sh: takes no arguments (configure it with WEFT_TEST_*; see --help)" >&2
    exit 2
    ;;
esac

read -r -a configs <<<"${WEFT_TEST_CONFIGS:-default asan tsan ubsan ucontext epoll faults asan_faults model}"
passed=0
failed=0
status=0

# The first ./bazelw call installs what is missing.
read -r -a patterns <<<"${WEFT_TEST_TARGETS:-//...}"
union="${patterns[*]}"
# The model configuration runs only the model checker's tests (tagged "model", skipped in every
# other configuration); the others run everything else.
all_tests="tests(${union// / + })"
model_targets=$(./bazelw query "attr(tags, '\bmodel\b', $all_tests)") ||
  { echo "0 passed, 1 failed"; exit 1; }
other_targets=$(./bazelw query "$all_tests except attr(tags, '\bmodel\b', $all_tests)") ||
  { echo "0 passed, 1 failed"; exit 1; }
# The faults configurations (soft faults injected) skip the raw Reactor's tests (no_faults).
fault_targets=$(./bazelw query "$all_tests except attr(tags, '\b(model|no_faults)\b', $all_tests)") ||
  { echo "0 passed, 1 failed"; exit 1; }

for config in "${configs[@]}"; do
  args=()
  [ "$config" = default ] || args=(--config="$config")
  targets=$other_targets
  if [ "$config" = model ]; then
    targets=$model_targets
    args+=(--test_tag_filters=model --build_tests_only)
  elif [ "$config" = faults ] || [ "$config" = asan_faults ]; then
    targets=$fault_targets
    args+=(--test_tag_filters=-no_faults)
  fi
  echo "=== weft tests: $config"
  env_args=()
  [ -n "${WEFT_STRESS_SCALE:-}" ] && env_args=(--test_env=WEFT_STRESS_SCALE="$WEFT_STRESS_SCALE")
  out=$(mktemp)
  ./bazelw test "${args[@]}" "${env_args[@]}" -- "${patterns[@]}" 2>&1 | tee "$out"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  # Targets that did not build (or were not run) this time: a test.xml in bazel-testlogs would be
  # an older run's, so they count as failures, whatever that file says.
  unbuilt=$(grep -E '^//[^ ]+ +(FAILED TO BUILD|NO STATUS)' "$out" | awk '{print $1}' || true)
  rm -f "$out"
  testlogs=$(./bazelw info "${args[@]}" bazel-testlogs 2>/dev/null)
  incompatible=unknown
  for label in $targets; do
    path=${label#//}
    xml="$testlogs/${path/://}/test.xml"
    if grep -qxF -- "$label" <<<"$unbuilt"; then
      echo "not built or not run: $label ($config)"
      failed=$((failed + 1))
      continue
    fi
    if [ ! -f "$xml" ]; then
      # A target the configuration's platform cannot build (target_compatible_with: a Linux-only
      # test in the windows or aarch64 configuration) is skipped by Bazel, not failed.
      if [ "$incompatible" = unknown ]; then
        config_args=()
        [ "$config" = default ] || config_args=(--config="$config")
        incompatible=$(./bazelw cquery "${config_args[@]}" "$all_tests" --output=starlark \
          --starlark:expr='str(target.label) if "IncompatiblePlatformProvider" in providers(target) else ""' \
          2>/dev/null | grep '^//' || true)
      fi
      if grep -qxF -- "$label" <<<"$incompatible"; then
        echo "skipped, incompatible with the platform: $label ($config)"
        continue
      fi
      echo "no result: $label ($config)"
      failed=$((failed + 1))
      continue
    fi
    # The first element carrying the totals: <testsuites ...> from GoogleTest, <testsuite ...>
    # from Bazel when the binary died before writing its own.
    head=$(grep -o -m1 '<testsuites\{0,1\} [^>]*tests="[0-9]*"[^>]*' "$xml")
    get() { sed -n "s/.* $1=\"\([0-9]*\)\".*/\1/p" <<<"$head"; }
    tests=$(get tests)
    bad=$(($(get failures || echo 0) + $(get errors || echo 0)))
    disabled=$(get disabled)
    passed=$((passed + ${tests:-0} - bad - ${disabled:-0}))
    failed=$((failed + bad))
    [ "$bad" -eq 0 ] || echo "failed: $label ($config)"
  done
done

[ "$failed" -eq 0 ] || status=1
echo "$passed passed, $failed failed"
exit "$status"
