#!/usr/bin/env bash
# bench_08_expert_parallel.sh — chapter 08: the step time of the tiny MoE (8 experts of width 128, top 2) beside
# a dense model of the same active parameters (the same shape with one MLP of width 2 x 128), and the MoE with
# its experts on ep 1, 2 and 4 ranks; the same global batch (32 sequences x 64 tokens of the addition task)
# for every row. Prints a table; asserts nothing.
#
# "params/rank" is what each rank holds (the MoE's E/ep experts per layer), "active" what one token computes
# with (formulas.hpp: moe_param_count); "a2a MiB" what each rank sent on its ep group per step (the tokens to
# the experts and back, forward and backward). The dense rows run chapter 02's data parallelism, the MoE rows
# chapter 08 (dp = ranks, ep as shown). Figures are medians over steps 2.. of REPEATS interleaved runs.
#   BIN=build/bin bash scripts/bench_08_expert_parallel.sh          (make bench runs it)
set -euo pipefail
bin=${BIN:-build/bin}
steps=${STEPS:-8}
repeats=${REPEATS:-2}
source "$(dirname "$0")/bench_mpi.sh" bench_08_expert_parallel  # $mpirun_cmd, $cores, $tmp

# tiny-moe's shape with one dense MLP as wide as the two experts a token uses: equal active parameters but
# the router's 8 x 128 per layer
cat > "$tmp/dense.json" <<'JSON'
{"model_type": "llama", "vocab_size": 256, "hidden_size": 128, "num_hidden_layers": 4, "num_attention_heads": 4,
 "num_key_value_heads": 2, "intermediate_size": 256, "max_position_embeddings": 64, "rope_theta": 10000.0,
 "rms_norm_eps": 1e-5, "tie_word_embeddings": true}
JSON
echo "chapter 08: mixture of experts, tiny-moe (8 experts x 128, top 2) vs a dense model of equal active parameters,"
echo "32 sequences x 64 tokens per step, $steps steps x $repeats runs per row; this machine has $cores CPU core(s): rows"
echo "with more ranks than cores share them (--oversubscribe) and measure the cost of splitting, not a speed-up;"
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
common="--seq 64 --steps $steps --warmup 1 --eval-every 0 --log-every 1000"
for r in $(seq "$repeats"); do
    for np in 1 2 4; do
        $mpirun_cmd -np "$np" "$bin/02_data_parallel" --dp "$np" --model "$tmp/dense.json" --micro-batch $((32 / np)) \
            $common --log-jsonl "$tmp/dense-$np-$r.jsonl" >"$tmp/dense-$np-$r.txt"
        for ep in 1 2 4; do
            [ "$ep" -gt "$np" ] && continue
            $mpirun_cmd -np "$np" "$bin/08_expert_parallel" --dp "$np" --ep "$ep" --model tiny-moe \
                --micro-batch $((32 / np)) $common --log-jsonl "$tmp/moe-$np-$ep-$r.jsonl" >"$tmp/moe-$np-$ep-$r.txt"
        done
    done
done

python3 - "$tmp" <<'EOF'
import glob, json, os, re, statistics, sys
tmp = sys.argv[1]
def rows(pattern):
    out = []
    for f in sorted(glob.glob(os.path.join(tmp, pattern))):
        out += [json.loads(l) for l in open(f)][1:]  # step 1 pays for first-touch allocations
    return out
def active(pattern):  # "N params, M active per token" of the MoE program's header; the dense "N params"
    text = open(sorted(glob.glob(os.path.join(tmp, pattern)))[0]).read()
    m = re.search(r": (\S+) params(, (\S+) active per token)?", text)
    return m.group(3) or m.group(1)
print(f"{'model':>6} {'ranks':>5} {'ep':>3} {'step ms':>8} {'tokens/s':>9} {'a2a MiB':>8} {'params/rank':>11} {'active':>7}")
for np in (1, 2, 4):
    for kind, ep in [("dense", None)] + [("moe", e) for e in (1, 2, 4) if e <= np]:
        r = rows(f"dense-{np}-*.jsonl" if kind == "dense" else f"moe-{np}-{ep}-*.jsonl")
        if not r:
            continue
        med = lambda k: statistics.median(x.get(k, 0) for x in r)
        name = f"dense-{np}-*.txt" if kind == "dense" else f"moe-{np}-{ep}-*.txt"
        held = r[-1]["mem"]["params"]["current"] / 4  # rank 0's f32 weights
        print(f"{kind:>6} {np:>5} {ep or '-':>3} {1e3 * med('seconds'):8.1f} {med('tokens_per_s'):9.0f} "
              f"{med('a2a MiB') if kind == 'moe' else 0:8.2f} {held / 1e6:10.3f}M {active(name):>7}")
EOF
