#!/usr/bin/env bash
# bench_01_recompute.sh — chapter 01: what activation recomputation costs. Step time of --recompute none,
# selective, full and offload on one rank, in ROUNDS interleaved rounds (a shared machine's speed drifts: each round runs
# the four back to back), with the activation peak, the FLOPs the ops counted in a step (ops.hpp counted_flops), MFU
# and HFU of each. Prints a table; asserts nothing (tests/01_single_gpu/test_hfu.cpp asserts the FLOPs).
# What to expect (seeds 000 / 003): full recomputation reruns every layer's forward, +1/3 of the layers' FLOPs, so
# +30-40 % step time; selective (with the naive kernel, which otherwise keeps the (B, nh, T, T) probabilities)
# only rebuilds them from q, k and the lse: +1.3 % of the FLOPs here (2·h·T a layer and token), for the s^2 term of
# the activations. offload moves every layer's activations to the host and back: no FLOPs, the bytes moved per
# step (on CPU ranks a memcpy; on a GPU the PCIe transfer the playbook weighs against recomputation).
#   BIN=build/bin bash scripts/bench_01_recompute.sh
set -euo pipefail
bin=${BIN:-build/bin}
steps=${STEPS:-8}
rounds=${ROUNDS:-3}
seq=${SEQ:-128}
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

echo "chapter 01: recomputation, model small, naive attention, micro-batch 8 x $seq tokens, $steps steps x $rounds rounds"
echo "(step times: the median of steps 2-$steps over every round)"
for r in $(seq 1 "$rounds"); do
    for m in none selective full offload; do
        "$bin/01_single_gpu" --model small --attention naive --recompute $m --seq "$seq" --micro-batch 8 \
            --steps "$steps" --warmup 1 --eval-every 0 --log-every 1000 --log-jsonl "$out/$m.$r.jsonl" >/dev/null
    done
done
python3 - "$out" "$rounds" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
print(f"{'recompute':>10} {'step ms':>8} {'vs none':>8} {'act peak MiB':>13} {'host MiB':>9} {'GFLOP/step':>11} "
      f"{'vs none':>8} {'MFU':>6} {'HFU':>6}")
base = flops0 = None
for m in ("none", "selective", "full", "offload"):
    rows = [json.loads(l) for r in range(1, rounds + 1) for l in list(open(f"{out}/{m}.{r}.jsonl"))[1:]]
    ms = 1e3 * statistics.median(x["seconds"] for x in rows)
    mfu = statistics.median(x["mfu"] for x in rows)
    hfu = statistics.median(x.get("hfu", x["mfu"]) for x in rows)
    act = rows[-1]["mem"]["activations"]["peak"] / 2**20
    host = rows[-1]["mem"].get("offloaded", {"peak": 0})["peak"] / 2**20
    flops = rows[-1]["flops_counted"]  # the same every step
    base, flops0 = base or ms, flops0 or flops
    print(f"{m:>10} {ms:8.1f} {ms / base:7.2f}x {act:13.1f} {host:9.1f} {flops / 1e9:11.3f} {flops / flops0:7.4f}x "
          f"{100 * mfu:5.1f}% {100 * hfu:5.1f}%")
PY
