#!/usr/bin/env bash
# learning_check_test.sh — scripts/learning_check.py's verdicts, on stand-in programs (no training: a second):
#   1. a run whose measured accuracy climbs past 10 % at step 200 and ends at 95 %: "left the plateau at 200",
#      final 95.0 %, exit 0; the same judged by the loss for a program that logs no accuracy (07), and its
#      flat counterpart;
#   2. a run that stays on the plateau (accuracy 0-4 %): "never", verdict NO, exit 1;
#   3. one that leaves the plateau but ends below the promised 90 %: NO, exit 1;
#   4. a program that fails: exit 2, naming its output file;
#   5. --chapters naming no run, and --kernels naming no kernel: refused, naming the flag;
#   6. --until 0.9 (a screen): the step of the first accuracy >= 90 %, exit 0; NO and exit 1 for a run that
#      never gets there; a run still going when it gets there is stopped (a stand-in that would sleep 60 s
#      ends in seconds); --until 2 refused; a run of --steps other than its promised ones logs to its own file;
#   7. --jobs 2: two runs at once (each stand-in waits to see the other start; alone, it fails), the table in
#      the plan's order; --jobs 0 refused.
# Each stand-in is a 01_single_gpu that writes the JSONL the real one writes (step, loss, task_accuracy at
# evaluations) and checks that it was given --seed, --steps and OPENBLAS_CORETYPE.
# `make test` runs it (not `make test CH=NN`).   bash tests/tooling/learning_check_test.sh
set -uo pipefail
source "$(dirname "$0")/../expect_fail.sh"
tool="$(dirname "$0")/../../scripts/learning_check.py"

# stand_in NAME ACCURACIES...: a folder holding a 01_single_gpu that logs these accuracies at steps 100, 200, ...
stand_in() {
    local dir=$TMP/$1
    shift
    mkdir -p "$dir"
    cat >"$dir/01_single_gpu" <<EOS
#!/usr/bin/env bash
[ -n "\${OPENBLAS_CORETYPE:-}" ] || { echo "no OPENBLAS_CORETYPE"; exit 3; }
out=""; seed=""; steps=""
while [ \$# -gt 0 ]; do
    case \$1 in --log-jsonl) out=\$2; shift ;; --seed) seed=\$2; shift ;; --steps) steps=\$2; shift ;; esac
    shift
done
[ -n "\$out" ] && [ -n "\$seed" ] && [ -n "\$steps" ] || { echo "missing --log-jsonl, --seed or --steps"; exit 3; }
step=0
for acc in $*; do
    [ "\$acc" = fail ] && { echo "error: [rank 0] a stand-in failure"; exit 1; }
    step=\$((step + 100))
    echo "{\"step\": \$step, \"loss\": 1.0, \"task_accuracy\": \$acc}" >>"\$out"
done
EOS
    chmod +x "$dir/01_single_gpu"
    echo "$dir"
}
check=(python3 "$tool" --chapters 01 --seeds 1 --kernels Haswell)  # + --out DIR --bin STAND_IN

learns=$(stand_in learns 0.0 0.12 0.5 0.9 0.95 1.0)
expect_ok "a run that leaves the plateau at step 200 and ends at 95 %" 20 \
    "left the plateau at 200, final 95.0 % && step 200 && 95.0 %       90%  ok" "${check[@]}" --out "$TMP/out_learns" --bin "$learns"
flat=$(stand_in flat 0.0 0.02 0.04 0.01 0.0)
expect_fail "a run that never leaves the plateau: NO, exit 1" 20 "left the plateau at never && never && NO" \
    "${check[@]}" --out "$TMP/out_flat" --bin "$flat"
short=$(stand_in short 0.0 0.3 0.5 0.6 0.7)
expect_fail "a run that leaves it but ends below the promise: NO, exit 1" 20 "step 200 && 60.0 % && NO" \
    "${check[@]}" --out "$TMP/out_short" --bin "$short"
