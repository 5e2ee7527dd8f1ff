#!/bin/bash
# Checks tools/install.sh end to end: installs into a fresh temporary prefix, then builds the
# consumer (examples/consumer) twice against it, with pkg-config and with CMake's
# find_package(cgc), and runs both (their no-GPU path on a machine without a GPU). Also checks the
# library's links and SONAME, that the installed header compiles alone as C11 and C++17, that the
# CMake package is relocatable and refuses another major version, and that installing again over
# the prefix works. Ends with "install: N passed, N failed"; exit status 0 only if none failed.
#
# Needs cc, c++, readelf, pkg-config (Debian: pkgconf) and cmake (Debian: cmake); it installs
# nothing itself and counts a missing tool as a failure.
#
#   tools/check_install.sh        (KEEP=1 keeps the temporary directory)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

passed=0
failed=0
pass() { passed=$((passed + 1)); echo "PASS $1"; }
fail() { failed=$((failed + 1)); echo "FAIL $1"; }
# check NAME COMMAND...: runs the command, its output shown only when it fails.
check() {
  local name="$1" out
  shift
  if out="$("$@" 2>&1)"; then
    pass "$name"
  else
    fail "$name"
    printf '%s\n' "$out" | sed 's/^/    /'
  fi
}

tmp="$(mktemp -d "${TMPDIR:-/tmp}/cgc-install.XXXXXX")"
if [ "${KEEP:-0}" = 1 ]; then
  echo "keeping $tmp"
else
  trap 'rm -rf "$tmp"' EXIT
fi
prefix="$tmp/prefix"

# The version the header declares: what the consumer must print.
hv() { sed -n "s/^#define CGC_VERSION_$1[[:space:]]\{1,\}\([0-9]\{1,\}\).*/\1/p" capi/cgc.h; }
major="$(hv MAJOR)"
version="$major.$(hv MINOR).$(hv PATCH)"
echo "== cgc $version from capi/cgc.h; prefix $prefix"

have() {
  if command -v "$1" >/dev/null 2>&1; then
    return 0
  fi
  fail "$1 is not installed (Debian package: $2); the checks that need it are not run"
  return 1
}
have_pkgconfig=0
have_cmake=0
have cc gcc || true
have c++ g++ || true
have readelf binutils || true
have pkg-config pkgconf && have_pkgconfig=1
have cmake cmake && have_cmake=1

# 1. The install itself.
if tools/install.sh "$prefix" >"$tmp/install.log" 2>&1; then
  pass "tools/install.sh $prefix"
  sed -n '/^installed cgc/,$p' "$tmp/install.log"
else
  fail "tools/install.sh $prefix"
  tail -n 40 "$tmp/install.log" | sed 's/^/    /'
fi

lib="$prefix/lib"
files_present() {
  local f rc=0
  for f in include/cgc.h include/cgc_api.h "lib/libcgc.so.$version" lib/pkgconfig/cgc.pc \
    lib/cmake/cgc/cgcConfig.cmake lib/cmake/cgc/cgcConfigVersion.cmake; do
    [ -f "$prefix/$f" ] || { echo "missing: $prefix/$f"; rc=1; }
  done
  return $rc
}
check "installed files: include/cgc.h, cgc_api.h, lib/libcgc.so.$version, cgc.pc, cmake/cgc/" files_present

links() {
  local a b
  a="$(readlink "$lib/libcgc.so.$major")"
  b="$(readlink "$lib/libcgc.so")"
  echo "libcgc.so.$major -> $a; libcgc.so -> $b"
  [ "$a" = "libcgc.so.$version" ] && [ "$b" = "libcgc.so.$major" ] && [ -f "$lib/libcgc.so" ]
}
check "links: libcgc.so -> libcgc.so.$major -> libcgc.so.$version" links

soname() {
  readelf -d "$lib/libcgc.so.$version" | grep SONAME
  readelf -d "$lib/libcgc.so.$version" | grep "SONAME.*\[libcgc\.so\.$major\]" >/dev/null
}
check "SONAME of libcgc.so.$version is libcgc.so.$major" soname

# 2. The installed header alone, C11 and C++17.
echo '#include <cgc.h>' >"$tmp/header_only.c"
cp "$tmp/header_only.c" "$tmp/header_only.cc"
check "cgc.h alone: cc -std=c11 -c" \
  cc -std=c11 -Wall -Wextra -Werror -pedantic -I"$prefix/include" -c "$tmp/header_only.c" -o "$tmp/header_c.o"
check "cgc.h alone: c++ -std=c++17 -c" \
  c++ -std=c++17 -Wall -Wextra -Werror -I"$prefix/include" -c "$tmp/header_only.cc" -o "$tmp/header_cc.o"

# runs BINARY: it must print "cgc VERSION" and then either "no GPU: ..." or the device count.
runs() {
  local out rc=0
  out="$(LD_LIBRARY_PATH="$lib" "$1" 2>&1)" || rc=$?
  printf '%s\n' "$out"
  [ $rc -eq 0 ] || { echo "exit status $rc"; return 1; }
  printf '%s\n' "$out" | sed -n 1p | grep -x "cgc $version" >/dev/null || { echo "expected first line: cgc $version"; return 1; }
  printf '%s\n' "$out" | sed -n 2p | grep -Eq '^(no GPU: |[0-9]+ CUDA devices?$)'
}
# needs_soname BINARY: the consumer records libcgc.so.MAJOR, not libcgc.so or the full version.
needs_soname() {
  readelf -d "$1" | grep NEEDED
  readelf -d "$1" | grep "NEEDED.*\[libcgc\.so\.$major\]" >/dev/null
}
show_run() {
  echo "    \$ LD_LIBRARY_PATH=$lib $1"
  LD_LIBRARY_PATH="$lib" "$1" 2>&1 | sed 's/^/    /'
}

