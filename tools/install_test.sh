#!/usr/bin/env bash
# tools/install_test.sh: weft outside Bazel, as a non-Bazel user gets it (CI runs it from .ci/run).
# Installs to a temporary prefix with tools/install.sh, then:
#   - builds examples/tour.cc with plain g++ and `pkg-config --cflags --libs weft`, and runs it;
#   - links the same program against libweft.a, and runs it;
#   - builds a program that switches contexts (inline and out of line) the same way, and runs it;
#   - checks that libweft.so exports weft's symbols only (nm -D) and has its soname.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
tools/install.sh "$tmp/prefix"
export PKG_CONFIG_PATH="$tmp/prefix/lib/pkgconfig"
fail() { echo "install_test: $*" >&2; exit 1; }

# shellcheck disable=SC2046
g++ -O1 -o "$tmp/tour" examples/tour.cc $(pkg-config --cflags --libs weft) -Wl,-rpath,"$tmp/prefix/lib"
"$tmp/tour" >"$tmp/out" || fail "the tour built against libweft.so failed"
grep -q "echoed hello" "$tmp/out" || fail "the tour (shared) printed: $(head -3 "$tmp/out")"

# shellcheck disable=SC2046
g++ -O1 -o "$tmp/tour_static" examples/tour.cc $(pkg-config --cflags weft) "$tmp/prefix/lib/libweft.a" \
  -pthread $(pkg-config --libs liburing)
"$tmp/tour_static" >"$tmp/out" || fail "the tour built against libweft.a failed"
grep -q "echoed hello" "$tmp/out" || fail "the tour (static) printed: $(head -3 "$tmp/out")"
# (Outputs are read whole before grep: with pipefail, a `grep -q` that stops reading early can
# fail the pipeline by the writer's SIGPIPE.)
needs="$(ldd "$tmp/tour_static")"
grep -q libweft <<<"$needs" && fail "the static tour still needs libweft.so"

# The context switch alone through the installed headers, inline (as weft.pc enables it on x86-64)
# and out of line, into libweft.so's asm.
cat >"$tmp/switch.cc" <<'CC'
#include <cstdio>
#include "weft/context/context.h"
#include "weft/context/stack.h"
int main() {
  weft::Stack stack = std::move(weft::StackPool::default_pool().allocate({.size = 64 << 10})).value();
  weft::Context c = *weft::make_context(stack.span(), [](weft::Transfer t) {
    for (;;) {
      ++*static_cast<int*>(t.data);
      t = weft::jump_context(t.from, t.data);
    }
  });
  int count = 0;
  for (int i = 0; i < 1000; ++i) c = weft::jump_context_inline(c, &count).from;
  std::printf("switched %d\n", count);
  weft::discard_context(c);
}
CC
# shellcheck disable=SC2046
g++ -O2 -o "$tmp/switch" "$tmp/switch.cc" $(pkg-config --cflags --libs weft) -Wl,-rpath,"$tmp/prefix/lib"
"$tmp/switch" >"$tmp/out" || fail "the context switch built against libweft.so failed"
grep -q "switched 1000" "$tmp/out" || fail "the context switch printed: $(head -3 "$tmp/out")"

so="$tmp/prefix/lib/libweft.so"
headers="$(objdump -p "$so")"
grep -q 'SONAME *libweft.so.0$' <<<"$headers" || fail "libweft.so's soname is not libweft.so.0"
exported="$(nm -D --defined-only "$so" | awk '{print $3}' | c++filt)"
[ -n "$exported" ] || fail "libweft.so exports nothing"
# weft's C symbols: the context switch's asm, which context.h's inline functions call.
others="$(grep -v -E '^(weft_context_(jump|ontop|resume_frame)$|weft::|(typeinfo|typeinfo name|vtable|VTT|guard variable) for weft::)' <<<"$exported" || true)"
[ -z "$others" ] || fail "libweft.so exports symbols that are not weft's: $(head -5 <<<"$others")"
echo "install_test: ok ($(wc -l <<<"$exported") weft symbols exported; the tour runs shared and static)"
