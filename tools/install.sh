#!/usr/bin/env bash
# tools/install.sh PREFIX: installs weft for programs built outside Bazel:
#   PREFIX/include/weft/<package>/<file>.h   the headers of //api:weft and everything it uses
#   PREFIX/lib/libweft.so.VERSION (+ .so.MAJOR, .so links; soname libweft.so.MAJOR), exporting
#                                            only weft's symbols (platforms/weft.map)
#   PREFIX/lib/libweft.a                     the same objects, for static linking
#   PREFIX/lib/pkgconfig/weft.pc             g++ prog.cc $(pkg-config --cflags --libs weft)
# Builds with ./bazelw -c opt first. tools/install_test.sh (run by CI) installs to a temporary
# prefix and builds examples/tour.cc with plain g++.
set -euo pipefail
usage() { sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; }
case "${1:-}" in
  -h | --help) usage; exit 0 ;;
  "" | -*) usage >&2; exit 2 ;;
esac
[ $# -eq 1 ] || { usage >&2; exit 2; }
mkdir -p "$1"
prefix="$(cd "$1" && pwd)"
cd "$(dirname "${BASH_SOURCE[0]}")/.."
repo="$(pwd)"
version=0.1.0
major=${version%%.*}

./bazelw build -c opt //:libweft.so >/dev/null 2>&1 || ./bazelw build -c opt //:libweft.so
bin="$(./bazelw info -c opt bazel-bin 2>/dev/null)"
execroot="$(./bazelw info -c opt execution_root 2>/dev/null)"
params="$bin/libweft.so-2.params"
# Bazel links the shared object from weft's objects as lazy archive members (--start-lib), so
# nothing no symbol asks for would be kept: link them here whole, with Bazel's own object list.
mapfile -t objs < <(grep '\.pic\.o$' "$params")
[ "${#objs[@]}" -gt 0 ] || { echo "install: no objects in $params" >&2; exit 1; }
mapfile -t libs < <(grep -E '^-l|^-pthread$' "$params" | awk '!seen[$0]++')

mkdir -p "$prefix/lib/pkgconfig" "$prefix/include"
(cd "$execroot" &&
  g++ -shared -o "$prefix/lib/libweft.so.$version" "${objs[@]}" \
    -Wl,-soname,"libweft.so.$major" -Wl,--version-script="$repo/platforms/weft.map" \
    -Wl,-z,relro,-z,now -Wl,--as-needed "${libs[@]}")
ln -sf "libweft.so.$version" "$prefix/lib/libweft.so.$major"
ln -sf "libweft.so.$major" "$prefix/lib/libweft.so"
rm -f "$prefix/lib/libweft.a"
(cd "$execroot" && ar rcs "$prefix/lib/libweft.a" "${objs[@]}")

# The headers //api:weft's closure has, each at weft/<package>/<path> (as weft_cc_library's
# include_prefix makes them in Bazel).
count=0
while read -r label; do
  path="${label#//}"
  path="${path/://}"
  path="${path#/}"
  mkdir -p "$prefix/include/weft/$(dirname "$path")"
  cp "$path" "$prefix/include/weft/$path"
  count=$((count + 1))
done < <(./bazelw query 'filter("\.h$", kind("source file", deps(//api:weft)))' 2>/dev/null | grep '^//')

# The define //context gives its dependents where the inline switch is built (context.h,
# jump_context_inline): without it a program still works, with jump_context in its place.
cflags="-I\${includedir} -std=c++20"
if [ "$(uname -m)" = x86_64 ]; then cflags="$cflags -DWEFT_CONTEXT_INLINE_X86_64_SYSV"; fi

cat >"$prefix/lib/pkgconfig/weft.pc" <<PC
prefix=$prefix
includedir=\${prefix}/include
libdir=\${prefix}/lib

Name: weft
Description: M:N work-stealing runtime of stackful fibers with io_uring I/O
Version: $version
Requires.private: liburing
Cflags: $cflags
Libs: -L\${libdir} -lweft -pthread
Libs.private: ${libs[*]}
PC
echo "install: $prefix (libweft.so.$version, libweft.a, $count headers, lib/pkgconfig/weft.pc)"
