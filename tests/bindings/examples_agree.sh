#!/usr/bin/env bash
# The Fashion-MNIST example in C and in every built binding (examples/README.md) must print the
# same test accuracy for the same arguments — alone, and on two ranks under cohort-run, where
# every rank of every language must agree too.
#
#   examples_agree.sh BUILD_DIR LANGUAGE...      (c is always compared)
set -euo pipefail
build=$1
shift
export OMP_WAIT_POLICY=passive
args=(--steps 150 --seed 3 --threads 1 --hidden 64)

run_example() {  # language, then the launcher prefix (may be empty)
  local lang=$1
  shift
  local program="$build/examples/run_fashion_mnist_$lang"
  [ "$lang" = c ] && program="$build/examples/fashion_mnist"
  if [ ! -x "$program" ]; then
    echo "FAIL: $program was not built" >&2
    return 1
  fi
  timeout 120 "$@" "$program" "${args[@]}"
}

accuracies() {  # the accuracy of every "done ..." line, one per rank, in rank order
  tr '\r' '\n' | grep -o 'test accuracy [0-9.]*%' | sort | uniq -c | sed 's/^ *//'
}

status=0
for launch in single two; do
  prefix=()
  [ "$launch" = two ] && prefix=("$build/transport/launcher/cohort-run" -n 2 --)
  reference=""
  for lang in c "$@"; do
    out=$(run_example "$lang" "${prefix[@]}" 2>&1) || {
      echo "FAIL: $lang ($launch) exited non-zero:"
      echo "$out" | tail -20
      status=1
      continue
    }
    got=$(echo "$out" | accuracies)
    ranks=1
    [ "$launch" = two ] && ranks=2
    echo "$lang ($launch): $(echo "$got" | tr '\n' ' ')"
    # One distinct accuracy, printed once per rank ("2 test accuracy 75.66%" at two ranks).
    if [ "$(echo "$got" | grep -c accuracy)" -ne 1 ] || [ "${got%% *}" != "$ranks" ]; then
      echo "FAIL: $lang ($launch) did not print one test accuracy agreed by its $ranks rank(s)"
      status=1
    fi
    if [ -z "$reference" ]; then
      reference=$got
    elif [ "$got" != "$reference" ]; then
      echo "FAIL: $lang ($launch) printed '$got', C printed '$reference'"
      status=1
    fi
  done
done
exit $status
