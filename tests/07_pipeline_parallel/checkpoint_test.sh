#!/usr/bin/env bash
# checkpoint_test.sh — checkpoints under pipeline parallelism (chapter 07), on CPU ranks:
#   1. pp 2, 1F1B: a 10-step run saves at step 5; resumed from it, steps 6-10 equal the uninterrupted run's bitwise
#      (each stage saves its layers; the tied embedding's replica on the last stage is not written twice);
#   2. tp 2 × pp 2 likewise, bitwise;
#   3. resharding: that tp 2 × pp 2 checkpoint resumed at dp 4 with ZeRO-1 (chapter 03; the same global batch of
#      4 sequences): steps 6-10 within rtol 1e-5 of the uninterrupted tp 2 × pp 2 run.
# `make test CH=07` runs it.   bash tests/07_pipeline_parallel/checkpoint_test.sh   (BIN, MPIRUN as make sets them)
set -uo pipefail
here=$(dirname "$0")
source "$here/../expect_fail.sh"
source "$here/../checkpoint_testing.sh"
expect_needs_mpi "checkpoint test (chapter 07)"
common=(--model small --seq 16 --steps 10 --warmup 2 --log-every 1 --eval-every 0)
pp=($MPIRUN -np 2 "$BIN/07_pipeline_parallel" --pp 2 --pp-schedule 1f1b --micro-batch 1 --grad-accum 4 "${common[@]}")
ckpt_run "pp 2 1F1B: 10 steps, saved at 5" 300 "${pp[@]}" --save "$TMP/pp" --save-every 5 --log-jsonl "$TMP/pp.jsonl"
ckpt_run "pp 2 1F1B: resumed from step 5" 300 "${pp[@]}" --resume "$TMP/pp/step_000005" --log-jsonl "$TMP/pp_res.jsonl"
ckpt_compare "pp 2 1F1B: resumed steps 6-10 equal the uninterrupted run's" "$TMP/pp.jsonl" "$TMP/pp_res.jsonl" bitwise

tpp=($MPIRUN -np 4 "$BIN/07_pipeline_parallel" --pp 2 --tp 2 --pp-schedule 1f1b --micro-batch 1 --grad-accum 4
     "${common[@]}")
ckpt_run "tp 2 x pp 2: 10 steps, saved at 5" 400 "${tpp[@]}" --save "$TMP/tpp" --save-every 5 --log-jsonl "$TMP/tpp.jsonl"
ckpt_run "tp 2 x pp 2: resumed from step 5" 400 "${tpp[@]}" --resume "$TMP/tpp/step_000005" \
    --log-jsonl "$TMP/tpp_res.jsonl"
ckpt_compare "tp 2 x pp 2: resumed steps 6-10 equal the uninterrupted run's" "$TMP/tpp.jsonl" "$TMP/tpp_res.jsonl" bitwise
ckpt_run "tp 2 x pp 2 -> dp 4 ZeRO-1: resumed from step 5" 400 $MPIRUN -np 4 "$BIN/03_zero" --dp 4 --zero 1 \
    --micro-batch 1 "${common[@]}" --resume "$TMP/tpp/step_000005" --log-jsonl "$TMP/tpp_dp4.jsonl"
# playbook: 003.7.3 — resumed in another layout (tp 2 × pp 2 -> dp 4 ZeRO-1): steps 6-10 within 1e-5
ckpt_compare "tp 2 x pp 2 -> dp 4 ZeRO-1: steps 6-10 within 1e-5" "$TMP/tpp.jsonl" "$TMP/tpp_dp4.jsonl" 1e-5
expect_summary
