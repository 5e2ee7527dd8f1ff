#!/bin/bash
# Runs every test of this bundle and prints each one's summary and a total: the GoogleTest
# binaries, the randomised multi-thread stress test (60 s at 8 and at 16 threads, and the illegal
# mix), the Rust and Go bindings' test binaries, and the Python binding's unittest modules (its
# PyTorch tests skip with the reason where python3 has no torch).
#   ./run_tests.sh [PATTERN]              only tests whose name matches PATTERN (a grep -E regex)
#   ./run_tests.sh --sanitize [PATTERN]   instead: every GoogleTest binary under compute-sanitizer
#                                         memcheck with a full leak check, and the stress test
#                                         against the ThreadSanitizer build of the library
# CGC_STRESS_SECONDS sets the stress runs' length (default 60). Logs go to $CGC_TEST_LOGS (default:
# a temporary folder); exit status 0 only if nothing failed.
here=$(cd "$(dirname "$0")" && pwd)
sanitize=0
if [ "${1:-}" = "--sanitize" ]; then
  sanitize=1
  shift
fi
stress_seconds=${CGC_STRESS_SECONDS:-60}
export CGC_TEST_DATA="$here/data"
# The lock rule's check (src/lockcheck.h): a cgc lock taken out of order, a driver call that can
# wait made under a hot lock, or a driver call inside a host function aborts the test.
export CGC_LOCK_CHECK="${CGC_LOCK_CHECK:-1}"
export CGC_LIBRARY="$here/data/libcgc.so.1" # how the bindings find the library
export CGC_ABI_DESCRIPTION="$here/data/abi.txt" # what their ABI tests compare with
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
    stress) # the last line: "STRESS: ok (...)", "STRESS: skipped" or "STRESS: FAILED (...)"
      pass=0 skip=0 fail=0
      if grep -q '^STRESS: ok' "$log"; then pass=1
      elif grep -q '^STRESS: skipped' "$log"; then skip=1
      else fail=1; fi ;;
    tsan | tsan_gtest) # the stress test's or GoogleTest's verdict, and no ThreadSanitizer report at all
      if [ "$kind" = tsan ]; then count stress "$log"; else count gtest "$log"; fi
      local reports
      reports=$(grep -c '^WARNING: ThreadSanitizer' "$log")
      tsan_reports=$((tsan_reports + reports))
      if [ "$reports" -gt 0 ]; then pass=0 fail=1; fi ;;
    memcheck) # the GoogleTest verdict, then compute-sanitizer's: errors other than API errors
      count gtest "$log"
      local san="$log.sanitizer" total api leaked
      total=$(first_number 'ERROR SUMMARY: [0-9]+ error' "$san")
      api=$(grep -c 'Program hit ' "$san")
      leaked=$(grep -oE 'LEAK SUMMARY: [0-9]+ bytes' "$san" | grep -oE '[0-9]+' | head -1)
      memcheck_errors=$(( ${total:-0} - api ))
      printf '%s %s %s\n' "${memcheck_errors}" "${leaked:-0}" "$api" >"$log.counts"
      grep -oE 'Program hit CUDA_ERROR_[A-Z_]+ .* on CUDA API call to [A-Za-z0-9_]+' "$san" |
        sed -E 's/Program hit (CUDA_ERROR_[A-Z_]+).*on CUDA API call to ([A-Za-z0-9_]+)/\1 from \2/' |
        sort | uniq -c >"$log.api" || true
      if [ -z "$total" ] || [ "$memcheck_errors" -gt 0 ] || [ "${leaked:-0}" -gt 0 ]; then pass=0 fail=$((fail + 1)); fi ;;
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

