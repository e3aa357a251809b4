#!/usr/bin/env bash
# bad_inputs_test.sh — chapter 07's rows of the bad-input table: unknown schedules, chunks without interleaving,
# micro-batch counts a schedule cannot take, layer splits that do not add up, ZeRO-3 and evaluation with a pipeline,
# the logical clock's costs, the trace file, the fault point (--inject-at), and the layout's rules. Each row runs
# chapter 07 under mpirun and must exit non-zero, not by a signal, within 10 s, naming the flag and the rule
# (tests/expect_fail.sh); and a run with --steps 0 that only exports, which must exit 0. `make test CH=07`.
#   bash tests/07_pipeline_parallel/bad_inputs_test.sh     (BIN: the programs' folder; MPIRUN: as make sets it)
set -uo pipefail
source "$(dirname "$0")/../expect_fail.sh"
expect_needs_mpi "bad inputs test (chapter 07)"

EXPECT_JOBS=2 expect_table 10 $MPIRUN -np 2 "$BIN/07_pipeline_parallel" <<'EOF2'
--pp 2 --pp-schedule gpipe                              | --pp-schedule 'gpipe' must be afab, 1f1b, interleaved, zb1 or dualpipe
--pp 2 --pp-chunks 2                                    | --pp-chunks 2: only --pp-schedule interleaved gives a stage several model chunks
--pp 2 --pp-layers 3,2                                  | --pp-layers adds up to 5 layers; the model has 4
--pp 2 --pp-layers 2,x                                  | --pp-layers '2,x': each entry must be a number of layers >= 1
--pp 2 --pp-layers 1,1,2                                | --pp-layers lists 3 stages; the pipeline has 2 virtual stages
--pp 2 --pp-layers 2,2,                                 | --pp-layers '2,2,': each entry must be a number of layers >= 1
--pp 2 --pp-layers ,2,2                                 | --pp-layers ',2,2': each entry must be a number of layers >= 1
--pp 2 --pp-layers 2,99999999999999999999               | --pp-layers '2,99999999999999999999': entry 99999999999999999999 is out of range: at most 2147483647
--pp 2 --pp-layers 2147483647,2147483647                | --pp-layers adds up to 4294967294 layers; the model has 4
# --pp-chunks: an int, and bounded by the layers before the schedule (p · v · m ops) is built
--pp 2 --pp-schedule interleaved --pp-chunks 1000000000 | the model has 4 layers, fewer than the pipeline's 2000000000 virtual stages
--pp 2 --pp-schedule interleaved --pp-chunks 100000     | the model has 4 layers, fewer than the pipeline's 200000 virtual stages
--pp 2 --pp-schedule interleaved --pp-chunks 10000      | the model has 4 layers, fewer than the pipeline's 20000 virtual stages
--pp 2 --pp-schedule interleaved --pp-chunks 4294967298 | --pp-chunks 4294967298 is out of range: at most 2147483647
--pp 2 --pp-schedule interleaved --pp-chunks 3000000000 | --pp-chunks 3000000000 is out of range: at most 2147483647
--pp 2 --pp-schedule interleaved --pp-chunks 2147483647 | the model has 4 layers, fewer than the pipeline's 4294967294 virtual stages
--pp 2 --model tiny --pp-schedule interleaved --pp-chunks 2 | the model has 2 layers, fewer than the pipeline's 4 virtual stages
--pp 2 --zero 3                                         | --zero 3 with --pp 2: ZeRO-3 all-gathers a stage's weights for every micro-batch
--pp 2 --eval-every 10                                  | --eval-every 10: the held-out evaluation runs the whole model on every rank
--pp 2 --pp-cost-b 0                                    | --pp-cost-b 0 must be a number of F units in (0, 1000]
--pp 2 --pp-cost-w nan                                  | --pp-cost-w nan must be a number of F units
--pp 2 --trace /nonexistent/pp.json                     | --trace /nonexistent/pp.json: the folder /nonexistent/ does not exist
--pp 2 --inject-at last-b                               | --inject-at 'last-b' must be step or first-f
--pp 2 --cp 2                                           | --cp 2 --ep 1: context and expert parallelism are chapters 06 and 08
--pp 3                                                  | --pp 3 must be between 1 and the job's 2 rank(s)
--pp 1                                                  | --dp 1 × --pp 1 × --cp 1 × --tp 1 = 1 ranks, but the job has 2
EOF2
EXPECT_JOBS=2 expect_table 10 $MPIRUN -np 4 "$BIN/07_pipeline_parallel" <<'EOF2'
--pp 2 --tp 2 --sp --micro-batch 1 --seq 15             | --sp splits the --micro-batch 1 × --seq 15 = 15 tokens of a micro-batch into --tp 2 equal blocks
--pp 2 --tp 3                                           | --tp 3
EOF2
# and one that must run: --steps 0 with --export-hf writes the folder and exits 0 (the pipeline's tables are of a
# step that ran: there is none to measure)
expect_ok "--pp 2 --steps 0 --export-hf: the folder written, exit 0" 30 \
    "exported $TMP/hf/model.safetensors && no step ran: no pipeline tables" \
    $MPIRUN -np 2 "$BIN/07_pipeline_parallel" --pp 2 --steps 0 --export-hf "$TMP/hf"
expect_summary
