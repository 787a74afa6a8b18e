"""A cc_toolchain_config for a Debian GCC cross compiler (Bazel 4.2.3 has no auto-configuration
for cross builds). One rule serves both targets weft cross-builds: linux_aarch64
(g++-aarch64-linux-gnu) and windows_x86_64 (g++-mingw-w64-x86-64-posix).
"""

load("@bazel_tools//tools/build_defs/cc:action_names.bzl", "ACTION_NAMES")
load(
    "@bazel_tools//tools/cpp:cc_toolchain_config_lib.bzl",
    "artifact_name_pattern",
    "feature",
    "flag_group",
    "flag_set",
    "tool_path",
    "with_feature_set",
)

_COMPILE = [
    ACTION_NAMES.assemble,
    ACTION_NAMES.preprocess_assemble,
    ACTION_NAMES.c_compile,
    ACTION_NAMES.cpp_compile,
    ACTION_NAMES.cpp_header_parsing,
    ACTION_NAMES.cpp_module_compile,
    ACTION_NAMES.linkstamp_compile,
]
_CXX = [ACTION_NAMES.cpp_compile, ACTION_NAMES.cpp_header_parsing, ACTION_NAMES.linkstamp_compile]
_LINK = [
    ACTION_NAMES.cpp_link_executable,
    ACTION_NAMES.cpp_link_dynamic_library,
    ACTION_NAMES.cpp_link_nodeps_dynamic_library,
]

def _flags(actions, flags, with_features = []):
    return flag_set(actions = actions, flag_groups = [flag_group(flags = flags)], with_features = with_features)

def _impl(ctx):
    prefix = ctx.attr.tool_prefix
    suffix = ctx.attr.tool_suffix
    tools = {
        "ar": "/usr/bin/{}ar".format(prefix),
        "cpp": "/usr/bin/{}cpp{}".format(prefix, suffix),
        "gcc": "/usr/bin/{}gcc{}".format(prefix, suffix),
        "gcov": "/usr/bin/{}gcov{}".format(prefix, suffix),
        "ld": "/usr/bin/{}ld".format(prefix),
        "nm": "/usr/bin/{}nm".format(prefix),
        "objdump": "/usr/bin/{}objdump".format(prefix),
        "strip": "/usr/bin/{}strip".format(prefix),
    }
    features = [
        feature(name = "opt"),
        feature(name = "dbg"),
        feature(name = "fastbuild"),
        feature(name = "supports_pic", enabled = ctx.attr.supports_pic),
        # Windows targets: binaries and tests are `<name>.exe`, which Wine (and Windows) wants.
        feature(name = "targets_windows", enabled = ctx.attr.targets_windows),
        # Tests link their dependencies statically (alwayslink libraries whole): a binary run
        # under qemu-user or Wine then needs no shared objects of weft's beside it.
        feature(name = "supports_dynamic_linker", enabled = False),
        feature(
            name = "default_compile_flags",
            enabled = True,
            flag_sets = [
                _flags(_COMPILE, [
                    "-U_FORTIFY_SOURCE",
                    "-fstack-protector",
                    "-Wall",
                    "-fno-omit-frame-pointer",
                    # Report headers by the path they were found under (as the host toolchain
                    # does): GoogleTest's sources are reached through a symlink in its repository.
                    "-fno-canonical-system-headers",
                    # Builds are reproducible: no dates in the objects.
                    "-Wno-builtin-macro-redefined",
                    "-D__DATE__=\"redacted\"",
                    "-D__TIMESTAMP__=\"redacted\"",
                    "-D__TIME__=\"redacted\"",
                ] + ctx.attr.extra_compile_flags),
                _flags(_COMPILE, ["-g0", "-O2", "-DNDEBUG", "-ffunction-sections", "-fdata-sections"], [with_feature_set(features = ["opt"])]),
                _flags(_COMPILE, ["-g"], [with_feature_set(features = ["dbg"])]),
                _flags(_CXX, ["-std=c++20"]),
            ],
        ),
        feature(
            name = "default_link_flags",
            enabled = True,
            flag_sets = [
                _flags(_LINK, ctx.attr.extra_link_flags + ["-lstdc++", "-lm"]),
                _flags(_LINK, ["-Wl,--gc-sections"], [with_feature_set(features = ["opt"])]),
            ],
        ),
        # Lets `copts`/`linkopts` of the targets follow the defaults above.
        feature(
            name = "user_compile_flags",
            enabled = True,
            flag_sets = [flag_set(actions = _COMPILE, flag_groups = [flag_group(
                flags = ["%{user_compile_flags}"],
                iterate_over = "user_compile_flags",
                expand_if_available = "user_compile_flags",
            )])],
        ),
    ]
    return cc_common.create_cc_toolchain_config_info(
        ctx = ctx,
        features = features,
        cxx_builtin_include_directories = ctx.attr.builtin_include_directories,
        toolchain_identifier = ctx.attr.name,
        host_system_name = "x86_64-linux-gnu",
        target_system_name = ctx.attr.target_system_name,
        target_cpu = ctx.attr.target_cpu,
        target_libc = ctx.attr.target_libc,
        compiler = "gcc",
        abi_version = "gcc",
        abi_libc_version = ctx.attr.target_libc,
        tool_paths = [tool_path(name = k, path = v) for k, v in tools.items()],
        artifact_name_patterns = [
            artifact_name_pattern(category_name = "executable", prefix = "", extension = ".exe"),
        ] if ctx.attr.targets_windows else [],
    )

cross_cc_toolchain_config = rule(
    implementation = _impl,
    attrs = {
        "builtin_include_directories": attr.string_list(mandatory = True),
        "extra_compile_flags": attr.string_list(),
        "extra_link_flags": attr.string_list(),
        "supports_pic": attr.bool(default = True),
        "target_cpu": attr.string(mandatory = True),
        "target_libc": attr.string(mandatory = True),
        "target_system_name": attr.string(mandatory = True),
        "targets_windows": attr.bool(doc = "PE executables: `.exe` names"),
        "tool_prefix": attr.string(mandatory = True, doc = "e.g. aarch64-linux-gnu-"),
        "tool_suffix": attr.string(doc = "e.g. -posix for mingw's posix thread model"),
    },
    provides = [CcToolchainConfigInfo],
)

def cross_cc_toolchain(name, os, cpu, **config):
    """A cross GCC toolchain for @platforms//os:<os> + @platforms//cpu:<cpu>, built on x86-64 Linux:
    its config (`config` are cross_cc_toolchain_config's attributes), the cc_toolchain, and the
    `<name>_toolchain` target that toolchain resolution picks."""
    cross_cc_toolchain_config(name = name + "_config", **config)
    native.cc_toolchain(
        name = name,
        all_files = ":empty",
        compiler_files = ":empty",
        dwp_files = ":empty",
        linker_files = ":empty",
        objcopy_files = ":empty",
        strip_files = ":empty",
        toolchain_config = ":" + name + "_config",
    )
    native.toolchain(
        name = name + "_toolchain",
        exec_compatible_with = [
            "@platforms//os:linux",
            "@platforms//cpu:x86_64",
        ],
        target_compatible_with = [
            "@platforms//os:" + os,
            "@platforms//cpu:" + cpu,
        ],
        toolchain = ":" + name,
        toolchain_type = "@bazel_tools//tools/cpp:toolchain_type",
    )
