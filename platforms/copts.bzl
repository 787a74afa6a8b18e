"""Compiler options and rule wrappers that every weft target uses.

They travel with weft's BUILD files, so a consuming monorepo builds weft as weft is built here
without copying a flag: C++20 (weft's own compile actions get -std=c++20 whatever the consumer's
default; a consumer's file that includes a weft header must itself be C++20, and
weft/base/config.h says so with a clear error otherwise) and the warnings. Headers are included
as "weft/<package>/<file>.h" (include_prefix), so that a consumer's own //base or //sync never
shadows them. The opt/dbg/asan/tsan/ubsan configs are in //:.bazelrc, for a consumer's own
.bazelrc to decide.
"""

WEFT_COPTS = [
    "-std=c++20",
    "-Wall",
    "-Wextra",
    "-Wno-unused-parameter",
    "-Wshadow",
    "-Wnon-virtual-dtor",
]

# Windows: Winsock 2 rather than <windows.h>'s old winsock.h, no min/max macros, Windows 8 APIs
# (WaitOnAddress, SetFileCompletionNotificationModes).
_WEFT_OS_COPTS = select({
    "//platforms:windows_x86_64": [
        "-DWIN32_LEAN_AND_MEAN",
        "-DNOMINMAX",
        "-D_WIN32_WINNT=0x0602",
    ],
    "//conditions:default": [],
})

WEFT_TEST_COPTS = WEFT_COPTS

def weft_cc_library(name, copts = [], **kwargs):
    """A cc_library whose headers are included as "weft/<package>/<file>.h"."""
    native.cc_library(
        name = name,
        copts = WEFT_COPTS + copts + _WEFT_OS_COPTS,
        # The prefix goes before each header's package-relative path.
        include_prefix = "weft/" + native.package_name(),
        **kwargs
    )

def weft_cc_binary(name, copts = [], **kwargs):
    native.cc_binary(name = name, copts = WEFT_COPTS + copts + _WEFT_OS_COPTS, **kwargs)

def weft_cc_test(name, size = "small", copts = [], deps = [], **kwargs):
    """A GoogleTest cc_test; gtest_main is linked unless the test brings its own main."""
    native.cc_test(
        name = name,
        size = size,
        copts = WEFT_TEST_COPTS + copts + _WEFT_OS_COPTS,
        deps = deps + ["@com_google_googletest//:gtest_main"],
        **kwargs
    )

def weft_cc_benchmark(name, copts = [], deps = [], tags = [], **kwargs):
    """A Google Benchmark binary: testonly, tagged `benchmark`; run it with `bazel run -c opt`."""
    native.cc_binary(
        name = name,
        testonly = True,
        copts = WEFT_COPTS + copts,
        deps = deps + ["@com_github_google_benchmark//:benchmark_main"],
        tags = tags + ["benchmark"],
        # Google Benchmark comes from the host's Debian package: skipped in cross builds.
        target_compatible_with = ["//platforms:debian_libraries_host"],
        **kwargs
    )

def weft_model_test(name, size = "small", tags = [], **kwargs):
    """A test of //model's checker: built and run only in the model configuration
    (--config=model), where weft::atomic reports to the checker; skipped elsewhere."""
    weft_cc_test(
        name = name,
        size = size,
        tags = tags + ["model"],
        target_compatible_with = select({
            "//platforms:model": [],
            "//conditions:default": ["//platforms:incompatible"],
        }),
        **kwargs
    )
