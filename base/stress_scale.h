// base/stress_scale.h: the knob that makes weft's stress tests run longer, and which sanitizer
// a test runs under. Tests size their loops
// as base * StressScale(); WEFT_STRESS_SCALE=N (N >= 1, default 1) in the environment sets it, and
// tools/test_all.sh passes it through to Bazel.

#ifndef WEFT_BASE_STRESS_SCALE_H_
#define WEFT_BASE_STRESS_SCALE_H_

#include <cstdlib>

namespace weft::testing {

inline int StressScale() {
  const char* s = std::getenv("WEFT_STRESS_SCALE");
  int v = s != nullptr ? std::atoi(s) : 1;
  return v > 0 ? v : 1;
}

// kTsan / kAsan: which sanitizer the test runs under. Under TSan every fiber creation and switch
// costs tens of microseconds (TSan keeps a large state per fiber), so fiber-count tests scale down.
#if defined(__SANITIZE_THREAD__)
inline constexpr bool kTsan = true;
#else
inline constexpr bool kTsan = false;
#endif
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kAsan = true;
#else
inline constexpr bool kAsan = false;
#endif

}  // namespace weft::testing

#endif  // WEFT_BASE_STRESS_SCALE_H_
