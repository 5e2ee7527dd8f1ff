#!/bin/bash
# Installs cgc under a prefix, built here with Bazel:
#   PREFIX/include/cgc.h, cgc_api.h
#   PREFIX/lib/libcgc.so.1.MINOR.PATCH, libcgc.so.1 -> it, libcgc.so -> libcgc.so.1
#   PREFIX/lib/libcgc_torch.so.1          (the PyTorch bridge, where it builds)
#   PREFIX/lib/pkgconfig/cgc.pc           (pkg-config --cflags --libs cgc)
#   PREFIX/lib/cmake/cgc/cgcConfig.cmake, cgcConfigVersion.cmake
#                                         (find_package(cgc 1 REQUIRED CONFIG) -> target cgc::cgc)
# The version comes from capi/cgc.h (CGC_VERSION_MAJOR/MINOR/PATCH), the templates from
# tools/install/. Running it again over an existing prefix replaces what it installed.
# tools/check_install.sh installs into a temporary prefix and builds a consumer against it.
#
#   tools/install.sh PREFIX        (BAZEL=... names another bazel, CC=... the C compiler)
set -euo pipefail

if [ $# -ne 1 ] || [ -z "$1" ] || [ "$1" = "-h" ] || [ "$1" = "--help" ]; then
  echo "usage: $0 PREFIX" >&2
  echo "  builds libcgc.so with Bazel and installs include/cgc.h and cgc_api.h, lib/libcgc.so.1.*, lib/pkgconfig/cgc.pc" >&2
  echo "  and lib/cmake/cgc/ (find_package(cgc) -> cgc::cgc) under PREFIX" >&2
  exit 2
fi

root="$(cd "$(dirname "$0")/.." && pwd)"
templates="$root/tools/install"
bazel="${BAZEL:-bazel}"
cc="${CC:-cc}"

# The version, from the one place that defines it.
header="$root/capi/cgc.h"
version_part() {
  local v
  v="$(sed -n "s/^#define CGC_VERSION_$1[[:space:]]\{1,\}\([0-9]\{1,\}\)\([^0-9].*\)\{0,1\}\$/\1/p" "$header")"
  if ! [[ "$v" =~ ^[0-9]+$ ]]; then
    echo "install: cannot read CGC_VERSION_$1 from $header" >&2
    exit 1
  fi
  echo "$v"
}
major="$(version_part MAJOR)"
minor="$(version_part MINOR)"
patch="$(version_part PATCH)"
version="$major.$minor.$patch"

# An absolute prefix: pkg-config's file names it.
mkdir -p "$1"
prefix="$(cd "$1" && pwd)"

echo "== building libcgc.so $version with Bazel"
(cd "$root" && "$bazel" build //:libcgc.so)
bin="$(cd "$root" && "$bazel" info bazel-bin 2>/dev/null)"
lib_built="$bin/libcgc.so"
[ -f "$lib_built" ] || { echo "install: $lib_built was not built" >&2; exit 1; }
soname="$(readelf -d "$lib_built" 2>/dev/null | sed -n 's/.*(SONAME).*\[\(.*\)\].*/\1/p' || true)"
if [ -n "$soname" ] && [ "$soname" != "libcgc.so.$major" ]; then
  echo "install: $lib_built has SONAME $soname, the header says libcgc.so.$major" >&2
  exit 1
fi

torch_built=""
if (cd "$root" && "$bazel" build //bindings/torch_bridge:libcgc_torch.so); then
  torch_built="$bin/bindings/torch_bridge/libcgc_torch.so"
  [ -f "$torch_built" ] || torch_built=""
else
  echo "install: the PyTorch bridge (//bindings/torch_bridge:libcgc_torch.so) did not build; installing without it" >&2
fi

echo "== installing into $prefix"
installed=()
libdir="$prefix/lib"
cmakedir="$libdir/cmake/cgc"
mkdir -p "$prefix/include" "$libdir/pkgconfig" "$cmakedir"

install -m 0644 "$header" "$prefix/include/cgc.h"
install -m 0644 "$root/capi/cgc_api.h" "$prefix/include/cgc_api.h" # cgc.h includes it: the function table
installed+=("$prefix/include/cgc.h" "$prefix/include/cgc_api.h")

real="libcgc.so.$version"
install -m 0755 "$lib_built" "$libdir/$real"
ln -sfn "$real" "$libdir/libcgc.so.$major"
ln -sfn "libcgc.so.$major" "$libdir/libcgc.so"
installed+=("$libdir/$real" "$libdir/libcgc.so.$major -> $real" "$libdir/libcgc.so -> libcgc.so.$major")

if [ -n "$torch_built" ]; then
  install -m 0755 "$torch_built" "$libdir/libcgc_torch.so.1"
  installed+=("$libdir/libcgc_torch.so.1")
fi

# @NAME@ in a template -> its value; values are escaped for sed's replacement text.
sed_escape() { printf '%s' "$1" | sed -e 's/[\\|&]/\\&/g'; }
render() {
  local template="$1" out="$2" tmp
  tmp="$(mktemp "$out.XXXXXX")"
  sed -e "s|@PREFIX@|$(sed_escape "$prefix")|g" \
      -e "s|@CGC_VERSION@|$version|g" \
      -e "s|@CGC_VERSION_MAJOR@|$major|g" \
      -e "s|@CGC_VERSION_MINOR@|$minor|g" \
      -e "s|@CGC_VERSION_PATCH@|$patch|g" \
      "$templates/$template" >"$tmp"
  if grep -n '@[A-Z_]*@' "$tmp" >&2; then
    rm -f "$tmp"
    echo "install: $templates/$template has a placeholder that install.sh does not fill (above)" >&2
    exit 1
  fi
  chmod 0644 "$tmp"
  mv -f "$tmp" "$out"
  installed+=("$out")
}
render cgc.pc.in "$libdir/pkgconfig/cgc.pc"
render cgcConfig.cmake.in "$cmakedir/cgcConfig.cmake"
render cgcConfigVersion.cmake.in "$cmakedir/cgcConfigVersion.cmake"

# The installed header stands alone: it compiles by itself from the install directory.
if command -v "$cc" >/dev/null 2>&1; then
  if ! printf '#include <cgc.h>\nint main(void) { return cgc_version() == 0; }\n' |
      "$cc" -std=c11 -Wall -Wextra -Werror -fsyntax-only -I"$prefix/include" -x c -; then
    echo "install: $prefix/include/cgc.h does not compile on its own" >&2
    exit 1
  fi
else
  echo "install: no C compiler ($cc); the installed header was not compiled" >&2
fi

echo "installed cgc $version:"
printf '  %s\n' "${installed[@]}"
