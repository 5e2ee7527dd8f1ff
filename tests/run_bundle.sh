#!/bin/bash
# Runs every test of this bundle and prints each one's summary and a total: the GoogleTest
# binaries, the Rust and Go bindings' test binaries, and the Python binding's unittest modules
# (its PyTorch tests skip with the reason where python3 has no torch).
#   ./run_tests.sh [PATTERN]   -- only tests whose name matches PATTERN (a grep -E regex)
# Logs go to $CGC_TEST_LOGS (default: a temporary folder); exit status 0 only if nothing failed.
here=$(cd "$(dirname "$0")" && pwd)
export CGC_TEST_DATA="$here/data"
export CGC_LIBRARY="$here/data/libcgc.so.1" # how the bindings find the library
logs="${CGC_TEST_LOGS:-$(mktemp -d)}"
mkdir -p "$logs"
pattern="${1:-.}"
total_pass=0 total_skip=0 total_fail=0 broken=0

# first_number REGEX FILE: the number in the first line matching REGEX, or 0.
first_number() { grep -oE "$1" "$2" | head -1 | grep -oE '[0-9]+' | head -1 || true; }
# sum_numbers REGEX FILE: the sum of the numbers of every match (Rust prints one line per file).
sum_numbers() { grep -oE "$1" "$2" | grep -oE '[0-9]+' | awk '{s += $1} END {print s + 0}'; }

# Sets pass/skip/fail from a log, according to the test framework that wrote it.
count() {
  local kind=$1 log=$2
  case "$kind" in
    gtest)
      pass=$(first_number '^\[  PASSED  \] [0-9]+' "$log")
      skip=$(first_number '^\[  SKIPPED \] [0-9]+' "$log")
      fail=$(first_number '^\[  FAILED  \] [0-9]+ test' "$log") ;;
    rust) # "test result: ok. 5 passed; 0 failed; 0 ignored; ...". A Rust test cannot mark itself
      # skipped at run time: the GPU tests print "skipping: <reason>" (seen with --nocapture)
      # and pass, so those lines count as skips, not passes.
      local skipped_here
      skipped_here=$(grep -c ' skipping: ' "$log")
      pass=$(( $(sum_numbers '[0-9]+ passed' "$log") - skipped_here ))
      skip=$(( $(sum_numbers '[0-9]+ ignored' "$log") + skipped_here ))
      fail=$(sum_numbers '[0-9]+ failed' "$log") ;;
    go) # go test -test.v: top-level results start the line, subtests are indented
      pass=$(grep -cE '^--- PASS' "$log")
      skip=$(grep -cE '^--- SKIP' "$log")
      fail=$(grep -cE '^--- FAIL' "$log") ;;
    unittest) # "Ran 7 tests", then "OK (skipped=2)" or "FAILED (failures=1, errors=1, skipped=2)"
      local ran errors
      ran=$(first_number '^Ran [0-9]+ test' "$log")
      skip=$(first_number 'skipped=[0-9]+' "$log")
      fail=$(first_number 'failures=[0-9]+' "$log")
      errors=$(first_number 'errors=[0-9]+' "$log")
      fail=$(( ${fail:-0} + ${errors:-0} ))
      pass=$(( ${ran:-0} - fail - ${skip:-0} ))
      [ "$pass" -lt 0 ] && pass=0 ;; # a skip of setUpModule is counted but not run
  esac
  pass=${pass:-0} skip=${skip:-0} fail=${fail:-0}
}

run_one() { # NAME KIND COMMAND...
  local name=$1 kind=$2
  shift 2
  echo "$name" | grep -Eq "$pattern" || return 0
  local log="$logs/$name.log"
  timeout "${CGC_TEST_TIMEOUT:-600}" "$@" >"$log" 2>&1
  local rc=$?
  count "$kind" "$log"
  local status=ok
  if [ "$rc" -ne 0 ]; then
    status="exit $rc"
    [ "$fail" -eq 0 ] && broken=$((broken + 1))
  fi
  printf '%-28s %6s %6s %6s  %s\n' "$name" "$pass" "$skip" "$fail" "$status"
  total_pass=$((total_pass + pass)) total_skip=$((total_skip + skip)) total_fail=$((total_fail + fail))
  if [ "$rc" -ne 0 ]; then
    grep -E '^\[  FAILED  \]|Failure|FAIL|panicked|Error|error' "$log" | head -20 | sed 's/^/    /'
    [ "$fail" -eq 0 ] && tail -5 "$log" | sed 's/^/    /'
  fi
  return 0
}

printf '%-28s %6s %6s %6s  %s\n' test passed skipped failed status
for bin in "$here"/bin/*; do
  [ -e "$bin" ] || continue
  name=$(basename "$bin")
  case "$name" in
    rust_*) run_one "$name" rust "$bin" --test-threads=1 --nocapture ;;
    go_*) run_one "$name" go "$bin" -test.v ;;
    *) run_one "$name" gtest "$bin" ;;
  esac
done
for py in "$here"/python/test_*.py; do
  [ -e "$py" ] || continue
  module=$(basename "$py" .py)
  run_one "$module.py" unittest env PYTHONPATH="$here/python" \
    python3 -m unittest -v "$module"
done
printf 'TOTAL: %d passed, %d skipped, %d failed, %d crashed or timed out (logs: %s)\n' \
  "$total_pass" "$total_skip" "$total_fail" "$broken" "$logs"
[ "$total_fail" -eq 0 ] && [ "$broken" -eq 0 ]
