// base/config.h: what every weft header needs from the compiler, checked once: C++20. The first
// weft header a translation unit includes brings it in (through weft/base/result.h or
// weft/base/atomic.h), so a consumer that compiles its own code in an older mode gets this
// message instead of errors from inside weft. (weft's own sources get -std=c++20 from their
// targets: platforms/copts.bzl.)
//
// Defines: nothing.

#ifndef WEFT_BASE_CONFIG_H_
#define WEFT_BASE_CONFIG_H_

// The message stays on one line, as the compiler prints it.
// clang-format off
#if !defined(__cplusplus) || __cplusplus < 202002L
#error "weft needs C++20: compile the code that includes weft's headers with -std=c++20 (Bazel: --cxxopt=-std=c++20 --host_cxxopt=-std=c++20)"
#endif
// clang-format on

#endif  // WEFT_BASE_CONFIG_H_
