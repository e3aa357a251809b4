#!/usr/bin/env bash
# abort_test.sh — a pipeline stage that fails, or stops, must bring the whole job down naming itself; no stage may
# wait forever on a receive from it.
#
# Chapter 07 on 4 ranks, 4 stages of the `small` model (4 layers, one per stage), 1F1B:
#   --inject-failure 2:2                stage 2 throws when step 2 begins, while its neighbours wait on their
#                                       receives from it: the job must exit non-zero, not by a signal, within 60 s,
#                                       naming rank 2 (run_main's "[rank 2]" and MPI_Abort);
#   --inject-hang 3:2 --comm-timeout 5  stage 3 stops in step 2: the others' waits on the pipeline group (the
#                                       step's starting barrier, the receives) have the watchdog's deadline, so the
#                                       job ends within 60 s, the report naming the pp group and rank 3 as the one
#                                       that did not arrive;
#   and the same job without a fault exits 0. The limits only tell ended from hung: starting 4 ranks on a loaded
#   2-core machine takes up to 16 s.
# Prints "N passed, N failed, N skipped" like the test binaries; `make test CH=07` runs it.
#   bash tests/07_pipeline_parallel/abort_test.sh     (BIN: the programs' folder; MPIRUN: as make sets it)
set -uo pipefail
source "$(dirname "$0")/../expect_fail.sh"
expect_needs_mpi "abort test (chapter 07)"
run=($MPIRUN -np 4 "$BIN/07_pipeline_parallel" --pp 4 --model small --seq 16 --micro-batch 1 --grad-accum 4
     --steps 3 --warmup 1 --log-every 1)

expect_fail "stage 2 fails at step 2: the job ends naming rank 2" 60 \
    "[rank 2] && injected failure at step 2" "${run[@]}" --inject-failure 2:2
expect_fail "stage 3 stops in step 2: the others' waits time out, naming rank 3" 60 \
    "on group pp (4 ranks && did not arrive: rank 3" "${run[@]}" --inject-hang 3:2 --comm-timeout 5
expect_ok "the same job without a fault exits 0" 120 "step 3/3" "${run[@]}"
expect_summary
