#!/usr/bin/env bash
# bad_inputs_test.sh — chapter 04's rows of the bad-input table (chapter 01's holds the single-rank ones,
# chapter 02's the other flags of a job of several ranks): the layout rules of --dp × --tp (ranks, heads,
# the axes chapter 04 does not have, --sp belonging to chapter 05) and a NaN injected into one tensor-
# parallel shard. Each row runs chapter 04 under `mpirun -np 2` and must exit non-zero, not by a signal,
# within 10 s (tests/expect_fail.sh). Prints "N passed, N failed, N skipped"; `make test CH=04` runs it.
#   bash tests/04_tensor_parallel/bad_inputs_test.sh     (BIN: the programs' folder; MPIRUN: as make sets it)
set -uo pipefail
source "$(dirname "$0")/../expect_fail.sh"
expect_needs_mpi "bad inputs test (chapter 04)"
head -c 4096 /dev/zero >"$TMP/zeros.bin"

EXPECT_JOBS=2 expect_table 10 $MPIRUN -np 2 "$BIN/04_tensor_parallel" <<'EOF'
--tp 2 --sp                           | --sp is sequence parallelism, chapter 05
--tp 1                                | --dp 1 × --pp 1 × --cp 1 × --tp 1 = 1 ranks, but the job has 2
--tp 2 --pp 2                         | --pp 2 --cp 1 --ep 1: pipeline, context and expert parallelism are chapters 06-08
--tp 2 --zero 5                       | --zero 5 must be 1, 2 or 3
--tp 2 --model tiny --data raw:$TMP/zeros.bin --seq 16 --micro-batch 2 --steps 4 --eval-every 0 --inject-nan 2 | step 2: the gradient is not finite && the first non-finite gradient is model.layers.0.self_attn.q_proj.weight
EOF
expect_summary
