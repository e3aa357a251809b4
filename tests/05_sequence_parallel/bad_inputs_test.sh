#!/usr/bin/env bash
# bad_inputs_test.sh — chapter 05's rows of the bad-input table (chapter 01's holds the single-rank ones,
# chapter 02's the other flags of a job of several ranks): the layout's rules come before sequence
# parallelism's token rules, so --tp 3 with the model's 4 kv heads names the kv heads, not a token count;
# then the token rules themselves. Each row runs chapter 05 under mpirun and must exit non-zero, not by a
# signal, within 10 s (tests/expect_fail.sh). Prints "N passed, N failed, N skipped"; `make test CH=05`.
#   bash tests/05_sequence_parallel/bad_inputs_test.sh     (BIN: the programs' folder; MPIRUN: as make sets it)
set -uo pipefail
source "$(dirname "$0")/../expect_fail.sh"
expect_needs_mpi "bad inputs test (chapter 05)"

EXPECT_JOBS=2 expect_table 10 $MPIRUN -np 3 "$BIN/05_sequence_parallel" <<'EOF'
--tp 3 --micro-batch 1 --seq 7        | --tp 3 must divide the model's 4 key/value heads (small)
--tp 3 --dp 2                         | --dp 2 × --pp 1 × --cp 1 × --tp 3 = 6 ranks, but the job has 3
EOF
EXPECT_JOBS=2 expect_table 10 $MPIRUN -np 2 "$BIN/05_sequence_parallel" <<'EOF'
--tp 2 --micro-batch 1 --seq 7        | --sp splits the --micro-batch 1 × --seq 7 = 7 tokens of a micro-batch into --tp 2 equal blocks
--tp 2 --micro-batch 3 --seq 5        | --micro-batch 3 × --seq 5 = 15 tokens of a micro-batch into --tp 2 equal blocks
--tp 2 --pp 2                         | --pp 2 --cp 1 --ep 1: pipeline, context and expert parallelism are chapters 06-08
--tp 2 --sp=0 --zero 7                | --zero 7 must be 1, 2 or 3
EOF
expect_summary
