#!/usr/bin/env bash
# hf_export_test.sh — a mixture of experts to and from a Hugging Face folder at any expert-parallel degree
# (chapter 08's program, tiny-moe, CPU ranks). Every rank holds E/ep experts; the folder holds all of them:
#   1. --export-hf after 30 steps at ep 2 × dp 2, and after 30 steps at ep 4 × dp 4, is byte for byte the ep-1
#      export of the same training (the run's last checkpoint exported on one rank with --steps 0 --resume);
#      the ep-2 checkpoint exported again at ep 4, ep 2 × tp 2 (the experts' width cut over tp) and ep 2 × dp 4
#      with ZeRO-3 (each expert gathered over edp) gives the same bytes;
#   2. that export loads (--model DIR) at ep 1, 2 and 4 with the same first-step loss;
#   3. a Mixtral that transformers' save_pretrained wrote (tools/hf_reference.py make --experts 4) loads at ep 1,
#      2 and 4 with the same first-step loss (skipped, saying why, without PyTorch and transformers or with
#      PENTA_NO_TORCH=1: only making that folder needs them).
# Logits against transformers' MixtralForCausalLM at ep 2 and 4: tests/08_expert_parallel/test_hf_mixtral.cpp.
# `make test CH=08` runs it.   bash tests/08_expert_parallel/hf_export_test.sh   (BIN, MPIRUN as make sets them)
set -uo pipefail
here=$(dirname "$0")
source "$here/../expect_fail.sh"
source "$here/../checkpoint_testing.sh"
expect_needs_mpi "Hugging Face export test (chapter 08)"
prog="$BIN/08_expert_parallel"
common=(--model tiny-moe --seq 16 --warmup 2 --log-every 10 --eval-every 0)
# the same global batch of 4 sequences in every layout
one=("$prog" --dp 1 --ep 1 --micro-batch 4)
ep2=($MPIRUN -np 2 "$prog" --dp 2 --ep 2 --micro-batch 2)
ep4=($MPIRUN -np 4 "$prog" --dp 4 --ep 4 --micro-batch 1)

# 1. the export of a training at ep 2 and at ep 4 = the ep-1 export of the same weights
for layout in ep2 ep4; do
    declare -n run=$layout
    ckpt_run "$layout: 30 steps, saved at the last, exported" 400 "${run[@]}" "${common[@]}" --steps 30 \
        --save "$TMP/ck_$layout" --save-every 30 --export-hf "$TMP/$layout"
    ckpt_grep "$layout: every expert of the 4 layers in the file (126 tensors: 96 of experts)" \
        "(126 tensors, F32"
    ckpt_run "$layout's checkpoint exported on one rank (ep 1)" 200 "${one[@]}" "${common[@]}" --steps 0 \
        --resume "$TMP/ck_$layout/step_000030" --export-hf "$TMP/${layout}_ep1"
    ckpt_same_bytes "$layout: the export is the ep-1 export byte for byte" "$TMP/${layout}_ep1/model.safetensors" \
        "$TMP/$layout/model.safetensors"
    ckpt_same_bytes "$layout: config.json too" "$TMP/${layout}_ep1/config.json" "$TMP/$layout/config.json"
    unset -n run
done
ck="$TMP/ck_ep2/step_000030"
ckpt_run "ep 2's checkpoint exported at ep 4" 200 "${ep4[@]}" "${common[@]}" --steps 0 --resume "$ck" \
    --export-hf "$TMP/again_ep4"
ckpt_same_bytes "ep 4 = ep 1" "$TMP/ep2_ep1/model.safetensors" "$TMP/again_ep4/model.safetensors"
ckpt_run "ep 2's checkpoint exported at ep 2 x tp 2" 200 $MPIRUN -np 4 "$prog" --dp 2 --ep 2 --tp 2 --micro-batch 2 \
    "${common[@]}" --steps 0 --resume "$ck" --export-hf "$TMP/again_tp2"
ckpt_same_bytes "ep 2 x tp 2 = ep 1" "$TMP/ep2_ep1/model.safetensors" "$TMP/again_tp2/model.safetensors"
ckpt_run "ep 2's checkpoint exported at ep 2 x dp 4, ZeRO-3" 200 $MPIRUN -np 4 "$prog" --dp 4 --ep 2 --zero 3 \
    --micro-batch 1 "${common[@]}" --steps 0 --resume "$ck" --export-hf "$TMP/again_zero3"
ckpt_same_bytes "ep 2 x dp 4 ZeRO-3 = ep 1" "$TMP/ep2_ep1/model.safetensors" "$TMP/again_zero3/model.safetensors"

# 2. and 3. a Mixtral folder loaded at ep 1, 2 and 4: the first step's loss
loads() {  # loads LABEL DIR: one step from DIR's weights at ep 1, 2 and 4, the same loss
    local label=$1 dir=$2 logs=() layout log
    for layout in one ep2 ep4; do
        declare -n run=$layout
        log="$TMP/load_$(basename "$dir")_$layout.jsonl"
        ckpt_run "$label loaded at ${layout/one/ep1}" 200 "${run[@]}" --model "$dir" --seq 16 --warmup 0 --steps 1 \
            --eval-every 0 --log-jsonl "$log"
        logs+=("$log")
        unset -n run
    done
    ckpt_first_loss "$label: the same first-step loss at ep 1, 2 and 4" 1e-6 "${logs[@]}"
}
loads "our ep-2 export" "$TMP/ep2"
py=/usr/bin/python3
if [ "${PENTA_NO_TORCH:-0}" = 1 ]; then
    expect_skip "transformers' save_pretrained Mixtral at ep 1, 2 and 4" "PENTA_NO_TORCH=1 hides PyTorch, which makes it"
elif ! "$py" -c 'import torch, transformers, safetensors' 2>/dev/null; then
    expect_skip "transformers' save_pretrained Mixtral at ep 1, 2 and 4" "$py cannot import torch, transformers and safetensors"
else
    "$py" "$here/../../tools/hf_reference.py" make "$TMP/mixtral" --experts 4 --layers 2 --vocab 256 \
        >/dev/null 2>&1  # vocabulary 256: --data addition's byte tokenizer
    if [ -s "$TMP/mixtral/model.safetensors" ]; then
        loads "save_pretrained's Mixtral" "$TMP/mixtral"
    else
        expect_verdict "save_pretrained's Mixtral made" "tools/hf_reference.py make --experts 4 failed" "" ""
    fi
fi
expect_summary
