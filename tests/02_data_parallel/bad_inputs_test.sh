#!/usr/bin/env bash
# bad_inputs_test.sh — chapter 02's rows of the bad-input table (chapter 01's holds the single-rank ones):
# the flags of a job of several ranks and the failures only such a job has. Each row runs chapter 02 under
# `mpirun -np 2` and must exit non-zero, not by a signal, within 10 s (the NaN row, which trains until step 2,
# within 60 s: on a loaded 2-core machine starting 2 ranks and 2 steps has taken over 10 s, and the limit
# only has to tell "ended" from "hung"), naming the flag and the rule
# (tests/expect_fail.sh): the injection flags' ranks checked against the job, --comm-timeout's edge
# values, the layout rules in the order that names the real one first (--tp 2 on 2 ranks: chapter 02 is
# data parallel only, not "pass --dp 2"), chapter 02's own flags, and a NaN injected on one rank of two,
# which every rank reports naming the tensor. Prints "N passed, N failed, N skipped"; `make test CH=02`.
#   bash tests/02_data_parallel/bad_inputs_test.sh     (BIN: the programs' folder; MPIRUN: as make sets it)
set -uo pipefail
source "$(dirname "$0")/../expect_fail.sh"
expect_needs_mpi "bad inputs test (chapter 02)"
head -c 4096 /dev/zero >"$TMP/zeros.bin"

EXPECT_JOBS=2 expect_table 10 $MPIRUN -np 2 "$BIN/02_data_parallel" <<'EOF'
# the injection flags name ranks of the job
--dp 2 --inject-failure 7:2           | --inject-failure '7:2': rank 7 is not a rank of this job, which has 2 (0 ... 1)
--dp 2 --inject-failure 1             | --inject-failure '1' must be RANK:STEP
--dp 2 --inject-failure 1:0           | --inject-failure '1:0' must be RANK:STEP with RANK >= 0 and STEP >= 1
--dp 2 --inject-hang 2:1              | --inject-hang '2:1': rank 2 is not a rank of this job, which has 2
--dp 2 --inject-hang -1:1             | --inject-hang '-1:1' must be RANK:STEP
--dp 2 --inject-hang 1:2:0            | --inject-hang '1:2:0': SECONDS '0' must be a finite number > 0
--dp 2 --inject-hang 1:2:inf          | --inject-hang '1:2:inf': SECONDS 'inf' must be a finite number > 0
--dp 2 --inject-failure 1:99 --steps 3 | --inject-failure 1:99: step 99 is not a step of the run, 1 ... --steps 3
--dp 2 --inject-hang 1:99 --steps 3   | --inject-hang 1:99: step 99 is not a step of the run, 1 ... --steps 3
--dp 2 --inject-failure 4294967297:1  | --inject-failure '4294967297:1': RANK 4294967297 is out of range: at most 2147483647
--dp 2 --sdc-check 1 --sdc-flip-bit 4294967297:1 | --sdc-flip-bit '4294967297:1': RANK 4294967297 is out of range
# the watchdog's deadline
--dp 2 --comm-timeout -1              | --comm-timeout -1 must be a finite number of seconds >= 0
--dp 2 --comm-timeout inf             | --comm-timeout inf must be a finite number of seconds >= 0
--dp 2 --comm-timeout nan             | --comm-timeout nan must be a finite number
# the layout: the real rule first
--tp 2                                | chapter 02 is data parallel only: --tp 2 --pp 1 --cp 1 --ep 1, but each must be 1
--dp 2 --pp 2                         | chapter 02 is data parallel only: --tp 1 --pp 2
--dp 2 --sp                           | --sp needs --tp > 1
--dp 3                                | --dp 3 must be between 1 and the job's 2 rank(s)
--dp 1                                | --dp 1 must equal the number of ranks 2 (chapter 02 is data parallel only): pass --dp 2
--dp 0                                | --dp 0 must be between 1 and the job's 2 rank(s)
--dp 4294967298                       | --dp 4294967298 is out of range: at most 2147483647
# sizes with the dp factor
--dp 2 --micro-batch 1073741823 --grad-accum 2147483647 --seq 2 --steps 3 | --steps 3 × (--micro-batch × --grad-accum × --dp) 4611686011984936962 (the sample ids the run trains on) overflows
--dp 2 --steps 2147483647 --micro-batch 1024 | --steps 2147483647 × (--micro-batch × --grad-accum × --dp) 2048 (the sample ids the run trains on)
# chapter 02's flags
--dp 2 --dp-mode fast                 | --dp-mode fast must be naive or bucketed
--dp 2 --bucket-mb inf                | --bucket-mb inf must be a finite number >= 0
--dp 2 --bucket-mb -1                 | --bucket-mb -1 must be a finite number >= 0
--dp 2 --no-sync=2                    | --no-sync=2 must be 0 or 1
--dp 2 --comm tcp                     | --comm tcp must be auto, mpi or nccl
EOF
EXPECT_JOBS=2 expect_table 60 $MPIRUN -np 2 "$BIN/02_data_parallel" <<'EOF'
# a NaN in one rank's gradient: every rank stops naming the tensor and the rank that found it
--dp 2 --model tiny --data raw:$TMP/zeros.bin --seq 16 --micro-batch 2 --steps 4 --eval-every 0 --inject-nan 2 | step 2: the gradient is not finite && on rank 0, the first non-finite gradient is model.layers.0.self_attn.q_proj.weight
EOF
expect_summary
