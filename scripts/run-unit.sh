#!/usr/bin/env bash
# Runs each C unit test binary; each prints "N passed, N failed". Prints the
# sum in the same form and fails if any test failed.
set -u
passed=0; failed=0; status=0
for t in "$@"; do
  out=$("$t" 2>&1); rc=$?
  echo "$out" | grep -v -E '^[0-9]+ passed, [0-9]+ failed$'
  line=$(echo "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed$' | tail -1)
  if [ -z "$line" ] || [ $rc -ne 0 ]; then
    echo "unit: $t exited $rc" >&2; status=1
  fi
  p=$(echo "$line" | awk '{print $1}'); f=$(echo "$line" | awk '{print $3}')
  passed=$((passed + ${p:-0})); failed=$((failed + ${f:-0}))
done
echo "unit: $passed passed, $failed failed"
[ $failed -eq 0 ] || status=1
exit $status
