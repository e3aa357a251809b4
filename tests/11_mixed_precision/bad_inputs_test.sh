#!/usr/bin/env bash
# bad_inputs_test.sh — chapter 11's rows of the bad-input table: a policy that does not exist (refused before the
# first run), a job of several ranks, and the flags of the common set this program has no use for (it trains one
# model per policy and keeps none: --export-hf, --generate, --save, --resume), refused before anything is
# created; --log-jsonl with more than one policy. Each row must exit non-zero, not by a signal, within 10 s, naming the flag and the rule
# (tests/expect_fail.sh). `make test CH=11`.
#   bash tests/11_mixed_precision/bad_inputs_test.sh     (BIN: the programs' folder; MPIRUN: as make sets it)
set -uo pipefail
source "$(dirname "$0")/../expect_fail.sh"

EXPECT_JOBS=2 expect_table 10 "$BIN/11_mixed_precision" <<'EOF2'
--schemes fp32,fp4 --steps 2              | --schemes fp32,fp4: 'fp4' must be fp32, bf16, fp16 or fp8
--export-hf $TMP/hf --steps 2             | --export-hf $TMP/hf: chapter 11 trains one model per policy in --schemes and keeps none
--generate hello --steps 2                | --generate hello: chapter 11 trains one model per policy
--save $TMP/ckpt --steps 2                | --save $TMP/ckpt: chapter 11 trains one model per policy
--resume $TMP/ckpt --steps 2              | --resume $TMP/ckpt: chapter 11 trains one model per policy
--schemes fp16,fp8 --log-jsonl $TMP/j     | --log-jsonl $TMP/j writes one policy's steps, and --schemes fp16,fp8 names 2
EOF2
# the refusal comes before resolve_model, which would create --export-hf's folder
if [ -e "$TMP/hf" ]; then expect_verdict "--export-hf creates nothing" "$TMP/hf exists" "refused run" ""
else expect_verdict "--export-hf creates nothing" "" "no $TMP/hf" ""; fi
if [ "${MPI:-1}" != 0 ]; then
    expect_fail "two ranks" 10 "chapter 11 compares the policies on one rank, but the job has 2" \
        $MPIRUN -np 2 "$BIN/11_mixed_precision" --steps 2
fi
expect_summary
