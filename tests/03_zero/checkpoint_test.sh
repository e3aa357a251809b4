#!/usr/bin/env bash
# checkpoint_test.sh — checkpoints under ZeRO (chapter 03), on CPU ranks: a 10-step run at dp 2 saves at step 5;
# resumed from it, steps 6-10 equal the uninterrupted run's bit for bit, at ZeRO-3 (each rank saves and loads
# its shard of the weights, the only copy) and ZeRO-1 (the weights from the flat buffer, the moments sharded);
# and ZeRO-1 with --zero-defer-gather, whose save must first land the weights' all-gathers still in flight.
# Resharding from ZeRO-3 dp 4 is tests/04_tensor_parallel/checkpoint_test.sh's. `make test CH=03` runs it.
#   bash tests/03_zero/checkpoint_test.sh     (BIN: the programs' folder; MPIRUN: as make sets it)
set -uo pipefail
here=$(dirname "$0")
source "$here/../expect_fail.sh"
source "$here/../checkpoint_testing.sh"
expect_needs_mpi "checkpoint test (chapter 03)"
for z in 3 1; do
    run=($MPIRUN -np 2 "$BIN/03_zero" --dp 2 --zero $z --model small --seq 16 --micro-batch 2 --steps 10 --warmup 2
         --log-every 1 --eval-every 0)
    ckpt_run "ZeRO-$z dp 2: 10 steps, saved at 5" 300 "${run[@]}" --save "$TMP/z$z" --save-every 5 \
        --log-jsonl "$TMP/full$z.jsonl"
    ckpt_run "ZeRO-$z dp 2: resumed from step 5" 300 "${run[@]}" --resume "$TMP/z$z/step_000005" \
        --log-jsonl "$TMP/res$z.jsonl"
    ckpt_compare "ZeRO-$z dp 2: resumed steps 6-10 equal the uninterrupted run's" "$TMP/full$z.jsonl" \
        "$TMP/res$z.jsonl" bitwise
done
# the weights' all-gathers left in flight into the next forward: the save at step 5 lands them first
# (TrainLoop::settle_weights); resumed waiting for them at once, steps 6-10 are the deferred run's bit for bit
run=($MPIRUN -np 2 "$BIN/03_zero" --dp 2 --zero 1 --model small --seq 16 --micro-batch 2 --steps 10 --warmup 2
     --log-every 1 --eval-every 0)
ckpt_run "ZeRO-1 dp 2 --zero-defer-gather: 10 steps, saved at 5" 300 "${run[@]}" --zero-defer-gather \
    --save "$TMP/z1d" --save-every 5 --log-jsonl "$TMP/full1d.jsonl"
ckpt_run "ZeRO-1 dp 2: resumed from the deferred run's step 5" 300 "${run[@]}" --resume "$TMP/z1d/step_000005" \
    --log-jsonl "$TMP/res1d.jsonl"
ckpt_compare "ZeRO-1 dp 2 --zero-defer-gather: resumed steps 6-10 equal the uninterrupted run's" "$TMP/full1d.jsonl" \
    "$TMP/res1d.jsonl" bitwise
expect_summary
