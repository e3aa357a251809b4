#!/usr/bin/env bash
# readme_outputs_test.sh — the READMEs' recorded output blocks are what their runs printed, and the figures
# stated right after a block are that run's.
#
# Issue 32: scripts/readme_outputs.py runs each block's exact command and keeps the whole output in
# docs/outputs/NAME.txt; the README block (caption with machine, BLAS kernel, date, commit; the trimmed output)
# is generated from that record. Here: every block on the tree equals its record and every percentage and
# "step N" in the paragraph after a block is in the block (--check, nothing run). Then a stand-in README whose
# command is a short script is recorded for real, and planted faults must each be refused naming what broke: a
# stated accuracy the run did not print, a step it has no line for, a figure in the block changed by hand, a
# record missing, a command edited without a rerun, a marker without its command; and a demo that fails on
# purpose is recorded only when its marker says exit=N (several refusals in one block: one N per command).
# Last, --stale REV (a reading aid after a rerun) names a figure of the prose that REV's record printed and
# the new record does not, and nothing when the figures are the same.
# Prints "N passed, N failed, N skipped" like the test binaries.
#   bash tests/tooling/readme_outputs_test.sh
set -uo pipefail
source "$(dirname "$0")/../expect_fail.sh"  # expect_ok, expect_fail, expect_verdict, expect_summary; TMP
src=$(cd "$(dirname "$0")/../.." && pwd)
tool=$src/scripts/readme_outputs.py

expect_ok "the tree's blocks equal their records, their figures hold" 60 "0 problems" \
    python3 "$tool" --check --root "$src"

# a stand-in chapter: its "program" prints a short curve, with evaluations every 100 steps
mkdir -p "$TMP/t/01_x"
cat >"$TMP/t/01_x/run.sh" <<'EOF'
echo "01_x: model stand-in"
printf 'layout: rank -> coordinates\n  rank  node\n     0     0\n\n'
for s in 1 50 100 150 200 250 300; do
    if [ $((s % 100)) = 0 ]; then echo "step $s/300 | loss 0.$((900 - 2 * s)) | acc $((s / 5)).5% | val loss 0.5"
    else echo "step $s/300 | loss 0.$((900 - 2 * s))"; fi
done
echo "memory on cpu         current         peak"
echo "  params              11.5MiB      11.5MiB"
EOF
cat >"$TMP/t/01_x/README.md" <<'EOF'
# stand-in

<!-- output fx-run trim=evals,tables,layout : bash 01_x/run.sh -->
<!-- /output -->

The plateau ends by step 200 (40.5%); at step 300 it answers 60.5% right (`--steps 7` is a flag, not a step).

## next
EOF
readme=$TMP/t/01_x/README.md
out=$(python3 "$tool" --root "$TMP/t" fx-run 2>&1)
rc=$?
why=""
if [ "$rc" != 0 ] || ! [ -f "$TMP/t/docs/outputs/fx-run.txt" ]; then why="recording failed (exit $rc)"
elif ! grep -q '^step 100/300' "$readme" || grep -q '^step 50/300' "$readme" || ! grep -q '^step 300/300' "$readme" ||
     grep -q 'params  \|layout: rank\|^     0     0' "$readme" || ! grep -q 'OpenBLAS kernel Haswell (AVX2)' "$readme" ||
     ! grep -q '^01_x: model stand-in' "$readme"
then why="the block is not what trim=evals,tables,layout asks"; out=$(cat "$readme"); fi
expect_verdict "a block recorded: its evaluations kept, other steps and tables left out, the kernel in its caption" \
    "$why" "exit $rc" "$out"
expect_ok "the recorded stand-in passes the check" 30 "1 blocks checked, 0 problems" \
    python3 "$tool" --check --root "$TMP/t"

# a demo that fails on purpose: recorded only when its marker says the exit status
mkdir -p "$TMP/f/01_x"
printf 'echo "refused: --steps -1 must be >= 1"\nexit 3\n' >"$TMP/f/01_x/fail.sh"
printf '# f\n\n<!-- output fx-fail : bash 01_x/fail.sh -->\n<!-- /output -->\n' >"$TMP/f/01_x/README.md"
expect_fail "a failing command without exit= is refused, naming its status" 30 "exited 3, not 0" \
    python3 "$tool" --root "$TMP/f" fx-fail
