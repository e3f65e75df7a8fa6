#!/usr/bin/env bash
# Short real training runs of the `cohort` CLI (MLP on Fashion-MNIST, one thread):
#   falling  — a 30-step run's metrics file has falling loss and well-formed JSON lines;
#   resume   — a run stopped and saved at step K and resumed from the checkpoint produces the
#              same per-step losses, bit for bit, as an uninterrupted run from step K+1 on.
set -euo pipefail
exe=$1
mode=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export OMP_WAIT_POLICY=passive OMP_NUM_THREADS=1
common=(train --model mlp --threads 1 --quiet --seed 7)

case "$mode" in
  falling)
    "$exe" "${common[@]}" --steps 30 --log-every 1 --metrics "$dir/m.jsonl" >/dev/null
    lines=$(wc -l <"$dir/m.jsonl")
    [ "$lines" -eq 30 ] || { echo "expected 30 metrics lines, got $lines"; exit 1; }
    grep -q '"eval_accuracy":' "$dir/m.jsonl" || { echo "no final evaluation in metrics"; exit 1; }
    for key in step loss lr samples_per_s; do
      grep -c "\"$key\":" "$dir/m.jsonl" | grep -qx 30 || { echo "field $key missing"; exit 1; }
    done
    # Mean loss of the first 5 steps against the last 5.
    sed -E 's/.*"loss":([^,]*),.*/\1/' "$dir/m.jsonl" | awk '
      NR <= 5 { a += $1 } NR > 25 { b += $1 }
      END { printf "first5 %.4f last5 %.4f\n", a / 5, b / 5; exit !(b < 0.8 * a) }'
    ;;
  resume)
    "$exe" "${common[@]}" --steps 40 --loss-log "$dir/full.txt" >/dev/null
    "$exe" "${common[@]}" --steps 40 --stop-after 15 --save "$dir/ck" --loss-log "$dir/a.txt" >/dev/null
    "$exe" "${common[@]}" --steps 40 --resume "$dir/ck" --loss-log "$dir/b.txt" >/dev/null
    [ "$(wc -l <"$dir/a.txt")" -eq 15 ] || { echo "stopped run did not stop at 15"; exit 1; }
    head -n 1 "$dir/b.txt" | grep -q '^16 ' || { echo "resumed run did not start at step 16"; exit 1; }
    cat "$dir/a.txt" "$dir/b.txt" >"$dir/joined.txt"
    if ! cmp -s "$dir/full.txt" "$dir/joined.txt"; then
      echo "resumed losses differ from the uninterrupted run:"; diff "$dir/full.txt" "$dir/joined.txt" | head
      exit 1
    fi
    echo "40 losses identical across save at step 15 and resume"
    ;;
  *) echo "unknown mode $mode"; exit 2 ;;
esac