tsan_reports=0
printf '%-28s %6s %6s %6s  %s\n' test passed skipped failed status
if [ "$sanitize" -eq 1 ]; then
  # compute-sanitizer: 0 memcheck errors and 0 leaked bytes per GoogleTest binary; the API errors
  # a test provokes on purpose (refused allocations, bad handles) are listed, not counted.
  command -v compute-sanitizer >/dev/null || { echo "compute-sanitizer is not on PATH"; exit 1; }
  # The suites that run on the GPU (the others make no CUDA call, which the sanitizer refuses).
  for name in adopt_test alloc_test capture_test dlopen_test family_test graph_test nccl_pool_test pool_test rng_test saved_test stream_event_test trust_test work_test update_test conditional_test; do
    bin="$here/bin/$name"
    [ -x "$bin" ] || continue
    # Every error printed (the default stops at 100, and NCCL's own API errors alone pass that in
    # nccl_pool_test): errors left unprinted could not be told from memory errors.
    run_one "memcheck_$name" memcheck compute-sanitizer --tool memcheck --leak-check full --print-limit 1000000 \
      --report-api-errors explicit --log-file "$logs/memcheck_$name.log.sanitizer" "$bin"
  done
  if [ -x "$here/tsan/stress_test" ]; then
    run_one "tsan_stress_8_threads" tsan env LD_LIBRARY_PATH="$here/tsan" \
      TSAN_OPTIONS="halt_on_error=0 report_signal_unsafe=0 history_size=4 suppressions=$here/tsan/tsan_suppressions.txt" \
      "$here/tsan/stress_test" --seconds "$((stress_seconds / 2))" --threads 8 --seed 7
  fi
  if [ -x "$here/tsan/family_test" ]; then # families: launches, leaves and builds from several threads
    run_one "tsan_family_test" tsan_gtest env LD_LIBRARY_PATH="$here/tsan" CGC_TEST_DATA="$here/data" \
      TSAN_OPTIONS="halt_on_error=0 report_signal_unsafe=0 history_size=4 suppressions=$here/tsan/tsan_suppressions.txt" \
      "$here/tsan/family_test"
  fi
  echo "== memcheck per binary: errors other than API errors, leaked bytes, API errors (provoked on purpose)"
  for c in "$logs"/memcheck_*.log.counts; do
    [ -e "$c" ] || continue
    printf '%-34s %s\n' "$(basename "$c" .log.counts)" "$(cat "$c")"
    sed 's/^/      /' "${c%.counts}.api"
  done
  echo "== ThreadSanitizer reports: $tsan_reports"
else
  for bin in "$here"/bin/*; do
    [ -e "$bin" ] || continue
    name=$(basename "$bin")
    case "$name" in
      rust_*) run_one "$name" rust "$bin" --test-threads=1 --nocapture ;;
      go_*) run_one "$name" go "$bin" -test.v ;;
      stress_test)
        run_one stress_8_threads stress "$bin" --seconds "$stress_seconds" --threads 8 --seed 1
        run_one stress_16_threads stress "$bin" --seconds "$stress_seconds" --threads 16 --seed 2
        run_one stress_illegal_mix stress "$bin" --seconds "$((stress_seconds / 3))" --threads 8 --seed 3 --illegal ;;
      *) run_one "$name" gtest "$bin" ;;
    esac
  done
  for py in "$here"/python/test_*.py; do
    [ -e "$py" ] || continue
    module=$(basename "$py" .py)
    run_one "$module.py" unittest env PYTHONPATH="$here/python" \
      python3 -m unittest -v "$module"
  done
  # torch's captures through PyTorch's pluggable allocator too: the path where cgc's complete
  # allocator cannot be built (no C++ compiler or PyTorch headers).
  if [ -e "$here/python/test_torch_graphs.py" ]; then
    run_one "test_torch_graphs_pluggable.py" unittest env PYTHONPATH="$here/python" CGC_TORCH_BACKEND=pluggable \
      python3 -m unittest -v test_torch_graphs
  fi
fi
printf 'TOTAL: %d passed, %d skipped, %d failed, %d crashed or timed out (logs: %s)\n' \
  "$total_pass" "$total_skip" "$total_fail" "$broken" "$logs"
[ "$total_fail" -eq 0 ] && [ "$broken" -eq 0 ]
