#!/bin/bash
# Runs every test binary of this bundle and prints each one's GoogleTest summary and a total.
#   ./run_tests.sh [PATTERN]   -- only binaries whose name matches PATTERN (a grep -E regex)
# Logs go to $CGC_TEST_LOGS (default: a temporary folder); exit status 0 only if nothing failed.
here=$(cd "$(dirname "$0")" && pwd)
export CGC_TEST_DATA="$here/data"
logs="${CGC_TEST_LOGS:-$(mktemp -d)}"
mkdir -p "$logs"
pattern="${1:-.}"
total_pass=0 total_skip=0 total_fail=0 broken=0
printf '%-28s %6s %6s %6s  %s\n' binary passed skipped failed status
# GoogleTest binaries, then the Python tests (PyTorch as a client; they skip without it).
for bin in "$here"/bin/* "$here"/tests_py/*.py; do
  [ -e "$bin" ] || continue
  name=$(basename "$bin")
  echo "$name" | grep -Eq "$pattern" || continue
  log="$logs/$name.log"
  case "$name" in
    *.py) timeout "${CGC_TEST_TIMEOUT:-600}" python3 "$bin" >"$log" 2>&1 ;;
    *) timeout "${CGC_TEST_TIMEOUT:-600}" "$bin" >"$log" 2>&1 ;;
  esac
  rc=$?
  pass=$(grep -oE '^\[  PASSED  \] [0-9]+' "$log" | grep -oE '[0-9]+$' || true)
  skip=$(grep -oE '^\[  SKIPPED \] [0-9]+' "$log" | grep -oE '[0-9]+$' || true)
  fail=$(grep -oE '^\[  FAILED  \] [0-9]+ test' "$log" | grep -oE '[0-9]+' || true)
  pass=${pass:-0} skip=${skip:-0} fail=${fail:-0}
  status=ok
  if [ "$rc" -ne 0 ]; then
    status="exit $rc"
    [ "$fail" -eq 0 ] && broken=$((broken + 1))
  fi
  printf '%-28s %6s %6s %6s  %s\n' "$name" "$pass" "$skip" "$fail" "$status"
  total_pass=$((total_pass + pass)) total_skip=$((total_skip + skip)) total_fail=$((total_fail + fail))
  if [ "$rc" -ne 0 ]; then
    grep -E '^\[  FAILED  \]|Failure|error' "$log" | head -20 | sed 's/^/    /'
    [ "$fail" -eq 0 ] && tail -5 "$log" | sed 's/^/    /'
  fi
done
printf 'TOTAL: %d passed, %d skipped, %d failed, %d binaries crashed or timed out (logs: %s)\n' \
  "$total_pass" "$total_skip" "$total_fail" "$broken" "$logs"
[ "$total_fail" -eq 0 ] && [ "$broken" -eq 0 ]
