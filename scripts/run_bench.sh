#!/usr/bin/env bash
# run_bench.sh — `make bench`: benchmarks that print figures (never assertions).
#   1. ops: our GEMM vs raw OpenBLAS sgemm; naive vs tiled attention            (build/bin/bench_ops)
#   2. chapter 01 training throughput of `small` on one CPU process, beside PyTorch training the same model
#      (same weights, batch shape and thread count) when PyTorch is importable, and the ratio of the two
# Every process uses one BLAS thread, as one training rank per core does. OPENBLAS_CORETYPE is left as the
# machine sets it, and printed, since it decides which sgemm kernel OpenBLAS runs.
set -euo pipefail
bin=${BIN:-build/bin}
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
echo "OpenBLAS kernel: OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-<unset: auto-detected>}, one thread per process"
"$bin/bench_ops"

echo
echo "chapter 01 training throughput, model small, micro-batch 16 x 32 tokens, one process, one thread"
echo "(5 rounds, ours then PyTorch in each, so both see the same machine state; the ratio is the median:"
echo " a shared machine's speed drifts by 10% within minutes, and PyTorch's own speed here is bimodal)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
py=""
for p in /usr/bin/python3 python3; do
    if command -v "$p" >/dev/null && "$p" -c "import torch" 2>/dev/null; then py=$p; break; fi
done
summ=${py:-python3}
[ -n "$py" ] && "$bin/01_single_gpu" --model small --dump-reference "$tmp/ref" >/dev/null
rounds="1 2 3 4 5"
for round in $rounds; do
    "$bin/01_single_gpu" --model small --steps 35 --warmup 5 --log-every 1000 --eval-every 0 \
        --log-jsonl "$tmp/ours$round.jsonl" >/dev/null
    "$summ" - "$tmp/ours$round.jsonl" <<'PY' | tee "$tmp/ours$round.txt"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])][5:]   # skip 5 warm-up steps
tok = sum(r["tokens"] for r in rows); sec = sum(r["seconds"] for r in rows)
mfu = sum(r["mfu"] or 0 for r in rows) / len(rows)
steps = sorted(r["seconds"] for r in rows)
print(f"pentatron: {len(rows)} steps in {sec:.2f} s = {tok / sec:.0f} tok/s, CPU MFU {100 * mfu:.1f}% "
      f"(of the measured sgemm peak); step median {1e3 * steps[len(steps) // 2]:.1f} ms, "
      f"fastest {1e3 * steps[0]:.1f} ms")
PY
    if [ -n "$py" ]; then
        "$py" tools/torch_train_bench.py "$tmp/ref" --steps 30 --threads 1 | tee "$tmp/torch$round.txt"
    fi
done
if [ -n "$py" ]; then
    # the ratio of the two "= N tok/s" figures of each round, and their median
    "$py" - "$tmp" $rounds <<'PY'
import re, statistics, sys
def rate(f):
    return float(re.search(r"= (\d+) tok/s", open(f).read()).group(1))
ratios = [rate(f"{sys.argv[1]}/ours{r}.txt") / rate(f"{sys.argv[1]}/torch{r}.txt") for r in sys.argv[2:]]
print("pentatron / pytorch per round: " + ", ".join(f"{x:.2f}x" for x in ratios) +
      f"; median {statistics.median(ratios):.2f}x tokens per second")
PY
else
    echo "pytorch: not importable here (apt-get install python3-torch), comparison skipped"
fi

# later chapters' benchmarks (data parallel, ZeRO, tensor parallel, ...): one script each
for b in scripts/bench_[0-9]*.sh; do
    [ -e "$b" ] || continue
    echo
    BIN="$bin" bash "$b"
done
