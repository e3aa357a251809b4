#!/usr/bin/env bash
# abort_test.sh — a pipeline stage that fails, or stops, must bring the whole job down naming itself; no stage may
# wait forever on a receive from it.
#
# Chapter 07 on 4 ranks, 4 stages of the `small` model (4 layers, one per stage), 1F1B. Two places to strike:
# when a step begins (the loop's --inject-failure / --inject-hang, as in every chapter: the other stages then wait
# in the step's starting barrier) and inside the schedule (--inject-at first-f: after the stage's first forward of
# the step, its activation sent, so the stage after it is blocked on a receive from it):
#   --inject-failure 2:2                stage 2 throws when step 2 begins: the job must exit non-zero, not by a
#                                       signal, within 60 s, naming rank 2 (run_main's "[rank 2]" and MPI_Abort);
#   ... --inject-at first-f             the same, after stage 2's F mb 0 of step 2 (the error says so);
#   --inject-hang 3:2 --comm-timeout 5  stage 3 stops in step 2: the others' waits on the pipeline group (the
#                                       step's starting barrier) have the watchdog's deadline, so the job ends
#                                       within 60 s, the report naming the pp group and rank 3 as the one that did
#                                       not arrive;
#   --inject-hang 2:2 --inject-at first-f --comm-timeout 5   stage 2 stops after its first forward of step 2:
#                                       stages 1 and 3 time out on their receives from rank 2 ("recv from rank 2 on
#                                       group pp"), the report naming rank 2 as the one that did not arrive;
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
expect_fail "stage 2 fails inside step 2's schedule, its neighbour blocked on a receive: the job ends naming rank 2" 60 \
    "[rank 2] && injected failure at step 2 (--inject-failure 2:2), inside the schedule after F mb 0" \
    "${run[@]}" --inject-failure 2:2 --inject-at first-f
expect_fail "stage 3 stops in step 2: the others' waits time out, naming rank 3" 60 \
    "on group pp (4 ranks && did not arrive: rank 3" "${run[@]}" --inject-hang 3:2 --comm-timeout 5
expect_fail "stage 2 stops inside step 2's schedule: the receives from it time out, naming rank 2" 60 \
    "recv from rank 2 on group pp (4 ranks && did not arrive: rank 2" \
    "${run[@]}" --inject-hang 2:2 --inject-at first-f --comm-timeout 5
expect_ok "the same job without a fault exits 0" 120 "step 3/3" "${run[@]}"
expect_summary
