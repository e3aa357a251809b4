#!/usr/bin/env bash
# bench_02_data_parallel.sh — chapter 02: step time of naive vs bucketed data parallelism on 2 ranks,
# and how much of the gradient all-reduce backward hid. Prints a table; asserts nothing.
#
# Model `small` (3.0M params, M = 11.5 MiB of f32 gradients), the global batch of chapter 01 (8 sequences
# per rank x 2 ranks = 16), and a comm-heavy variant with 2 sequences per rank: the same 11.5 MiB
# all-reduce against a quarter of the compute, so the communication is a larger share of the step.
# Modes: naive (one all-reduce after backward), bucketed with DDP's 25 MiB (for `small` that is ONE
# bucket, sent when the embedding — the last unit backward finishes — is done: nothing to overlap),
# and bucketed with 1 MiB (one bucket per layer, sent while backward computes the layers below).
# Each configuration runs REPEATS times, interleaved; figures are medians over steps 2.. of all repeats
# (rank 0's figures).
#   BIN=build/bin bash scripts/bench_02_data_parallel.sh          (make bench runs it)
set -euo pipefail
bin=${BIN:-build/bin}
steps=${STEPS:-30}
repeats=${REPEATS:-3}
mpirun_cmd=${MPIRUN:-mpirun --oversubscribe}
[ "$(id -u)" = 0 ] && [[ "$mpirun_cmd" != *allow-run-as-root* ]] && mpirun_cmd+=" --allow-run-as-root"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
if [ "${MPI:-1}" = 0 ]; then
    echo "bench_02_data_parallel: skipped (MPI=0 build has one rank)"
    exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "chapter 02: data parallelism, dp 2, model small, $steps steps x $repeats runs per row (medians of steps 2-$steps)"
# repeats outermost: a machine busy for a while slows every configuration alike, not one row
for r in $(seq "$repeats"); do
    for mb in 8 2; do
        for mode in "naive 0" "bucketed 25" "bucketed 1"; do
            set -- $mode
            $mpirun_cmd -np 2 "$bin/02_data_parallel" --dp 2 --model small --micro-batch "$mb" --steps "$steps" \
                --warmup 1 --eval-every 0 --log-every 1000 --dp-mode "$1" --bucket-mb "$2" \
                --log-jsonl "$tmp/mb$mb-$1-$2-$r.jsonl" >/dev/null
        done
    done
done

python3 - "$tmp" <<'EOF'
import glob, json, os, statistics, sys
tmp = sys.argv[1]
print(f"{'sequences/rank':>14} {'mode':>13} {'step ms':>8} {'comm ms':>8} {'exposed ms':>10} {'hidden':>7} {'vs naive':>9}")
for mb in (8, 2):
    naive = None
    for mode, bucket in (("naive", "0"), ("bucketed", "25"), ("bucketed", "1")):
        rows = []
        for f in sorted(glob.glob(os.path.join(tmp, f"mb{mb}-{mode}-{bucket}-*.jsonl"))):
            rows += [json.loads(l) for l in open(f)][1:]  # step 1 pays for first-touch allocations
        med = lambda k: statistics.median(r[k] for r in rows)
        step = 1e3 * med("seconds")
        naive = naive or step
        label = mode if mode == "naive" else f"{mode} {bucket}M"
        print(f"{mb:>14} {label:>13} {step:8.1f} {med('comm ms'):8.1f} {med('exposed ms'):10.1f} "
              f"{med('hidden %'):6.0f}% {naive / step:8.2f}x")
EOF
echo "comm ms: time inside communication calls (start, test, wait); exposed ms: of which waiting after"
echo "backward; hidden: the share of the gradient bytes whose all-reduce finished while backward still ran."
echo "On CPU ranks MPI moves and sums the data only inside MPI calls, on the same cores that compute, and"
echo "2 ranks on 2 shared cores make every figure noisy: compare exposed ms more than step ms."
