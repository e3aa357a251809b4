#!/usr/bin/env bash
# bench_07_pipeline_parallel.sh — chapter 07: step time of every pipeline schedule on CPU ranks, pp 2 and pp 4, m = 8
# micro-batches per step, with the bubble on the wall clock beside the logical clock's. Prints a table; asserts
# nothing.
#
# Model `small`'s shape with 8 layers (a config.json written here, so pp 4 with 2 chunks per stage has a layer per
# virtual stage), 8 micro-batches x 2 sequences x 32 tokens per step, one BLAS thread per rank; pp 1 is the same
# step without a pipeline (gradient accumulation on one rank). Per row: the median step time and tokens/s over
# steps 2.. ; "logical" the schedule's bubble on the logical clock (F = B = W = 1), "measured costs" the same clock
# with the F, B, W times the last step measured, "wall" the bubble on the wall clock, idle over compute time (the
# last step's mean over the stages; "wall median" the step log's idle/compute over all steps). With more ranks
# than cores the ranks share cores, so the wall bubble there counts the other ranks' compute too.
#   BIN=build/bin bash scripts/bench_07_pipeline_parallel.sh          (make bench runs it)
set -euo pipefail
bin=${BIN:-build/bin}
steps=${STEPS:-6}
source "$(dirname "$0")/bench_mpi.sh" bench_07_pipeline_parallel  # $mpirun_cmd, $cores, $tmp

cat > "$tmp/config.json" <<'JSON'
{"model_type": "llama", "vocab_size": 256, "hidden_size": 256, "num_hidden_layers": 8, "num_attention_heads": 8,
 "num_key_value_heads": 4, "intermediate_size": 704, "max_position_embeddings": 256, "rope_theta": 10000.0,
 "rms_norm_eps": 1e-5, "tie_word_embeddings": true}
JSON
echo "chapter 07: pipeline parallelism, model small with 8 layers, 8 micro-batches x 2 x 32 tokens per step, $steps steps per row"
echo "this machine has $cores CPU core(s): with more ranks than cores they share cores (--oversubscribe), so pp > $cores"
echo "measures the schedule's structure, not a speed-up; load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
rows="1:1f1b 2:afab 2:1f1b 2:interleaved 2:zb1 2:dualpipe 4:afab 4:1f1b 4:interleaved 4:zb1 4:dualpipe"
for row in $rows; do
    pp=${row%%:*} s=${row#*:}
    extra=""
    [ "$s" = interleaved ] && extra="--pp-chunks 2"
    $mpirun_cmd -np "$pp" "$bin/07_pipeline_parallel" --pp "$pp" --pp-schedule "$s" $extra --model "$tmp/config.json" \
        --micro-batch 2 --seq 32 --grad-accum 8 --steps "$steps" --warmup 1 --log-every 1000 \
        --log-jsonl "$tmp/pp$pp-$s.jsonl" >"$tmp/pp$pp-$s.txt"
done
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$tmp" $rows <<'EOF'
import json, re, statistics, sys
tmp = sys.argv[1]
print(f"{'pp':>3} {'schedule':>11} {'step ms':>8} {'tokens/s':>9} {'logical':>8} {'formula':>8} {'measured costs':>15} "
      f"{'wall':>6} {'wall median':>12}")
row = re.compile(r"^\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s.*\|\s+([\d.]+)\s+([\d.]+)\s+\|\s+([\d.]+)\s*$")
for arg in sys.argv[2:]:
    pp, s = arg.split(":")
    rows = [json.loads(l) for l in open(f"{tmp}/pp{pp}-{s}.jsonl")][1:]  # step 1 pays for first-touch allocations
    med = lambda k: statistics.median(r.get(k, 0) for r in rows)
    stages = [m.groups() for m in map(row.match, open(f"{tmp}/pp{pp}-{s}.txt")) if m]
    mean = lambda i: sum(float(g[i]) for g in stages) / len(stages)
    print(f"{pp:>3} {s:>11} {1e3 * med('seconds'):8.1f} {med('tokens_per_s'):9.0f} {100 * mean(1):7.1f}% "
          f"{100 * mean(2):7.1f}% {100 * mean(3):14.1f}% {100 * mean(5):5.1f}% {med('idle/compute %'):11.1f}%")
EOF
