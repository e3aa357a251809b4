#!/usr/bin/env bash
# bad_inputs_test.sh — chapter 06's rows of the bad-input table: a --seq that does not cut into the chunks of
# --cp-shard, unknown --cp-shard / --cp-attn values, SP's token rule on a cp rank's share, the layout's rules,
# and the parallelisms of other chapters. Each row runs chapter 06 under mpirun and must exit non-zero, not by
# a signal, within 10 s, naming the flag and the rule (tests/expect_fail.sh). `make test CH=06`.
#   bash tests/06_context_parallel/bad_inputs_test.sh     (BIN: the programs' folder; MPIRUN: as make sets it)
set -uo pipefail
source "$(dirname "$0")/../expect_fail.sh"
expect_needs_mpi "bad inputs test (chapter 06)"

EXPECT_JOBS=2 expect_table 10 $MPIRUN -np 2 "$BIN/06_context_parallel" <<'EOF'
--cp 2 --seq 30                        | --seq 30: context parallelism with --cp 2 and --cp-shard zigzag cuts every sequence into 4 equal chunks
--cp 2 --seq 31 --cp-shard contiguous  | so --seq must be a multiple of 2 (e.g. 32)
--cp 2 --cp-shard striped              | --cp-shard 'striped' must be contiguous
--cp 2 --cp-attn alltoall              | --cp-attn 'alltoall' must be ring
--cp 4                                 | --cp 4 must be between 1 and the job's 2 rank(s)
--cp 1 --pp 2                          | --pp 2 --ep 1: pipeline and expert parallelism are chapters 07 and 08
--cp 2 --zero 4                        | --zero 4 must be 1, 2 or 3
--cp 2 --attention naive               | --attention naive with --cp 2: context parallelism's attention (ring or all-gather) computes every block with the online softmax
EOF
EXPECT_JOBS=2 expect_table 10 $MPIRUN -np 4 "$BIN/06_context_parallel" <<'EOF'
--cp 2 --tp 2 --sp --micro-batch 1 --seq 34 --cp-shard contiguous | --sp splits the --micro-batch 1 × (--seq 34 / --cp 2) = 17 tokens
--cp 2 --tp 2 --seq 22 --micro-batch 2 | --seq 22: context parallelism with --cp 2 and --cp-shard zigzag
EOF
expect_summary
