#!/bin/sh
# Without a CUDA driver, cgc_bench must print one line saying there is no GPU and exit with
# status 1, without crashing. CGC_CUDA_DRIVER pointing at a missing file makes cgc find no driver,
# so this holds on GPU machines too. Also checks the option parser's exit statuses.
bench="$1"
fail() {
  echo "FAIL: $*"
  exit 1
}

out=$(CGC_CUDA_DRIVER=/nonexistent/libcuda.so.1 "$bench" 2>&1)
status=$?
printf '%s\n' "$out"
[ "$status" -eq 1 ] || fail "exit status $status without a driver, expected 1"
printf '%s\n' "$out" | grep -q "no GPU" || fail "no line containing 'no GPU'"

out=$(CGC_CUDA_DRIVER=/nonexistent/libcuda.so.1 "$bench" --quick --json /dev/null 2>&1)
status=$?
[ "$status" -eq 1 ] || fail "exit status $status with --quick --json and no driver, expected 1"

CGC_CUDA_DRIVER=/nonexistent/libcuda.so.1 "$bench" --no-such-option >/dev/null 2>&1
status=$?
[ "$status" -eq 2 ] || fail "exit status $status for an unknown option, expected 2"

CGC_CUDA_DRIVER=/nonexistent/libcuda.so.1 "$bench" --help >/dev/null 2>&1
status=$?
[ "$status" -eq 0 ] || fail "exit status $status for --help, expected 0"

echo "PASS"
