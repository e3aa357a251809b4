#!/usr/bin/env bash
# mutants_test.sh — the mutation harness (tests/mutants/run_mutants.sh) must fail when a variant survives.
#
# A catalogue of its own, for `make test CH=00` (common/'s tests: the quickest chapter to run whole), goes
# through the real harness:
#   survivor      a comment changed in common/ops_cpu.cpp: no test can fail on it, so it must be SURVIVED
#                 and make the harness exit non-zero, naming it
#   killed-first  the cross-entropy without its row max, with a first: run: KILLED by that run
#   killed-full   RoPE's forward rotating the wrong way, without first: KILLED by the whole make test CH=00
#                 (after the harness saw the unchanged make test CH=00 pass)
#   stale         an edit whose text is not in its file: BROKEN
# then the two killed ones alone must make it exit 0, and a malformed catalogue must be refused naming its
# line. The scratch copies reuse the build folder (BUILD), so `make test` runs this after building
# everything. Prints "N passed, N failed, N skipped" like the test binaries; `make test` runs it (not
# `make test CH=NN`).   By hand: bash tests/tooling/mutants_test.sh
set -uo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
harness=$src/tests/mutants/run_mutants.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/cat" "$tmp/bad"
cat >"$tmp/cat/00_selftest.txt" <<'EOF'
# the harness's own test: one variant of each verdict

## survivor: a comment reworded, which no test can see
file: common/ops_cpu.cpp
-// ---- RMSNorm -----------------------------------------------------------------------------------------
+// ---- RMSNorm (reworded by mutants_test.sh) -----------------------------------------------------------

## killed-first: cross-entropy without the row max
first: tests_00 ch00 np1 *shifted by +1000*
file: common/ops_cpu.cpp
-        const float mx = max_f32(zr, V);
+        const float mx = 0.0f;

## killed-full: RoPE's forward rotates by -angle (its backward unchanged)
file: common/ops_cpu.cpp
-    rope_rotate(x, pos, inv_freq, out, 1.0f);
+    rope_rotate(x, pos, inv_freq, out, -1.0f);

## stale: an edit whose text is nowhere in the file
file: common/ops_cpu.cpp
-    this line is not in ops_cpu.cpp
+    nor is this one
EOF
printf '## plus-first: a + line with nothing to replace\nfile: common/ops_cpu.cpp\n+    orphan\n' >"$tmp/bad/00_bad.txt"

passed=0 failed=0
verdict() {  # name, 0 = pass; on failure the end of the harness's output
    if [ "$2" = 0 ]; then passed=$((passed + 1)); echo "mutants test: PASS: $1"
    else failed=$((failed + 1)); echo "mutants test: FAIL: $1"; tail -n 20 <<<"$out" | sed 's/^/    | /'; fi
}
has() { grep -qE "$1" <<<"$out"; }

t0=$SECONDS
out=$(MUTANTS_DIR=$tmp/cat bash "$harness" 00 2>&1)
rc=$?
ok=1
[ "$rc" = 1 ] && has '^mutants: SURVIVED +00/survivor ' && has '^mutants: 2 killed, 1 survived, 1 broken, of 4$' && ok=0
verdict "a surviving variant fails the harness, named (exit status $rc, $((SECONDS - t0)) s)" $ok
ok=1
has '^mutants: KILLED +00/killed-first .*by first: tests_00 ch00 np1' && ok=0
verdict "a variant its first: run fails is killed by that run" $ok
ok=1
has '^mutants: KILLED +00/killed-full .*by make test CH=00' &&
    has '^mutants: checking that make test CH=00 passes without any variant' && ok=0
verdict "a variant without first: is killed by the whole make test CH=00, once the unchanged one passes" $ok
ok=1
has '^mutants: BROKEN +00/stale .*occurs 0 times in common/ops_cpu.cpp' && ok=0
verdict "an edit that no longer applies is reported as BROKEN" $ok

t=$SECONDS
out=$(MUTANTS_DIR=$tmp/cat MUTANTS=killed-first,killed-full bash "$harness" 00 2>&1)
rc=$?
ok=1
[ "$rc" = 0 ] && has '^2 passed, 0 failed, 0 skipped$' && ok=0
verdict "every variant killed: the harness exits 0 (exit status $rc, $((SECONDS - t)) s)" $ok

out=$(MUTANTS_DIR=$tmp/bad bash "$harness" 00 2>&1)
rc=$?
ok=1
[ "$rc" = 2 ] && has "00_bad.txt:3: a '\+' line without the '-' lines it replaces" && ok=0
verdict "a malformed catalogue is refused naming its file and line (exit status $rc)" $ok

# the source tree is untouched: the variants were applied in the scratch copies only
ok=1
git -C "$src" diff --quiet -- common/ops_cpu.cpp && ok=0
verdict "the working tree is left as it was" $ok

echo "mutants test took $((SECONDS - t0)) s"
echo "$passed passed, $failed failed, 0 skipped"
[ "$failed" = 0 ]
