#!/usr/bin/env bash
# bench_06_context_parallel.sh — chapter 06: step time, activation and K/V-workspace memory of context
# parallelism at a long sequence on CPU ranks: cp 1 (whole sequences, local attention), then cp 2 and cp 4 with
# ring and all-gather attention (zig-zag sharding), the same global batch for every row. Prints a table;
# asserts nothing.
#
# Model `small`'s shape (3.0M params) with max_position_embeddings 4096 (a config.json written here: the preset
# stops at 256 tokens), 4 sequences x SEQ (512) tokens per step, one BLAS thread per rank. "act MiB" is
# rank 0's peak of saved activations (falls ~1/cp), "wksp MiB" its workspace peak (the all-gather holds every
# rank's K/V), "cp MiB" what each rank sent on the cp group per step, "exposed ms" its wait for K/V, "hidden %"
# the share of ring transfers complete when the block's attention finished. Figures are medians over steps 2..
# of REPEATS interleaved runs.
#   BIN=build/bin bash scripts/bench_06_context_parallel.sh          (make bench runs it)
set -euo pipefail
bin=${BIN:-build/bin}
steps=${STEPS:-6}
repeats=${REPEATS:-2}
seq=${SEQ:-512}
source "$(dirname "$0")/bench_mpi.sh" bench_06_context_parallel  # $mpirun_cmd, $cores, $tmp

cat > "$tmp/config.json" <<'JSON'
{"model_type": "llama", "vocab_size": 256, "hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 8,
 "num_key_value_heads": 4, "intermediate_size": 704, "max_position_embeddings": 4096, "rope_theta": 10000.0,
 "rms_norm_eps": 1e-5, "tie_word_embeddings": true}
JSON
echo "chapter 06: context parallelism, model small (max_seq 4096), 4 sequences x $seq tokens per step, $steps steps x $repeats runs per row"
echo "this machine has $cores CPU core(s): with more ranks than cores the ranks share cores (--oversubscribe), so"
echo "cp > $cores measures the cost of splitting and communicating, not a speed-up; load average at start:"
echo "$(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$repeats"); do
    for cfg in "1 ring" "2 ring" "2 allgather" "4 ring" "4 allgather"; do
        set -- $cfg
        $mpirun_cmd -np "$1" "$bin/06_context_parallel" --cp "$1" --cp-attn "$2" --cp-shard zigzag --model "$tmp/config.json" \
            --micro-batch 4 --seq "$seq" --steps "$steps" --warmup 1 --eval-every 0 --log-every 1000 \
            --log-jsonl "$tmp/cp$1-$2-$r.jsonl" >/dev/null
    done
done

python3 - "$tmp" <<'EOF'
import glob, json, os, statistics, sys
tmp = sys.argv[1]
print(f"{'cp':>3} {'attention':>10} {'step ms':>8} {'tokens/s':>9} {'act MiB':>8} {'wksp MiB':>9} {'cp MiB':>7} "
      f"{'exposed ms':>10} {'hidden %':>8}")
for cp, attn in ((1, "ring"), (2, "ring"), (2, "allgather"), (4, "ring"), (4, "allgather")):
    rows = []
    for f in sorted(glob.glob(os.path.join(tmp, f"cp{cp}-{attn}-*.jsonl"))):
        rows += [json.loads(l) for l in open(f)][1:]  # step 1 pays for first-touch allocations
    if not rows:
        continue
    med = lambda k: statistics.median(r.get(k, 0) for r in rows)
    mib = lambda tag: statistics.median(r["mem"][tag]["peak"] for r in rows) / 2**20
    label = "(local)" if cp == 1 else attn
    print(f"{cp:>3} {label:>10} {1e3 * med('seconds'):8.1f} {med('tokens_per_s'):9.0f} {mib('activations'):8.1f} "
          f"{mib('workspace'):9.1f} {med('cp MiB'):7.2f} {med('exposed ms'):10.1f} "
          f"{(str(round(med('hidden %'))) if attn == 'ring' and cp > 1 else '-'):>8}")
EOF
