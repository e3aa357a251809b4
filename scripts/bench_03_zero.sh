#!/usr/bin/env bash
# bench_03_zero.sh — chapter 03: step time and bytes sent per step of plain DP and ZeRO-1/2/3 on 2 ranks,
# model small, chapter 01's global batch (8 sequences per rank x 2). Prints a table; asserts nothing.
# What to expect: ZeRO-1/2 send what DP sends (2Ψ), ZeRO-3 1.5x that (3Ψ) and gathers every unit twice,
# so on ranks that share their cores with MPI it is the slowest; the memory it saves is in the program's
# own table (mpirun -np 2 build/bin/03_zero --dp 2 --zero 3).
#   BIN=build/bin bash scripts/bench_03_zero.sh          (make bench runs it)
set -euo pipefail
bin=${BIN:-build/bin}
steps=${STEPS:-15}
launcher=${MPIRUN:-mpirun --oversubscribe}
[ "$(id -u)" = 0 ] && [[ "$launcher" != *allow-run-as-root* ]] && launcher+=" --allow-run-as-root"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
[ "${MPI:-1}" = 0 ] && { echo "bench_03_zero: skipped (MPI=0 build has one rank)"; exit 0; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

echo "chapter 03: ZeRO stages, dp 2, model small, micro-batch 8, $steps steps (medians of steps 2-$steps)"
for z in 0 1 2 3; do
    $launcher -np 2 "$bin/03_zero" --dp 2 --zero $z --model small --steps "$steps" --warmup 1 --eval-every 0 \
        --log-every 1000 --log-jsonl "$out/zero$z.jsonl" >/dev/null
done
python3 - "$out" <<'PY'
import json, statistics, sys
print(f"{'stage':>8} {'step ms':>8} {'MB sent/step':>13} {'vs DP time':>11} {'vs DP bytes':>12}")
base = None
for z in range(4):
    rows = [json.loads(l) for l in open(f"{sys.argv[1]}/zero{z}.jsonl")][1:]
    ms = 1e3 * statistics.median(r["seconds"] for r in rows)
    mb = rows[-1]["MB sent"]
    base = base or (ms, mb)
    name = "DP" if z == 0 else f"ZeRO-{z}"
    print(f"{name:>8} {ms:8.1f} {mb:13.2f} {ms / base[0]:10.2f}x {mb / base[1]:11.2f}x")
PY
