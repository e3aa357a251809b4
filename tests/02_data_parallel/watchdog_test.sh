#!/usr/bin/env bash
# watchdog_test.sh — a rank that stops answering must not hang the job: the others' blocking waits have a
# deadline (--comm-timeout), and when it passes they name what they wait for and the rank that did not
# arrive, and abort the job (common/watchdog.hpp). A rank that is only late is named by the straggler report.
#
# Chapter 02 on 4 ranks (model tiny, 2048 zero tokens: one step takes about a millisecond):
#   --inject-hang 2:3 --comm-timeout 5   rank 2 sleeps forever in step 3; the job must exit non-zero, not by a
#                                        signal, within 60 s, and the report name the all-reduce on group dp
#                                        and rank 2 as the rank that did not arrive (the watchdog ends it ~7 s
#                                        after the ranks start, but starting 4 ranks on a loaded 2-core machine
#                                        has taken 16 s: the limit only has to tell "ended" from "hung");
#   --inject-hang 1:9:1                  rank 1 pauses 1 s in step 9: the run ends normally and the step log
#                                        flags step 9 as a straggler's, naming rank 1.
# Prints "N passed, N failed, N skipped" like the test binaries; `make test CH=02` runs it.
#   bash tests/02_data_parallel/watchdog_test.sh     (BIN: the programs' folder; MPIRUN: as make sets it)
set -uo pipefail
source "$(dirname "$0")/../expect_fail.sh"
expect_needs_mpi "watchdog test"
head -c 4096 /dev/zero >"$TMP/zeros.bin"
run=($MPIRUN -np 4 "$BIN/02_data_parallel" --dp 4 --model tiny --data "raw:$TMP/zeros.bin" --seq 16 --micro-batch 2
     --warmup 1 --eval-every 0 --log-every 4)

# playbook: 003.7.4 — a hung rank ends the job within 60 s, naming the collective and the rank
expect_fail "rank 2 hangs in step 3: the job ends within 60 s naming the all-reduce on dp and rank 2" 60 \
    "watchdog: all_reduce on group dp (4 ranks: world ranks 0 1 2 3) && did not arrive: rank 2 (no word" \
    "${run[@]}" --steps 5 --inject-hang 2:3 --comm-timeout 5
# playbook: 003.7.5 — the step log names the straggler
expect_ok "rank 1 pauses 1 s in step 9: the step log names it as the straggler" 60 \
    "straggler: step 9 took && rank 1 worked longest" "${run[@]}" --steps 12 --inject-hang 1:9:1
expect_summary
