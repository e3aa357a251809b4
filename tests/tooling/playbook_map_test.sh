#!/usr/bin/env bash
# playbook_map_test.sh — every test docs/PLAYBOOK_MAP.md cites exists, and asserts what its row says it measures.
#
# The map (issues 22, 33) gives each claim of the seeds a status and the tests that show it, naming test cases
# in backticks after the binary that holds them: "tests_03 `ZeRO-3 sends exactly 1.5x ...`", "seed_numbers
# `...`" (tests_00). tests/tooling/playbook_map_check.py does the reading; it checks that each cited test is in
# its binary's -ltc listing (abbreviations allowed, "..." = any words) and each cited file exists; that every
# status is in the map's vocabulary; that a `measured` or `logical clock` row's assertion is real: a cited CPU
# test carries the row's marker (`// playbook: 000.04.10`) next to a check in its body; and that a row citing
# a GPU test says `compiled, not run`. Renaming a test, or moving the check a row relies on, fails here.
# The check must also be able to fail: planted rows (a bogus citation, binary or file; a status outside the
# vocabulary; a measured row citing a real test that does not assert it; a GPU row marked measured) must each
# be refused, naming the planted row; an abbreviation of a real name, and a marked row, must pass.
# Needs the test binaries (BIN, default build/bin); `make test` builds them and runs this (not `make test CH=NN`).
# Prints "N passed, N failed, N skipped" like the test binaries.
#   bash tests/tooling/playbook_map_test.sh
set -uo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
bin=${BIN:-build/bin}
[[ $bin = /* ]] || bin=$src/$bin
map=$src/docs/PLAYBOOK_MAP.md
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# every binary's test names, one per line, in $tmp/NN.ltc (a binary that is not built gives no file)
for b in "$bin"/tests_[0-9][0-9]; do
    [ -x "$b" ] || continue
    n=${b##*tests_}
    "$b" -ltc 2>/dev/null | grep -v '^\[doctest\]\|^=====' >"$tmp/$n.ltc"
done

# check FILE: prints one line per problem (playbook_map_check.py says what it checks); exit status 1 when
# there is one
check() { python3 "$src/tests/tooling/playbook_map_check.py" "$1" "$src" "$tmp"; }

passed=0 failed=0
verdict() {  # name, 0 = pass; on failure what the check printed
    if [ "$2" = 0 ]; then passed=$((passed + 1)); echo "playbook map test: PASS: $1"
    else failed=$((failed + 1)); echo "playbook map test: FAIL: $1"; echo "$out" | head -n 20 | sed 's/^/    | /'; fi
}

out=$(check "$map" 2>&1)
verdict "each of the $(cat "$tmp/cites") tests docs/PLAYBOOK_MAP.md cites is in its binary's -ltc listing; every \
status in the vocabulary; every measured row's assertion carries its marker; no GPU row measured" $?

# plant NAME TEXT EXPECT [ID STATUS WHY]: a map of one row (ID, default 999.1.1, status STATUS, default
# `formula`) citing TEXT must fail naming that row, and saying WHY when given (EXPECT 1), or pass (0)
plant() {
    local name=$1 text=$2 expect=$3 id=${4:-999.1.1} status=${5:-formula} why=${6:-} rc ok=1
    printf '| # | claim | status | where |\n|---|---|---|---|\n| %s | planted | %s | %s |\n' "$id" "$status" "$text" \
        >"$tmp/map.md"
    out=$(check "$tmp/map.md" 2>&1)
    rc=$?
    if [ "$expect" = 1 ]; then [ "$rc" = 1 ] && grep -q "map.md:3:.*$why" <<<"$out" && ok=0
    else [ "$rc" = 0 ] && ok=0; fi
    verdict "$name" $ok
}
plant "a bogus test name is refused" 'tests_00 `rooted: no such test case anywhere`' 1
plant "real names cut short, with ... inside, pass" \
    'tests_00 `rooted: reduce gives ... in rank order`, seed_numbers `GPT-3 175B activations ...`' 0
plant "a real name's words in another order are refused" 'tests_00 `rooted: gives reduce the root`' 1
plant "a binary that does not exist is refused" 'tests_99 `rooted: reduce gives`' 1
plant "a cited file that does not exist is refused" '`tests/01_single_gpu/no_such_test.sh`' 1
# the status column: one vocabulary; a measured row's test must carry the row's marker next to a check
plant "a status outside the vocabulary is refused" 'tests_00 `rooted: reduce gives ...`' 1 000.A.2 "shown" \
    "is not one of"
plant "a measured row whose test carries its marker passes" 'tests_00 `rooted: reduce gives ...`' 0 000.A.2 measured
plant "a measured row citing a real test that does not assert it (no marker of its row) is refused" \
    'tests_00 `rooted: gather gives the root the parts ...`' 1 000.A.2 measured "asserts it"
plant "a GPU row marked measured is refused" 'tests_02 `[gpu] NCCL backend on one GPU: ...`' 1 000.A.10 \
    "measured (on a GPU)" "compiled, not run"
plant "a GPU row says compiled, not run" 'tests_02 `[gpu] NCCL backend on one GPU: ...`' 0 000.A.10 "compiled, not run"
plant "a GPU test cited beside a marked CPU one still needs compiled, not run" \
    'tests_00 `rooted: reduce gives ...`; tests_02 `[gpu] NCCL backend on one GPU: ...`' 1 000.A.2 measured \
    "compiled, not run"
plant "a measured script row needs the marker in the script" '`tests/02_data_parallel/abort_test.sh`' 1 999.1.1 \
    measured "asserts it"

echo "$passed passed, $failed failed, 0 skipped"
[ "$failed" = 0 ]
