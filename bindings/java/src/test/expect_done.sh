#!/bin/sh
# expect_done.sh COUNT COMMAND...: runs COMMAND (an example, alone or under cohort-run), shows its
# output, and passes when it exits 0 and printed at least COUNT "done in ... | test accuracy ..."
# lines — one per rank (cohort-run prefixes each line with "[rank N] ").
count=$1
shift
out=$("$@" 2>&1)
rc=$?
printf '%s\n' "$out"
if [ "$rc" -ne 0 ]; then
  echo "expect_done: the command exited with $rc" >&2
  exit 1
fi
done_lines=$(printf '%s\n' "$out" | tr '\r' '\n' | grep -cE '(^|\] )done in [0-9.]+ s \| test accuracy [0-9.]+% \|')
if [ "$done_lines" -lt "$count" ]; then
  echo "expect_done: $done_lines 'done in ... test accuracy' lines, expected $count" >&2
  exit 1
fi
