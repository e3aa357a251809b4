#!/usr/bin/env bash
# checkpoint_test.sh — checkpoints under context parallelism (chapter 06), on CPU ranks: a 10-step run at cp 2
# (zig-zag chunks, ring attention) saves at step 5; resumed from it on one rank (cp 1, chapter 01), steps 6-10
# stay within rtol 1e-5 of the uninterrupted cp 2 run (resharding: the cp ranks hold the same weights, so the
# checkpoint has each once; the attention sums in another order). `make test CH=06` runs it.
#   bash tests/06_context_parallel/checkpoint_test.sh   (BIN, MPIRUN as make sets them)
set -uo pipefail
here=$(dirname "$0")
source "$here/../expect_fail.sh"
source "$here/../checkpoint_testing.sh"
expect_needs_mpi "checkpoint test (chapter 06)"
common=(--model small --seq 16 --micro-batch 4 --steps 10 --warmup 2 --log-every 1 --eval-every 0)
ckpt_run "cp 2: 10 steps, saved at 5" 300 $MPIRUN -np 2 "$BIN/06_context_parallel" --cp 2 "${common[@]}" \
    --save "$TMP/cp" --save-every 5 --log-jsonl "$TMP/cp.jsonl"
ckpt_run "cp 2 -> cp 1: resumed from step 5" 300 "$BIN/01_single_gpu" "${common[@]}" --resume "$TMP/cp/step_000005" \
    --log-jsonl "$TMP/cp1.jsonl"
# playbook: 003.7.3 — resumed in another layout (cp 2 -> cp 1): steps 6-10 within 1e-5
ckpt_compare "cp 2 -> cp 1: steps 6-10 within 1e-5 of the cp 2 run" "$TMP/cp.jsonl" "$TMP/cp1.jsonl" 1e-5
expect_summary