# a program that measures no accuracy (07's pipeline): judged by its loss
lossy=$(stand_in lossy 1.2 0.8 0.3 0.05 0.02 0.01)
sed -i 's/"loss\\": 1.0, \\"task_accuracy\\": \$acc/"loss\\": $acc/' "$lossy/01_single_gpu"
expect_ok "a run without accuracy: its loss leaves the plateau at step 200 and ends low" 20 \
    "left the plateau at 200, final loss 0.0100 && loss 0.0100       90%  ok" "${check[@]}" --out "$TMP/out_lossy" --bin "$lossy"
lossflat=$(stand_in lossflat 1.2 1.15 1.16 1.14 1.15 1.15)
sed -i 's/"loss\\": 1.0, \\"task_accuracy\\": \$acc/"loss\\": $acc/' "$lossflat/01_single_gpu"
expect_fail "a run without accuracy whose loss stays on the plateau: NO" 20 "left the plateau at never && NO" \
    "${check[@]}" --out "$TMP/out_lossflat" --bin "$lossflat"
broken=$(stand_in broken 0.0 fail)
out=$("${check[@]}" --out "$TMP/out_broken" --bin "$broken" 2>&1)
rc=$?
why=""
[ "$rc" = 2 ] || why="exit $rc, not 2"
[ -z "$why" ] && ! grep -q "exit 1 after .* ($TMP/out_broken/01_Haswell_seed1.txt)" <<<"$out" && why="no line naming the run's output"
expect_verdict "a program that fails: exit 2, naming its output" "$why" "exit $rc" "$out"
expect_ok "--until 0.9: the step the run first measured 90 %" 20 "reached && 90 % at 400  ok" \
    "${check[@]}" --out "$TMP/out_learns" --bin "$learns" --until 0.9
expect_fail "--until 0.9, a run that never reaches it: NO, exit 1" 20 "not 90 %  NO" \
    "${check[@]}" --out "$TMP/out_short" --bin "$short" --until 0.9
sleeper=$(stand_in sleeper 0.0 0.5 0.92)
echo "sleep 60" >>"$sleeper/01_single_gpu"  # after the log: still running when it reached 90 %
t0=$SECONDS
expect_ok "--until 0.9 stops a run that reached it (the stand-in would sleep 60 s)" 30 "90 % at 300  ok" \
    "${check[@]}" --out "$TMP/out_sleeper" --bin "$sleeper" --until 0.9
why=""
[ $((SECONDS - t0)) -lt 30 ] || why="it took $((SECONDS - t0)) s: the run was not stopped"
expect_verdict "--until: the stopped run took seconds, not the stand-in's 60" "$why" "$((SECONDS - t0)) s" ""
expect_ok "--steps 300 names its log apart from the promised run's (one log written by two runs is garbled)" 10 \
    "seed1_steps300.jsonl" "${check[@]}" --steps 300 --list
together=$(stand_in together 0.0 0.12 0.5 0.9 0.95 1.0)
# before logging, each waits (up to 20 s) for a second run to have started: made one at a time, the first fails
sed -i "s|^step=0\$|echo \$seed >>$TMP/starts; for i in \$(seq 200); do [ \$(wc -l <$TMP/starts) -ge 2 ] \&\& break; sleep 0.1; done; [ \$(wc -l <$TMP/starts) -ge 2 ] \|\| { echo 'error: ran alone'; exit 1; }\nstep=0|" \
    "$together/01_single_gpu"
expect_ok "--jobs 2: two runs at once, both judged, the table in seed order" 40 \
    "(AVX2)         1      step 200       95.0 %       90%  ok && (AVX2)         2      step 200       95.0 %       90%  ok" \
    python3 "$tool" --chapters 01 --seeds 1,2 --kernels Haswell --jobs 2 --out "$TMP/out_together" --bin "$together"
expect_fail "--jobs 0: refused" 10 "--jobs 0: at least 1 run at a time" python3 "$tool" --jobs 0
expect_fail "--until 2: refused" 10 "--until 2.0: an accuracy in (0, 1]" python3 "$tool" --until 2
expect_fail "--chapters 09: no such run" 10 "--chapters: no run named 09" python3 "$tool" --chapters 09
expect_fail "--kernels Zen: no such kernel" 10 "--kernels: Zen is not one of Haswell, SkylakeX" \
    python3 "$tool" --kernels Zen
expect_summary
