#!/usr/bin/env bash
# bench_04_tensor_parallel.sh — chapter 04: step time and tokens/s of tensor parallelism tp 1 / 2 / 4 on
# CPU ranks, the same global batch for every row, with and without sequence parallelism. Prints a table;
# asserts nothing.
#
# Model `small` (3.0M params, 8 heads, 4 kv heads, so tp 4 divides them), 16 sequences x 32 tokens per
# step (chapter 01's batch), one BLAS thread per rank. tp 1 is chapter 04's program on one rank: f and g
# are then identities, the vocab-parallel loss has nothing to reduce. Each configuration runs REPEATS
# times, interleaved; figures are medians over steps 2.. of all repeats (rank 0's step times). "tp MiB"
# is what each rank's tp group sent per step.
#   BIN=build/bin bash scripts/bench_04_tensor_parallel.sh          (make bench runs it)
set -euo pipefail
bin=${BIN:-build/bin}
steps=${STEPS:-15}
repeats=${REPEATS:-2}
source "$(dirname "$0")/bench_mpi.sh" bench_04_tensor_parallel  # $mpirun_cmd, $cores, $tmp

echo "chapter 04: tensor parallelism, model small, 16 sequences x 32 tokens per step, $steps steps x $repeats runs per row"
echo "this machine has $cores CPU core(s): with more ranks than cores the ranks share cores (--oversubscribe),"
echo "so tp > $cores measures the cost of splitting and communicating, not a speed-up; load average at start:"
echo "$(cut -d' ' -f1-3 /proc/loadavg) (other processes on these cores make every figure slower and noisier)"
# repeats outermost: a machine busy for a while slows every configuration alike, not one row
for r in $(seq "$repeats"); do
    for tp in 1 2 4; do
        for sp in 0 1; do
            [ "$tp" = 1 ] && [ "$sp" = 1 ] && continue
            prog=04_tensor_parallel
            [ "$sp" = 1 ] && prog=05_sequence_parallel
            $mpirun_cmd -np "$tp" "$bin/$prog" --tp "$tp" --sp="$sp" --model small --micro-batch 16 --seq 32 \
                --steps "$steps" --warmup 1 --eval-every 0 --log-every 1000 --log-jsonl "$tmp/tp$tp-sp$sp-$r.jsonl" \
                >/dev/null
        done
    done
done

python3 - "$tmp" <<'EOF'
import glob, json, os, statistics, sys
tmp = sys.argv[1]
print(f"{'tp':>3} {'sp':>3} {'step ms':>8} {'tokens/s':>9} {'tp MiB/step':>12} {'vs tp 1':>8}")
base = None
for tp in (1, 2, 4):
    for sp in (0, 1):
        rows = []
        for f in sorted(glob.glob(os.path.join(tmp, f"tp{tp}-sp{sp}-*.jsonl"))):
            rows += [json.loads(l) for l in open(f)][1:]  # step 1 pays for first-touch allocations
        if not rows:
            continue
        step = statistics.median(r["seconds"] for r in rows)
        tok = statistics.median(r["tokens"] / r["seconds"] for r in rows)
        mib = statistics.median(r.get("tp MiB", 0) for r in rows)
        base = base or step
        print(f"{tp:>3} {'on' if sp else 'off':>3} {1e3 * step:8.1f} {tok:9.0f} {mib:12.2f} {base / step:7.2f}x")
EOF