sed -i 's/fx-fail :/fx-fail exit=3 :/' "$TMP/f/01_x/README.md"
expect_ok "with exit=3 it is recorded" 30 "fx-fail: 01_x/README.md rewritten" python3 "$tool" --root "$TMP/f" fx-fail
expect_ok "... its status shown in the block, which passes the check" 30 "0 problems" \
    bash -c "grep -q '^(exit status 3)' '$TMP/f/01_x/README.md' && python3 '$tool' --check --root '$TMP/f'"
# several refusals in one block: exit=N is the last command's status, exit=N,N,... one per command; a
# grep= (here ^refused) does not hide the status lines
printf '# g\n\n<!-- output fx-fails exit=3 grep=^refused : bash 01_x/fail.sh ;; bash 01_x/fail.sh -->\n<!-- /output -->\n' \
    >"$TMP/f/01_x/README.md"
expect_fail "two refusals with exit=3: the first one's status is refused" 30 "exited 3, not 0" \
    python3 "$tool" --root "$TMP/f" fx-fails
sed -i 's/fx-fails exit=3 grep/fx-fails exit=3,3 grep/' "$TMP/f/01_x/README.md"
expect_ok "with exit=3,3 both are recorded, each with its status" 30 "0 problems" \
    bash -c "python3 '$tool' --root '$TMP/f' fx-fails && [ \$(grep -c '^(exit status 3)' '$TMP/f/01_x/README.md') = 2 ] &&
             python3 '$tool' --check --root '$TMP/f'"
sed -i 's/fx-fails exit=3,3 grep/fx-fails exit=3,3,3 grep/' "$TMP/f/01_x/README.md"
expect_fail "exit= with more statuses than commands refused" 30 "one N per command" \
    python3 "$tool" --check --root "$TMP/f"

copy() { rm -rf "$TMP/c" && cp -r "$TMP/t" "$TMP/c"; }
refused() {  # refused NAME EXPECTED: the check on the copy fails and says EXPECTED ("A && B": both)
    expect_fail "$1 refused" 30 "$2" python3 "$tool" --check --root "$TMP/c"
}
readme=$TMP/c/01_x/README.md

copy && sed -i 's/answers 60.5% right/answers 61.5% right/' "$readme"
refused "a stated accuracy the run did not print" "61.5% is not a percentage of the block"
copy && sed -i 's/ends by step 200/ends by step 250/' "$readme"
refused "a stated step the block has no line for" "step 250 is not a step line of the block"
copy && sed -i 's/^step 200\/300 | loss 0.500/step 200\/300 | loss 0.400/' "$readme"
refused "a figure in the block changed by hand" "01_x/README.md: && the block differs from docs/outputs/fx-run.txt"
copy && rm "$TMP/c/docs/outputs/fx-run.txt"
refused "a block without its record" "no record docs/outputs/fx-run.txt"
copy && sed -i 's|: bash 01_x/run.sh -->|: bash 01_x/run.sh --steps 5 -->|' "$readme"
refused "a command edited without a rerun" "commands are not the ones its record ran"
copy && sed -i 's|<!-- output fx-run trim=evals,tables,layout : bash 01_x/run.sh -->|<!-- output fx-run trim=evals -->|' "$readme"
refused "a marker without its command" "a marker is"

# --stale REV: after a rerun, the prose's numbers that the old record printed and the new one does not
copy && git -C "$TMP/c" init -q && git -C "$TMP/c" add -A &&
    git -C "$TMP/c" -c user.name=t -c user.email=t@t commit -q -m recorded
expect_ok "--stale: a rerun that printed the same figures leaves none" 30 "0 figures of the prose left" \
    python3 "$tool" --root "$TMP/c" --stale HEAD
sed -i 's/^step 200\/300 | loss 0.500 | acc 40.5%/step 200\/300 | loss 0.500 | acc 39.5%/' "$TMP/c/docs/outputs/fx-run.txt"
expect_fail "--stale: a revision that is not a commit refused" 30 "--stale nosuchrev: not a commit" \
    python3 "$tool" --root "$TMP/c" --stale nosuchrev
expect_fail "--stale: a figure the new record no longer prints is named" 30 \
    "01_x/README.md: && 40.5 is in fx-run's record at HEAD, not in the new one && 1 figures of the prose left" \
    python3 "$tool" --root "$TMP/c" --stale HEAD

expect_summary
