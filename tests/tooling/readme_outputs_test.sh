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
# purpose is recorded only when its marker says exit=N.
# Prints "N passed, N failed, N skipped" like the test binaries.
#   bash tests/tooling/readme_outputs_test.sh
set -uo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
tool=$src/scripts/readme_outputs.py
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "  ok: $1"; }
bad() { fail=$((fail + 1)); echo "FAILED: $1"; }

if python3 "$tool" --check --root "$src" >"$tmp/real.txt" 2>&1; then ok "the tree's blocks equal their records"
else bad "the tree's blocks or their figures"; fi
cat "$tmp/real.txt"

# a stand-in chapter: its "program" prints a short curve, with evaluations every 100 steps
mkdir -p "$tmp/t/01_x"
cat >"$tmp/t/01_x/run.sh" <<'EOF'
echo "01_x: model stand-in"
for s in 1 50 100 150 200 250 300; do
    if [ $((s % 100)) = 0 ]; then echo "step $s/300 | loss 0.$((900 - 2 * s)) | acc $((s / 5)).5% | val loss 0.5"
    else echo "step $s/300 | loss 0.$((900 - 2 * s))"; fi
done
echo "memory on cpu         current         peak"
echo "  params              11.5MiB      11.5MiB"
EOF
cat >"$tmp/t/01_x/README.md" <<'EOF'
# stand-in

<!-- output fx-run trim=evals,tables : bash 01_x/run.sh -->
<!-- /output -->

The plateau ends by step 200 (40.5%); at step 300 it answers 60.5% right.

## next
EOF
if python3 "$tool" --root "$tmp/t" fx-run >"$tmp/rec.txt" 2>&1; then
    if grep -q '^step 100/300' "$tmp/t/01_x/README.md" && ! grep -q '^step 50/300' "$tmp/t/01_x/README.md" &&
       grep -q '^step 300/300' "$tmp/t/01_x/README.md" && ! grep -q 'params  ' "$tmp/t/01_x/README.md" &&
       grep -q 'OpenBLAS kernel Haswell (AVX2)' "$tmp/t/01_x/README.md" && [ -f "$tmp/t/docs/outputs/fx-run.txt" ]
    then ok "a block recorded: its evaluations kept, other steps and tables left out, the kernel in its caption"
    else bad "the recorded block is not what trim=evals,tables asks"; cat "$tmp/t/01_x/README.md"; fi
else bad "recording the stand-in block failed"; cat "$tmp/rec.txt"; fi
if python3 "$tool" --check --root "$tmp/t" >"$tmp/out.txt" 2>&1; then ok "the recorded stand-in passes the check"
else bad "the recorded stand-in fails the check"; cat "$tmp/out.txt"; fi

# a demo that fails on purpose: recorded only when its marker says the exit status
mkdir -p "$tmp/f/01_x"
printf 'echo "refused: --steps -1 must be >= 1"\nexit 3\n' >"$tmp/f/01_x/fail.sh"
printf '# f\n\n<!-- output fx-fail : bash 01_x/fail.sh -->\n<!-- /output -->\n' >"$tmp/f/01_x/README.md"
if python3 "$tool" --root "$tmp/f" fx-fail >"$tmp/rec.txt" 2>&1; then bad "a failing command without exit= was recorded"
elif grep -q "exited 3, not 0" "$tmp/rec.txt"; then ok "a failing command without exit= is refused, naming its status"
else bad "a failing command without exit=: no reason given"; cat "$tmp/rec.txt"; fi
sed -i 's/fx-fail :/fx-fail exit=3 :/' "$tmp/f/01_x/README.md"
if python3 "$tool" --root "$tmp/f" fx-fail >"$tmp/rec.txt" 2>&1 && grep -q '^(exit status 3)' "$tmp/f/01_x/README.md" &&
   python3 "$tool" --check --root "$tmp/f" >/dev/null 2>&1
then ok "with exit=3 it is recorded, its status shown in the block"
else bad "exit=3 did not record the failing demo"; cat "$tmp/rec.txt"; fi

copy() { rm -rf "$tmp/c" && cp -r "$tmp/t" "$tmp/c"; }
refused() {  # refused NAME PATTERN: the check on the copy fails and says PATTERN
    if python3 "$tool" --check --root "$tmp/c" >"$tmp/out.txt" 2>&1; then bad "$1: the check passed"
    elif grep -q -- "$2" "$tmp/out.txt"; then ok "$1 refused"
    else bad "$1: refused without naming it ($2)"; sed -n '1,20p' "$tmp/out.txt"; fi
}
readme=$tmp/c/01_x/README.md

copy && sed -i 's/answers 60.5% right/answers 61.5% right/' "$readme"
refused "a stated accuracy the run did not print" "61.5% is not a percentage of the block"
copy && sed -i 's/ends by step 200/ends by step 250/' "$readme"
refused "a stated step the block has no line for" "step 250 is not a step line of the block"
copy && sed -i 's/^step 200\/300 | loss 0.500/step 200\/300 | loss 0.400/' "$readme"
refused "a figure in the block changed by hand" "README.md:[0-9]*: the block differs from docs/outputs/fx-run.txt"
copy && rm "$tmp/c/docs/outputs/fx-run.txt"
refused "a block without its record" "no record docs/outputs/fx-run.txt"
copy && sed -i 's|: bash 01_x/run.sh -->|: bash 01_x/run.sh --steps 5 -->|' "$readme"
refused "a command edited without a rerun" "commands are not the ones its record ran"
copy && sed -i 's|<!-- output fx-run trim=evals,tables : bash 01_x/run.sh -->|<!-- output fx-run trim=evals -->|' "$readme"
refused "a marker without its command" "a marker is"

echo "$pass passed, $fail failed, 0 skipped"
[ "$fail" = 0 ]
