#!/usr/bin/env bash
# tables_test.sh — chapter 09's program and its tables (five_d_training.cpp), run as a user runs them: 8 ranks,
# one step, and the memory and bytes tables must agree with the planner's prediction of the same run —
#   "(equal)" in them (model state per rank, bytes per axis) and no "DIFFERENT", and every rank's activations
#   within 5% of the planner's (here: +0.0%):
#   dp 2 × tp 2 × pp 2 1F1B (the tied `small`: the table's pair sum in the pp column), the same in bf16 (2-byte
#   weights, f32 gradients, fp32 master), cp 2 × tp 2 × pp 2 ZB-H1 (what B leaves for a deferred W), dp 2 × tp 2
#   × pp 2 DualPipe with full recomputation (both copies' pair sum, the recomputed blocks held until W);
# and `--config run.json` gives the same run as the same flags on the command line (tables, losses, grad norms,
# accuracy: the same text). Prints "N passed, N failed, N skipped"; `make test CH=09` runs it.
#   bash tests/09_5d/tables_test.sh     (BIN: the programs' folder; MPIRUN: as make sets it)
set -uo pipefail
source "$(dirname "$0")/../expect_fail.sh"
expect_needs_mpi "tables test (chapter 09)"
run=($MPIRUN -np 8 "$BIN/09_5d")

# tables_agree LABEL FLAGS...: one step; the tables' markers and the activations' percentages checked
tables_agree() {
    local label=$1 out rc why=""
    shift
    out=$(timeout -k 5 120 "${run[@]}" --steps 1 "$@" </dev/null 2>&1)
    rc=$?
    if [ "$rc" != 0 ]; then why="exit $rc"
    elif grep -q "DIFFERENT" <<<"$out"; then why="a table says DIFFERENT"
    elif [ "$(grep -c "(equal)" <<<"$out")" -lt 16 ]; then why="fewer than 16 '(equal)' (8 ranks × state and bytes)"
    else
        # the activations column: "(4.8MiB, +0.0%)" per rank, each within 5%
        why=$(grep -oE '\([0-9.]+[KMG]?i?B, [+-][0-9.]+%\)' <<<"$out" |
              awk -F', ' '{ sub(/%\)/, "", $2); v = $2 + 0; n++; if (v > 5 || v < -5) bad = bad " " $2 "%" }
                          END { if (n != 8) print "found " n " activation rows, not 8"; else if (bad) print "activations off by" bad }')
    fi
    expect_verdict "$label" "$why" "exit $rc" "$out"
}

tables_agree "dp 2 x tp 2 x pp 2, 1F1B, fp32" --dp 2 --tp 2 --pp 2
tables_agree "dp 2 x tp 2 x pp 2, 1F1B, --precision bf16" --dp 2 --tp 2 --pp 2 --precision bf16
tables_agree "cp 2 x tp 2 x pp 2, ZB-H1" --cp 2 --tp 2 --pp 2 --pp-schedule zb1
tables_agree "dp 2 x tp 2 x pp 2, DualPipe, full recomputation" --dp 2 --tp 2 --pp 2 --pp-schedule dualpipe \
    --recompute full

# --config: the same keys as the flags, so the same run
flags=(--dp 2 --tp 2 --pp 2 --pp-schedule zb1 --precision bf16 --micro-batch 2 --steps 3 --log-every 1)
echo '{"dp": 2, "tp": 2, "pp": 2, "pp-schedule": "zb1", "precision": "bf16", "micro_batch": 2, "steps": 3,
       "log-every": 1}' >"$TMP/run.json"
# what a run prints, less what the clock decides (a step's ms, tokens/s, FLOP/s, MFU)
untimed() { sed -E 's/\| [0-9.]+ ms \| [^|]+ tok\/s \| [^|]+ \| MFU [^|]+ //' <<<"$1" | grep -v "freed blocks"; }
a=$(timeout -k 5 120 "${run[@]}" "${flags[@]}" </dev/null 2>&1) rca=$?
b=$(timeout -k 5 120 "${run[@]}" --config "$TMP/run.json" </dev/null 2>&1) rcb=$?
why=""
if [ "$rca" != 0 ] || [ "$rcb" != 0 ]; then why="exit $rca (flags), $rcb (--config)"
elif ! grep -q "step 3/3" <<<"$a"; then why="the run did not reach step 3"
elif [ "$(untimed "$a")" != "$(untimed "$b")" ]; then why="the outputs differ: $(diff <(untimed "$a") <(untimed "$b") | head -n 3 | tr '\n' ' ')"
fi
expect_verdict "--config run.json runs the same as its flags" "$why" "$(grep -c '^step' <<<"$b") step lines compared" "$b"
expect_summary
