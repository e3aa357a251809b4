#!/usr/bin/env bash
# bad_inputs_test.sh — chapter 09's rows of the bad-input table: every illegal 5D layout is refused before any work
# (the checks run before the model is built), the error naming the flags and the rule —
# the grid's product, tp against the heads, ep on a dense model, ep against dp × cp, the MoE's per-sequence rules
# under cp, ZeRO-3 and the evaluation with a pipeline, cp's chunks, SP's token blocks, the schedules' rules, too
# many stages, an unknown schedule, --config files (missing, not an object, a value its flag refuses, a "config"
# key, an unknown key, given twice), a --pp-chunks of 10^9, and a tp group across (fake) nodes.
# Each row runs chapter 09 under mpirun and must exit non-zero, not by a signal, within the limit, printing the
# expected text (tests/expect_fail.sh). `make test CH=09`.
#   bash tests/09_5d/bad_inputs_test.sh     (BIN: the programs' folder; MPIRUN: as make sets it)
set -uo pipefail
source "$(dirname "$0")/../expect_fail.sh"
expect_needs_mpi "bad inputs test (chapter 09)"

echo '{"dp": 2, "tp": 2, "pp": 2, "pp-schedule": "zigzag"}' >"$TMP/bad_schedule.json"
echo '[2, 2]' >"$TMP/not_object.json"
echo '{"sp": "yes"}' >"$TMP/sp_yes.json"                 # a value its flag refuses: the key and the file named
echo '{"config": "other.json", "dp": 2}' >"$TMP/nested.json"  # a config naming another: refused, not ignored
echo '{"bogus": 1}' >"$TMP/bogus.json"

EXPECT_JOBS=2 expect_table 60 $MPIRUN -np 8 "$BIN/09_5d" <<'EOF'
--dp 2 --tp 2 --pp 3                      | --dp 2 × --pp 3 × --cp 1 × --tp 2 = 12 ranks, but the job has 8
--dp 1 --tp 8                             | --tp 8 must divide the model's 4 key/value heads
--dp 4 --pp 2 --ep 2                      | --ep 2 with the dense model small: expert parallelism spreads
--model tiny-moe --dp 4 --pp 2 --ep 3     | --ep 3 must divide --dp 4 × --cp 1 = 4
--model tiny-moe --dp 2 --cp 2 --pp 2 --ep 2 | --cp 2 with --moe-balance aux: the balance loss is computed per sequence
--model tiny-moe --dp 2 --cp 2 --pp 2 --ep 2 --moe-balance none --moe-capacity 1.5 | --cp 2 with --moe-capacity 1.5: the capacity is per sequence
--dp 4 --pp 2 --zero 3                    | --zero 3 with --pp 2: ZeRO-3 all-gathers a stage's weights
--dp 4 --pp 2 --eval-every 10             | --eval-every 10 with --pp 2: the held-out evaluation runs the whole model
--dp 2 --pp 2 --cp 2 --seq 30             | --seq must be a multiple of 4
--dp 2 --pp 2 --tp 2 --sp --micro-batch 1 --seq 3 | into --tp 2 equal blocks: the count must be divisible by --tp
--dp 2 --pp 4 --pp-schedule interleaved --pp-chunks 2 --grad-accum 3 | fewer than the pipeline's 8 virtual stages
--dp 1 --pp 8                             | --pp 8 must be <= the model's 4 layers
--dp 2 --tp 2 --pp 2 --config $TMP/bad_schedule.json | --pp-schedule 'zigzag' must be afab, 1f1b, interleaved, zb1 or dualpipe
--dp 2 --tp 2 --pp 2 --config $TMP/not_object.json | must hold one JSON object of flag names and values
--dp 2 --tp 2 --pp 2 --config $TMP/missing.json | --config $TMP/missing.json: cannot read the file
--dp 2 --tp 2 --pp 2 --config $TMP/sp_yes.json | --config $TMP/sp_yes.json: key "sp": --sp=yes must be 0 or 1
--dp 2 --tp 2 --pp 2 --config $TMP/nested.json | --config $TMP/nested.json: key "config": a config file cannot name another one
--dp 2 --tp 2 --pp 2 --config $TMP/bogus.json | --config $TMP/bogus.json: key "bogus": unknown flag --bogus
--config $TMP/sp_yes.json --config=$TMP/nested.json | --config is given twice ($TMP/sp_yes.json, then $TMP/nested.json)
--dp 2 --tp 2 --pp 2 --pp-schedule interleaved --pp-chunks 1000000000 | the model has 4 layers, fewer than the pipeline's 2000000000 virtual stages
EOF

# two fake nodes of 2 ranks (PENTA_NODE_ID per half of the job, mpirun's MPMD form): --tp 4 spans both
half="$BIN/09_5d --dp 1 --tp 4 --pp 1 --steps 1"
expect_fail "tp 4 over two nodes" 60 "--tp 4 across nodes: the tensor-parallel group of ranks 0 (node 0), 1 (node 0), 2 (node 1), 3 (node 1) spans nodes && --force-tp-across-nodes" \
    $MPIRUN -np 2 -x PENTA_NODE_ID=0 $half : -np 2 -x PENTA_NODE_ID=1 $half
expect_fail "PENTA_NODE_ID not a number" 60 "PENTA_NODE_ID 'x' must be an integer >= 0" \
    $MPIRUN -np 8 -x PENTA_NODE_ID=x "$BIN/09_5d" --dp 2 --tp 2 --pp 2 --steps 1
expect_summary
