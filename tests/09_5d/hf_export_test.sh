#!/usr/bin/env bash
# hf_export_test.sh — a mixture of experts to and from a Hugging Face folder in chapter 09's 5D program, at
# ep 2 × pp 2 (tiny-moe, 4 CPU ranks: each pipeline stage holds 2 of the 4 layers, each ep rank 4 of the 8
# experts of those layers; the folder holds every expert of every layer):
#   1. --export-hf after 30 steps is byte for byte the ep-1 export of the same training (the run's last
#      checkpoint exported on one rank with --steps 0 --resume);
#   2. that export loads (--model DIR) on one rank and at ep 2 × pp 2 with the same first-step loss.
# Chapter 08's tests/08_expert_parallel/hf_export_test.sh covers ep 2 and 4, tp and ZeRO-3, and transformers'
# own Mixtral folders. `make test CH=09` runs it.
#   bash tests/09_5d/hf_export_test.sh   (BIN, MPIRUN as make sets them)
set -uo pipefail
here=$(dirname "$0")
source "$here/../expect_fail.sh"
source "$here/../checkpoint_testing.sh"
expect_needs_mpi "Hugging Face export test (chapter 09)"
prog="$BIN/09_5d"
common=(--seq 16 --eval-every 0)
# the same global batch of 4 sequences in both layouts
one=("$prog" --dp 1 --micro-batch 1 --grad-accum 4)
five=($MPIRUN -np 4 "$prog" --dp 2 --pp 2 --ep 2 --micro-batch 1 --grad-accum 2)

ckpt_run "ep 2 x pp 2: 30 steps, saved at the last, exported" 400 "${five[@]}" --model tiny-moe "${common[@]}" \
    --steps 30 --warmup 2 --log-every 10 --save "$TMP/ck" --save-every 30 --export-hf "$TMP/five"
ckpt_grep "ep 2 x pp 2: every expert of every stage's layers in the file (126 tensors)" "(126 tensors, F32"
ckpt_run "its checkpoint exported on one rank (ep 1, pp 1)" 200 "${one[@]}" --model tiny-moe "${common[@]}" \
    --steps 0 --resume "$TMP/ck/step_000030" --export-hf "$TMP/one"
ckpt_same_bytes "ep 2 x pp 2: the export is the ep-1 export byte for byte" "$TMP/one/model.safetensors" \
    "$TMP/five/model.safetensors"

ckpt_run "the export loaded on one rank" 200 "${one[@]}" --model "$TMP/five" "${common[@]}" --steps 1 --warmup 0 \
    --log-jsonl "$TMP/load_one.jsonl"
ckpt_run "the export loaded at ep 2 x pp 2" 200 "${five[@]}" --model "$TMP/five" "${common[@]}" --steps 1 \
    --warmup 0 --log-jsonl "$TMP/load_five.jsonl"
ckpt_first_loss "the same first-step loss on one rank and at ep 2 x pp 2" 1e-6 "$TMP/load_one.jsonl" \
    "$TMP/load_five.jsonl"
expect_summary
