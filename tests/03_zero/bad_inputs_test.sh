#!/usr/bin/env bash
# bad_inputs_test.sh — chapter 03's rows of the bad-input table (chapter 01's holds the single-rank ones,
# chapter 02's the other flags of a job of several ranks): --zero's edge values, the data-parallel-only
# rule named first, --zero-defer-gather without a stage that gathers the weights after the update, and a NaN injected under ZeRO-3, where each rank holds a shard of every gradient: the
# rank that finds it names the tensor. Each row runs chapter 03 under `mpirun -np 2` and must exit
# non-zero, not by a signal, within 10 s (the NaN row, which trains until step 3, within 60 s: under load
# it has taken over 10 s, and the limit only tells "ended" from "hung"; tests/expect_fail.sh). Prints
# "N passed, N failed, N skipped"; `make test CH=03` runs it.
#   bash tests/03_zero/bad_inputs_test.sh     (BIN: the programs' folder; MPIRUN: as make sets it)
set -uo pipefail
source "$(dirname "$0")/../expect_fail.sh"
expect_needs_mpi "bad inputs test (chapter 03)"
head -c 4096 /dev/zero >"$TMP/zeros.bin"

EXPECT_JOBS=2 expect_table 10 $MPIRUN -np 2 "$BIN/03_zero" <<'EOF'
--dp 2 --zero 4                       | --zero 4 must be 1, 2 or 3 (0: plain data parallelism)
--dp 2 --zero -1                      | --zero -1 must be 1, 2 or 3
--dp 2 --zero 99999999999999999999    | --zero 99999999999999999999 is out of range: at most 2147483647
--dp 2 --zero two                     | --zero two must be an integer
--tp 2 --zero 3                       | chapter 03 is data parallel only: --tp 2
--dp 2 --zero 3 --zero-defer-gather   | --zero-defer-gather needs --zero 1 or 2 (got --zero 3)
--dp 2 --zero 0 --zero-defer-gather   | --zero-defer-gather needs --zero 1 or 2 (got --zero 0)
EOF
EXPECT_JOBS=2 expect_table 60 $MPIRUN -np 2 "$BIN/03_zero" <<'EOF'
--dp 2 --zero 3 --model tiny --data raw:$TMP/zeros.bin --seq 16 --micro-batch 2 --steps 4 --eval-every 0 --inject-nan 3 | step 3: the gradient is not finite && on rank 0, the first non-finite gradient is model.layers.0.self_attn.q_proj.weight, element 0 of this rank's part
EOF
expect_summary