# 3. The consumer with pkg-config.
if [ $have_pkgconfig = 1 ]; then
  pc() { PKG_CONFIG_PATH="$lib/pkgconfig" pkg-config "$@"; }
  modversion() {
    local v
    v="$(pc --modversion cgc)" || return 1
    echo "pkg-config --modversion cgc: $v"
    [ "$v" = "$version" ]
  }
  check "pkg-config --modversion cgc is $version" modversion
  build_pc() {
    local flags
    flags="$(pc --cflags --libs cgc)" || return 1
    echo "cc -std=c11 examples/consumer/consumer.c $flags"
    # shellcheck disable=SC2086
    cc -std=c11 -Wall -Wextra -Werror -pedantic examples/consumer/consumer.c $flags -o "$tmp/consumer_pc"
  }
  check "consumer built with pkg-config" build_pc
  check "consumer (pkg-config) links libcgc.so.$major" needs_soname "$tmp/consumer_pc"
  check "consumer (pkg-config) runs: cgc $version, then its device count or no GPU" runs "$tmp/consumer_pc"
  [ -x "$tmp/consumer_pc" ] && show_run "$tmp/consumer_pc"
fi

# 4. The consumer with CMake: find_package(cgc 1 REQUIRED CONFIG), target cgc::cgc.
if [ $have_cmake = 1 ]; then
  build_cmake() {  # build_cmake PREFIX BUILD_DIR
    cmake -S examples/consumer -B "$2" -DCMAKE_PREFIX_PATH="$1" -DCMAKE_BUILD_TYPE=Release &&
      cmake --build "$2"
  }
  check "consumer built with CMake (find_package(cgc 1), cgc::cgc)" build_cmake "$prefix" "$tmp/build"
  check "consumer (CMake) links libcgc.so.$major" needs_soname "$tmp/build/consumer"
  check "consumer (CMake) runs: cgc $version, then its device count or no GPU" runs "$tmp/build/consumer"
  [ -x "$tmp/build/consumer" ] && show_run "$tmp/build/consumer"

  # The package finds its files from its own place: a copy of the prefix elsewhere works alone.
  relocated() {
    cp -a "$prefix" "$tmp/moved" && mv "$prefix" "$tmp/prefix.away" || return 1
    local rc=0
    build_cmake "$tmp/moved" "$tmp/build_moved" || rc=1
    if [ $rc = 0 ]; then
      grep -q "$tmp/moved/lib/libcgc.so.$version" "$tmp/build_moved/CMakeFiles/consumer.dir/link.txt" ||
        { echo "the relocated build does not link $tmp/moved/lib/libcgc.so.$version"; rc=1; }
    fi
    mv "$tmp/prefix.away" "$prefix"
    return $rc
  }
  check "CMake package relocatable (a moved copy of the prefix)" relocated

  # SameMajorVersion: 1.0 and $version are accepted, a newer minor and another major are not.
  versions() {
    local want rc=0 d
    for want in "1.0:TRUE" "$version:TRUE" "$major.$(($(hv MINOR) + 1)):FALSE" "$((major + 1)):FALSE"; do
      d="$tmp/version_${want%%:*}"
      mkdir -p "$d"
      printf 'cmake_minimum_required(VERSION 3.16)\nproject(v LANGUAGES NONE)\nfind_package(cgc %s CONFIG QUIET)\nif(cgc_FOUND AND TARGET cgc::cgc)\n  message(STATUS "cgc_FOUND=TRUE")\nelse()\n  message(STATUS "cgc_FOUND=FALSE")\nendif()\n' \
        "${want%%:*}" >"$d/CMakeLists.txt"
      if cmake -S "$d" -B "$d/build" -DCMAKE_PREFIX_PATH="$prefix" >"$d/cmake.log" 2>&1 &&
        grep -q "cgc_FOUND=${want##*:}\$" "$d/cmake.log"; then
        echo "find_package(cgc ${want%%:*}): found ${want##*:} as expected"
      else
        echo "find_package(cgc ${want%%:*}): expected found=${want##*:}"
        rc=1
      fi
    done
    return $rc
  }
  check "CMake package version: SameMajorVersion" versions
fi

# 5. Installing again over the same prefix.
again() {
  tools/install.sh "$prefix" >"$tmp/install2.log" 2>&1 || { tail -n 40 "$tmp/install2.log"; return 1; }
  files_present && links || return 1
  # The consumers built before still run against the library installed again.
  local b
  for b in "$tmp/consumer_pc" "$tmp/build/consumer"; do
    [ ! -x "$b" ] || runs "$b" || return 1
  done
}
check "tools/install.sh again over the same prefix" again

# 6. Usage without a prefix.
no_prefix() {
  local out rc=0
  out="$(tools/install.sh 2>&1)" || rc=$?
  echo "$out"
  [ $rc -ne 0 ] && printf '%s\n' "$out" | grep '^usage:' >/dev/null
}
check "tools/install.sh without PREFIX prints its usage and fails" no_prefix

echo "install: $passed passed, $failed failed"
[ $failed -eq 0 ]
