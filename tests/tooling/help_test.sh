#!/usr/bin/env bash
# help_test.sh — every program's --help opens with its chapter's own flags, and lists the flags it always had.
#
# Issue 31: a chapter's flags (--tp, --pp-schedule, --moe-balance) were lost among the shared checkpoint,
# export and fault flags. Flags::usage (common/config.cpp) prints groups; each program names its own with
# flags.chapter(...). For each program below, tests/tooling/help_check.py checks its --help: the first heading
# is the chapter's, no heading twice, every flag under a heading and once, and the set of flags exactly the
# one recorded here (the flags of main before the groups came; a flag added or removed must be recorded).
# The check must be able to fail: a real --help with its chapter's group moved to the end, with a flag
# doubled, with one dropped, must each be refused.
# Needs the programs (BIN, default build/bin); `make test` builds them and runs this (not `make test CH=NN`).
# Prints "N passed, N failed, N skipped" like the test binaries.
#   bash tests/tooling/help_test.sh
set -uo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
bin=${BIN:-build/bin}
[[ $bin = /* ]] || bin=$src/$bin
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# TrainConfig::register_flags and register_parallel_flags: the flags every chapter program shares
train="model device data val-data seq micro-batch grad-accum recompute attention precision tf32 steps warmup lr
       min-lr weight-decay beta1 beta2 grad-clip seed log-every eval-every log-jsonl inject-nan export-hf generate
       max-new temperature top-k tokenizer save save-every mtbf-hours keep save-async resume"
parallel="dp tp pp cp ep sp comm comm-timeout inject-failure inject-hang"

# program | the first heading of its --help | its flags
programs=(
    "01_single_gpu|Training on one GPU (chapter 01)|$train dump-reference"
    "02_data_parallel|Data parallelism (chapter 02)|$train $parallel dp-mode bucket-mb no-sync trace sdc-check sdc-flip-bit"
    "03_zero|ZeRO (chapter 03)|$train $parallel zero zero-defer-gather"
    "04_tensor_parallel|Tensor parallelism (chapter 04)|$train $parallel zero"
    "05_sequence_parallel|Sequence parallelism (chapter 05)|$train $parallel zero"
    "06_context_parallel|Context parallelism (chapter 06)|$train $parallel zero cp-shard cp-attn"
    "07_pipeline_parallel|Pipeline parallelism (chapter 07)|$train $parallel zero pp-schedule pp-chunks pp-layers
        pp-cost-b pp-cost-w trace inject-at"
    "08_expert_parallel|Expert parallelism (chapter 08)|$train $parallel zero moe-balance moe-aux-coef moe-bias-rate
        moe-capacity moe-router moe-shared dump-reference"
    "09_5d|5D parallelism (chapter 09)|$train $parallel zero force-tp-across-nodes config pp-schedule pp-chunks
        pp-layers pp-cost-b pp-cost-w trace cp-shard cp-attn moe-balance moe-aux-coef moe-bias-rate moe-capacity
        moe-router moe-shared"
    "09_5d_plan|Layout planner (chapter 09)|model machine gpus gpus-per-node gpu-memory intra-bw inter-bw
        peak-tflops efficiency seq global-batch precision attention top allow-cross-node-tp cp-min-seq dp tp pp cp
        ep zero sp recompute micro-batch grad-accum pp-schedule pp-chunks"
    "10_kernels|Kernels lab (chapter 10)|part sizes gpu-sizes model tokens reps rungs fused-tokens attn-batch
        attn-seq head-dims"
    "11_mixed_precision|Mixed precision (chapter 11)|$train schemes"
    "bench_comm|All-reduce bandwidth (benchmark)|reps max-mib"
    "bench_comm_scaling|Collective scaling (benchmark)|reps mib header"
    "bench_checkpoint|Checkpoint speed (benchmark)|model dir bf16"
)

passed=0 failed=0 skipped=0
verdict() {  # name, 0 = pass; on failure what the check printed
    if [ "$2" = 0 ]; then passed=$((passed + 1)); echo "help test: PASS: $1"
    else failed=$((failed + 1)); echo "help test: FAIL: $1"; echo "$out" | head -n 12 | sed 's/^/    | /'; fi
}
check() { python3 "$src/tests/tooling/help_check.py" "$@"; }

for row in "${programs[@]}"; do
    IFS='|' read -r -d '' prog first flags <<<"$row"  # -d '': a row's flags run over several lines
    if [ ! -x "$bin/$prog" ]; then
        skipped=$((skipped + 1)); echo "help test: SKIP: $prog is not built ($bin/$prog)"; continue
    fi
    "$bin/$prog" --help >"$tmp/$prog" 2>&1
    rc=$?
    out=$(check "$tmp/$prog" "$prog" "$first" "$flags" 2>&1)
    ok=$?
    [ "$rc" = 0 ] || { out="--help exited with status $rc"$'\n'$(head -n 5 "$tmp/$prog"); ok=1; }
    verdict "$prog --help opens with '$first', every recorded flag once" $ok
done

# The check must refuse a --help whose chapter group is not first, or whose flags changed: planted from
# 04_tensor_parallel's real output (its first group moved to the end; --zero doubled; --tp dropped).
prog=04_tensor_parallel
if [ -s "$tmp/$prog" ]; then
    row=${programs[3]}  # 04_tensor_parallel's
    IFS='|' read -r -d '' _ first flags <<<"$row"
    refused() {  # name, planted file, the problem the check must name
        out=$(check "$2" "$prog" "$first" "$flags" 2>&1)
        local rc=$?
        [ "$rc" = 1 ] && grep -qF -- "$3" <<<"$out"
        verdict "refused: $1" $?
    }
    # the blocks after the summary: a blank line, then a heading and its flags
    awk 'NR <= 2 { print > "'"$tmp/head"'"; next } /^$/ { n++ } { print > ("'"$tmp/block."'" n) }' "$tmp/$prog"
    last=$(ls "$tmp"/block.* | sed 's/.*\.//' | sort -n | tail -n 1)
    { cat "$tmp/head"; for i in $(seq 2 "$last") 1; do cat "$tmp/block.$i"; done; } >"$tmp/moved"
    refused "the chapter's group moved to the end" "$tmp/moved" "not the chapter's '$first'"
    { cat "$tmp/$prog"; grep -m 1 '^  --zero ' "$tmp/$prog"; } >"$tmp/doubled"
    refused "--zero listed twice" "$tmp/doubled" "--zero appears 2 times"
    grep -v '^  --tp ' "$tmp/$prog" >"$tmp/dropped"
    refused "--tp dropped" "$tmp/dropped" "--tp is missing"
else
    skipped=$((skipped + 3)); echo "help test: SKIP: the planted cases need $bin/$prog"
fi

echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" = 0 ]
