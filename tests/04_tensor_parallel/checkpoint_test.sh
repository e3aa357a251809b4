#!/usr/bin/env bash
# checkpoint_test.sh — checkpoints under tensor parallelism (chapter 04), on CPU ranks:
#   1. tp 2: a 10-step run saves at step 5; resumed from it, steps 6-10 equal the uninterrupted run's bitwise;
#   2. resharding: saved by ZeRO-3 at dp 4 (chapter 03), resumed at tp 2 × dp 2 (the same global batch of 4
#      sequences): steps 6-10 within rtol 1e-5 of the uninterrupted ZeRO-3 run (the sums run in another order).
# `make test CH=04` runs it.   bash tests/04_tensor_parallel/checkpoint_test.sh   (BIN, MPIRUN as make sets them)
set -uo pipefail
here=$(dirname "$0")
source "$here/../expect_fail.sh"
source "$here/../checkpoint_testing.sh"
expect_needs_mpi "checkpoint test (chapter 04)"
common=(--model small --seq 16 --steps 10 --warmup 2 --log-every 1 --eval-every 0)
tp=($MPIRUN -np 2 "$BIN/04_tensor_parallel" --tp 2 --micro-batch 4 "${common[@]}")
ckpt_run "tp 2: 10 steps, saved at 5" 300 "${tp[@]}" --save "$TMP/tp" --save-every 5 --log-jsonl "$TMP/tp.jsonl"
ckpt_run "tp 2: resumed from step 5" 300 "${tp[@]}" --resume "$TMP/tp/step_000005" --log-jsonl "$TMP/tp_res.jsonl"
ckpt_compare "tp 2: resumed steps 6-10 equal the uninterrupted run's" "$TMP/tp.jsonl" "$TMP/tp_res.jsonl" bitwise

z3=($MPIRUN -np 4 "$BIN/03_zero" --dp 4 --zero 3 --micro-batch 1 "${common[@]}")
ckpt_run "ZeRO-3 dp 4: 10 steps, saved at 5" 400 "${z3[@]}" --save "$TMP/z3" --save-every 5 --log-jsonl "$TMP/z3.jsonl"
ckpt_run "ZeRO-3 dp 4 -> tp 2 x dp 2: resumed from step 5" 400 $MPIRUN -np 4 "$BIN/04_tensor_parallel" --tp 2 --dp 2 \
    --micro-batch 2 "${common[@]}" --resume "$TMP/z3/step_000005" --log-jsonl "$TMP/z3_tpdp.jsonl"
# playbook: 003.7.3 — resumed in another layout (ZeRO-3 dp 4 -> tp 2 × dp 2): steps 6-10 within 1e-5
ckpt_compare "ZeRO-3 dp 4 -> tp 2 x dp 2: steps 6-10 within 1e-5" "$TMP/z3.jsonl" "$TMP/z3_tpdp.jsonl" 1e-5
expect_summary
