#!/bin/bash
# The bindings as packages, checked offline (no PyPI, crates.io or Go proxy is needed):
#   python  `pip install --no-index ./bindings/python` into a fresh venv (build isolation on: the
#           in-tree backend needs nothing downloaded), `import cgc` from another folder, its
#           version = the wheel's = capi/cgc.h's, only cgc.py installed, `pip uninstall` clean.
#           Without python3-venv, a `pip install --target` into a temporary folder instead.
#   rust    `cargo package --offline` of bindings/rust (the .crate is built again from its own
#           files), its version = capi/cgc.h's.
#   go      the examples built against module cgc/bindings/go through their replace directives,
#           and a module outside the repository pointed at it as bindings/go/README.md says.
# Everything is built under a temporary folder (CARGO_TARGET_DIR too): the work tree stays clean.
# The last line is "packages: N passed, N failed"; the status is 0 only if all passed.
#   tools/check_packages.sh
set -euo pipefail
ws="$(cd "$(dirname "$0")/.." && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
exec 2>&1 # one stream, in order
export GOFLAGS=-buildvcs=false GOPROXY=off PYTHONDONTWRITEBYTECODE=1 PIP_DISABLE_PIP_VERSION_CHECK=1
# pip with --no-index and nothing else: no configured index, links or config file to fall back on.
unset PIP_INDEX_URL PIP_EXTRA_INDEX_URL PIP_FIND_LINKS
export PIP_CONFIG_FILE=/dev/null

# capi/cgc.h's version, which every binding's package carries.
header_version="$(awk '$1 == "#define" && $2 ~ /^CGC_VERSION_(MAJOR|MINOR|PATCH)$/ { v[$2] = $3 }
  END { print v["CGC_VERSION_MAJOR"] "." v["CGC_VERSION_MINOR"] "." v["CGC_VERSION_PATCH"] }' \
  "$ws/capi/cgc.h")"
echo "capi/cgc.h is version $header_version"

check_python() {
  local py="${PYTHON:-python3}" venv="$tmp/venv" how
  command -v "$py" >/dev/null || { echo "no $py"; return 1; }
  if "$py" -m venv "$venv" >"$tmp/venv.log" 2>&1; then
    how=venv
    "$venv/bin/python" -m pip install --no-index --no-cache-dir "$ws/bindings/python"
    py="$venv/bin/python"
  else
    # Debian's python3 has venv's pip only with python3-venv; python3-pip alone does this.
    how=target
    echo "python3 -m venv failed ($(tail -n 1 "$tmp/venv.log")): pip install --target instead"
    "$py" -m pip --version >/dev/null || { echo "no pip either: install python3-venv or python3-pip"; return 1; }
    "$py" -m pip install --no-index --no-cache-dir --target "$tmp/site" "$ws/bindings/python"
  fi
  # -I: neither the current folder nor PYTHONPATH is on the path; run from elsewhere.
  (cd "$tmp" && "$py" -I - "$how" "$tmp/site" "$ws/bindings/python" "$header_version") <<'EOF'
import os, sys
how, site, source, header_version = sys.argv[1:]
if how == "target":
    sys.path.insert(0, site)
import importlib.metadata, importlib.util
import cgc
where = os.path.dirname(os.path.abspath(cgc.__file__))
assert where != os.path.abspath(source), "imported the source folder's cgc.py, not the installed one"
version = "%d.%d.%d" % (cgc.VERSION_MAJOR, cgc.VERSION_MINOR, cgc.VERSION_PATCH)
dist = importlib.metadata.distribution("cgc") if how == "venv" else \
    next(importlib.metadata.distributions(path=[site], name="cgc"))
assert dist.version == version, "the package is %s, cgc.py says %s" % (dist.version, version)
assert version == header_version, "cgc.py is %s, capi/cgc.h %s" % (version, header_version)
files = sorted(str(f) for f in dist.files if not str(f).startswith(("cgc-", "__pycache__")))
assert files == ["cgc.py"], "the package installs %s, not cgc.py alone" % files
assert importlib.util.find_spec("test_cgc") is None, "the tests were installed"
print("import cgc: %s from %s (%s), library %s" % (version, where, how, cgc.library_path()))
EOF
  if [ "$how" = venv ]; then
    "$py" -m pip uninstall -y cgc
    ! (cd "$tmp" && "$py" -I -c "import cgc") 2>/dev/null || { echo "cgc is still importable"; return 1; }
    local left
    left="$(cd "$venv" && find . -iname '*cgc*')"
    [ -z "$left" ] || { echo "pip uninstall left $left"; return 1; }
  fi
}

check_rust() {
  command -v cargo >/dev/null || { echo "no cargo"; return 1; }
  # --allow-dirty: check the work tree as it is (a clean checkout needs no flag).
  (cd "$ws/bindings/rust" && CARGO_TARGET_DIR="$tmp/cargo" cargo package --offline --allow-dirty)
  local crate="$tmp/cargo/package/cgc-$header_version.crate"
  [ -f "$crate" ] || { echo "no $crate: is Cargo.toml's version capi/cgc.h's ($header_version)?"; return 1; }
  tar tzf "$crate" > "$tmp/crate.list"
  for f in Cargo.toml README.md src/lib.rs src/sys.rs; do
    grep -qx "cgc-$header_version/$f" "$tmp/crate.list" || { echo "$f is not in the .crate"; return 1; }
  done
  echo "$(wc -l < "$tmp/crate.list") files in $(basename "$crate")"
}

check_go() {
  command -v go >/dev/null || { echo "no go"; return 1; }
  [ "$(cd "$ws/bindings/go" && go list -m)" = cgc/bindings/go ] || { echo "bindings/go is not cgc/bindings/go"; return 1; }
  ! grep -rn 'example\.com' "$ws/bindings/go" "$ws/examples/go" "$ws/examples/go_graph_work" ||
    { echo "example.com is still named"; return 1; }
  (cd "$ws/examples/go" && go vet ./... && go build -o "$tmp/fork_join" .)
  (cd "$ws/examples/go_graph_work" && go vet ./... && go build -o "$tmp/graph_work" .)
  # A module of someone else's, pointed at the binding as bindings/go/README.md says.
  mkdir "$tmp/gouser"
  cat > "$tmp/gouser/main.go" <<'EOF'
package main

import (
	"fmt"

	cgc "cgc/bindings/go"
)

func main() {
	v := cgc.HeaderVersion
	fmt.Printf("%d.%d.%d\n", v.Major, v.Minor, v.Patch)
}
EOF
  (cd "$tmp/gouser" && go mod init gouser &&
    go mod edit -require=cgc/bindings/go@v0.0.0 -replace=cgc/bindings/go="$ws/bindings/go" &&
    go vet . && go build -o gouser .)
  local got
  got="$("$tmp/gouser/gouser")"
  [ "$got" = "$header_version" ] || { echo "an outside module sees header version $got"; return 1; }
  echo "go examples built; an outside module builds against cgc/bindings/go $got"
}

passed=0 failed=0
for name in python rust go; do
  echo "== $name"
  # A subshell outside any condition, so that set -e stops the check at its first failure.
  set +e
  (set -e; "check_$name")
  rc=$?
  set -e
  if [ $rc -eq 0 ]; then
    passed=$((passed + 1)); echo "-- $name: passed"
  else
    failed=$((failed + 1)); echo "-- $name: FAILED"
  fi
done
echo "packages: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
