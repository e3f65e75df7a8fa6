#!/usr/bin/env bash
# cohort train --parallel sync --zero N under cohort-run -n 2: stage 3 trains and evaluates
# exactly like stage 0 (the evaluations gather the parameters on every rank first; also under
# --micro-batches 2), reports the same gradient norm, and holds half the parameters between
# steps; co2 refuses stage 3 with the reason, on one line, with a non-zero exit.
#   parallel_zero.sh COHORT_RUN COHORT_CLI
set -euo pipefail
run=$1 cli=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
common=(train --model mlp --steps 40 --eval-every 20 --eval-examples 500 --log-every 20 --threads 1 --parallel sync)
for z in 0 3; do
  "$run" -n 2 -- "$cli" "${common[@]}" --zero $z --metrics "$dir/z$z.jsonl" >"$dir/z$z.out" 2>&1 ||
    { cat "$dir/z$z.out"; echo "FAIL: --zero $z exited non-zero"; exit 1; }
done
# Under micro-batches stage 3 gathers each bucket per schedule slot: it evaluates like stage 0 too.
for z in 0 3; do
  "$run" -n 2 -- "$cli" "${common[@]}" --zero $z --micro-batches 2 >"$dir/m$z.out" 2>&1 ||
    { cat "$dir/m$z.out"; echo "FAIL: --zero $z --micro-batches 2 exited non-zero"; exit 1; }
done
evals() { grep -o 'eval step [0-9]*: loss [0-9.]* | accuracy [0-9.]*%' "$1"; }
[ "$(evals "$dir/z0.out" | wc -l)" -eq 2 ] || { cat "$dir/z0.out"; echo "FAIL: expected 2 evaluations"; exit 1; }
if [ "$(evals "$dir/z0.out")" != "$(evals "$dir/z3.out")" ]; then
  paste <(evals "$dir/z0.out") <(evals "$dir/z3.out"); echo "FAIL: stage 3 evaluates differently"; exit 1
fi
[ "$(evals "$dir/m0.out" | wc -l)" -eq 2 ] || { cat "$dir/m0.out"; echo "FAIL: expected 2 evaluations"; exit 1; }
if [ "$(evals "$dir/m0.out")" != "$(evals "$dir/m3.out")" ]; then
  paste <(evals "$dir/m0.out") <(evals "$dir/m3.out"); echo "FAIL: stage 3 evaluates differently under micro-batches"
  exit 1
fi
field() { grep -o "\"$2\":[0-9.e+-]*" "$1" | tail -1 | cut -d: -f2; }
for f in loss grad_norm; do
  a=$(field "$dir/z0.jsonl" $f) b=$(field "$dir/z3.jsonl" $f)
  awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a > 0 && d <= 1e-5 * a) }' ||
    { echo "FAIL: $f differs: stage 0 $a, stage 3 $b"; exit 1; }
done
p0=$(field "$dir/z0.jsonl" parameter_bytes) p3=$(field "$dir/z3.jsonl" parameter_bytes)
awk -v a="$p0" -v b="$p3" 'BEGIN { exit !(b <= 0.51 * a) }' ||
  { echo "FAIL: stage 3 holds $p3 parameter bytes per rank, stage 0 $p0"; exit 1; }
grep -q "model state per rank: parameters" "$dir/z3.out" || { cat "$dir/z3.out"; echo "FAIL: no summary"; exit 1; }
if "$run" -n 2 -- "$cli" train --model mlp --steps 2 --parallel co2 --zero 3 >"$dir/co2.out" 2>&1; then
  echo "FAIL: co2 with --zero 3 was accepted"; exit 1
fi
grep -q "error: creating the trainer: .*ZeRO stage 3 needs the sync" "$dir/co2.out" ||
  { cat "$dir/co2.out"; echo "FAIL: co2 --zero 3 without its reason"; exit 1; }
echo "ok: stage 0 and 3 evaluate alike; parameters per rank $p0 -> $p3 bytes"
