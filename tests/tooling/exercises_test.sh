#!/usr/bin/env bash
# exercises_test.sh — the workshop exercises (tools/exercises.py, docs/INSTRUCTORS.md) grade what they claim.
#
#   1. `exercises.py check`: every marker pair is well formed and has its catalogue stanza (and the reverse),
#      every chapter has two exercises or more, and every edit of the mutation catalogue (tests/mutants/)
#      still applies once: a marker line inside a quoted text would break a mutant; every exercise has a
#      known-wrong variant ('exercise: NN.k') whose edits lie inside its region.
#   1b. every exercise's 'files:' line is where its markers are, and chapters 02, 04, 06 and 07 are solved in their
#      own folder: an exercise of 02 planted in common/ must be refused (issue 31's instructor check).
#   2. the student copy of every chapter: each region's inside is gone (its text is not in the copy), each stub says "exercise NN.k not done", the mutation catalogues that quote solutions are
#      dropped, and the source tree is untouched. No compilation: cheap.
#   3. chapter 02 swept whole (`exercises.py sweep --ch 02`): the untouched copy scores full marks, and with
#      each exercise blanked alone the copy compiles and scores 0 on that exercise and full points on the
#      other; and with each exercise's first known-wrong variant applied (ring-reversed, buckets-cap-in-elements)
#      it scores 0 on that exercise too. The copies reuse the build folder (timestamps kept), so each recompiles
#      one file.
#   4. a stub that hangs is caught: 02.2 replaced by an endless loop, graded with a 20 s limit per test run:
#      02.2 fails ("hung"), 02.1 still passes, and grading ends.
#   5. grading one chapter never compiles a later chapter's exercise: a compile error planted in 08.1's region
#      (common/moe_cpu.cpp, in the library every test binary links) leaves chapter 02 at full marks, built
#      with the instructor's 08.1; the student's file is back as it was after. The copy starts as a grade killed
#      outright leaves it (the instructor's file in place, the student's set aside), so the next grade's
#      putting back is checked too.
#   6. `make grade CH=02 DIR=.` grades the reference solution (exit 0); inside a student copy `make grade CH=02`
#      grades the copy itself and says "not full marks"; a DIR without a copy says "could not grade" (the
#      tool's exit 2); no Python traceback in any of them.
# The sweep of every chapter is `make grade-all` (CI runs it after `make test`; docs/INSTRUCTORS.md gives its
# cost). `make test` runs this script after building everything; 60 s on this shared 2-core machine
# (3, 4 and 5: five builds of one file and tests_02's relink, the ring and bucket tests).
# Prints "N passed, N failed, N skipped" like the test binaries.   By hand: bash tests/tooling/exercises_test.sh
set -uo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
cd "$src" || exit 1
tool=$src/tools/exercises.py
build=${BUILD:-build}
[[ "$build" = /* ]] || build=$src/$build
export BUILD=$build
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
unset MAKEFLAGS MFLAGS MAKELEVEL

passed=0 failed=0
verdict() {  # name, 0 = pass; on failure the end of the output
    if [ "$2" = 0 ]; then passed=$((passed + 1)); echo "exercises test: PASS: $1"
    else failed=$((failed + 1)); echo "exercises test: FAIL: $1"; tail -n 25 <<<"$out" | sed 's/^/    | /'; fi
}
t0=$SECONDS

# 1. markers, catalogue, mutants
out=$(python3 "$tool" check 2>&1)
rc=$?
verdict "markers and catalogue agree, two exercises per chapter, every mutant edit still applies, every exercise has a wrong variant in its region (exit $rc)" $rc
echo "$out" | sed 's/^/    /'

# 2. the student copy of every chapter, without building it
before=$(git status --porcelain | md5sum)
out=$(python3 "$tool" make --dir "$tmp/all" 2>&1)
rc=$?
ok=$rc
if [ "$rc" = 0 ]; then
    # every region: its first solution line is gone from the copy, its stub is there
    out+=$'\n'$(python3 - "$tmp/all" <<'EOF'
import os, sys
sys.path.insert(0, "tools")
import exercises as ex
regions, cat = ex.load(ex.SRC)
bad = 0
for eid, regs in sorted(regions.items()):
    for f, b, e, indent, title in regs:
        src = open(f).read().split("\n")
        block = "\n".join(src[b:e - 1])
        copy = open(os.path.join(sys.argv[1], f)).read()
        if block in copy:
            print(f"{f}: exercise {eid}'s solution is still in the copy: {src[b].strip()}"); bad += 1
        if f'FAIL("exercise {eid} not done' not in copy:
            print(f"{f}: no stub for exercise {eid}"); bad += 1
mut = [n for n in os.listdir(os.path.join(sys.argv[1], "tests", "mutants")) if n.endswith(".txt")]
if mut:
    print(f"the copy keeps mutation catalogues that quote solutions: {mut}"); bad += 1
print(f"{sum(len(r) for r in regions.values())} regions checked, {bad} problems")
sys.exit(1 if bad else 0)
EOF
)
    ok=$?
fi
[ "$(git status --porcelain | md5sum)" = "$before" ] || { ok=1; out+=$'\nthe source tree changed'; }
verdict "the student copy of every chapter: each region a stub, no solution line left, the tree untouched" $ok

# 2b. an exercise of chapter 02 (one an instructor hands out as its folder alone) planted in common/ is
#     refused by check, naming the file and the rule; so is a files: line that is not where its markers are
cp -r "$tmp/all" "$tmp/own" 2>/dev/null
printf '%s\n' '// EXERCISE 02.3 begin: planted outside the chapter' 'int planted_02_3 = 0;' '// EXERCISE 02.3 end' \
    >>"$tmp/own/common/ops_cpu.cpp"
printf '%s\n' '' '## 02.3: planted' 'minutes: 5' 'points: 1' 'files: 02_data_parallel/ring_all_reduce.cpp' \
    'test: tests_02 *ring*' >>"$tmp/own/tests/exercises/02_data_parallel.txt"
out=$(python3 "$tmp/own/tools/exercises.py" check 2>&1)
rc=$?
[ "$rc" != 0 ] && grep -q "exercise 02.3 is solved in common/ops_cpu.cpp, outside 02_data_parallel/" <<<"$out" &&
    grep -q "exercise 02.3's 'files: 02_data_parallel/ring_all_reduce.cpp' differs" <<<"$out"
verdict "an exercise of 02 planted in common/ is refused, and a files: line that misplaces it (check exit $rc)" $?
rm -rf "$tmp/own"

# 3. chapter 02 swept: full marks untouched, each exercise blanked alone scores 0 on it only
t=$SECONDS
out=$(python3 "$tool" sweep --ch 02 2>&1)
rc=$?
ok=1
[ "$rc" = 0 ] && grep -q '^sweep: PASS: chapter 02, untouched: 5/5' <<<"$out" &&
    grep -q '^sweep: PASS: chapter 02, 02.1 blanked: 2/5' <<<"$out" &&
    grep -q '^sweep: PASS: chapter 02, 02.2 blanked: 3/5' <<<"$out" &&
    grep -q '^sweep: PASS: chapter 02, 02.1 wrong (ring-reversed): 2/5' <<<"$out" &&
    grep -q '^sweep: PASS: chapter 02, 02.2 wrong (buckets-cap-in-elements): 3/5' <<<"$out" && ok=0
verdict "chapter 02: full marks untouched; 02.1 or 02.2 blanked, or wrong (a catalogue variant), scores 0 on it and full on the other ($((SECONDS - t)) s)" $ok
grep '^sweep: ' <<<"$out" | sed 's/^/    /'

# 4. a hanging stub is caught by the grader's per-run limit
t=$SECONDS
python3 "$tool" make --only 02.2 --dir "$tmp/hang" --with-build "$build" >/dev/null 2>&1 &&
    sed -i 's|^\( *\)FAIL("exercise 02.2 not done.*|\1for (volatile int spin = 0;; spin = spin + 1) {}|' "$tmp/hang/02_data_parallel/data_parallel.cpp"
out=$(python3 "$tool" grade --ch 02 --dir "$tmp/hang" --timeout 20 --json 2>&1)
rc=$?
ok=1
[ "$rc" = 1 ] && python3 -c '
import json, sys
r = {e["id"]: e for e in json.loads(sys.stdin.read())["exercises"]}
sys.exit(0 if r["02.1"]["passed"] and not r["02.2"]["passed"] and "hung" in r["02.2"]["why"] else 1)' <<<"$out" && ok=0
verdict "a stub that hangs is killed at the grader's limit and scores 0; grading ends (exit $rc, $((SECONDS - t)) s)" $ok

# 5. a later chapter's half-written exercise in common/ does not fail an earlier chapter
t=$SECONDS
f=common/moe_cpu.cpp
copy=$tmp/later
python3 "$tool" make --only 08.1 --dir "$copy" --with-build "$build" >/dev/null 2>&1 &&
    sed -i 's|^\( *\)FAIL("exercise 08.1 not done.*|\1this is not C++ (a half-written exercise 08.1);|' "$copy/$f"
planted=$(md5sum <"$copy/$f")
mkdir -p "$copy/.pentatron-grade-saved/common" && mv "$copy/$f" "$copy/.pentatron-grade-saved/$f" && cp "$f" "$copy/$f"
out=$(python3 "$tool" grade --ch 02 --dir "$copy" --json 2>&1)
rc=$?
ok=1
[ "$rc" = 0 ] && [ "$(md5sum <"$copy/$f")" = "$planted" ] && [ ! -e "$copy/.pentatron-grade-saved" ] && python3 -c '
import json, sys
r = json.loads(sys.stdin.read())
sys.exit(0 if r["full_marks"] and r["instructor_regions"].get("common/moe_cpu.cpp") == ["08.1"] else 1)' <<<"$out" && ok=0
verdict "a compile error in exercise 08.1 (common/) leaves chapter 02 at full marks; the student's file is back (exit $rc, $((SECONDS - t)) s)" $ok

# 6. make grade's exit statuses, and the two self-checks: an instructor grading the reference solution (DIR=.)
#    and a student grading the copy from inside it (make grade CH=NN there); never a Python traceback
t=$SECONDS
out=$(make -s grade CH=02 DIR=. 2>&1)
rc=$?
ok=1
[ "$rc" = 0 ] && grep -q "the reference solution" <<<"$out" && grep -q "total: 5 / 5 points" <<<"$out" &&
    ! grep -q Traceback <<<"$out" && ok=0
verdict "make grade CH=02 DIR=. grades the reference solution: full marks, exit 0 (exit $rc, $((SECONDS - t)) s)" $ok
t=$SECONDS
self=$tmp/self
python3 "$tool" make --only 02.2 --dir "$self" --with-build "$build" >/dev/null 2>&1
out=$(make -s -C "$self" grade CH=02 BUILD="$self/build" 2>&1)
rc=$?
ok=1
[ "$rc" = 2 ] && grep -q "a self-check" <<<"$out" && grep -q "^02.1 *pass" <<<"$out" && grep -q "^02.2 *FAIL" <<<"$out" &&
    grep -q "make grade: not full marks (tools/exercises.py grade exited 1)" <<<"$out" && ! grep -q Traceback <<<"$out" && ok=0
verdict "inside a student copy, make grade CH=02 grades the copy: 02.2 blank scores 0, 'not full marks' (exit $rc, $((SECONDS - t)) s)" $ok
out=$(make -s -C "$self" grade CH=02 DIR="$tmp/nothing" BUILD="$self/build" 2>&1)
rc=$?
ok=1
[ "$rc" = 2 ] && grep -q "make grade: could not grade (tools/exercises.py grade exited 2)" <<<"$out" &&
    ! grep -q Traceback <<<"$out" && ok=0
verdict "make grade with a DIR that holds no copy: 'could not grade', the tool's exit 2 (exit $rc)" $ok

echo "exercises test took $((SECONDS - t0)) s"
echo "$passed passed, $failed failed, 0 skipped"
[ "$failed" = 0 ]
