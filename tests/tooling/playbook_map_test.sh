#!/usr/bin/env bash
# playbook_map_test.sh — every test docs/PLAYBOOK_MAP.md cites exists: the seeds' claims point at real TEST_CASEs.
#
# The map (issue 22) says where each claim of the seeds is measured, naming test cases in backticks after the
# binary that holds them: "tests_03 `ZeRO-3 sends exactly 1.5x ...`", "seed_numbers `...`" (tests_00). A row
# (or a prose paragraph) is read left to right; a backticked text with a space in it that comes after a
# tests_NN or seed_numbers mention is a citation of that binary (identifiers, paths and flags — no space, or a
# leading '-' — are not, nor suite names like `ch00 np3`). A citation may be abbreviated: its words must begin
# a test's name in `tests_NN -ltc`, and a "..." inside it stands for any run of words. Backticked paths of
# files (a '/' and an extension) must exist. Renaming a test without updating the map fails here.
# The check must also be able to fail: a copy of the map with a bogus citation, a bogus binary and a missing
# file each planted must be refused, naming what it planted; an abbreviation of a real name must pass.
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

# check FILE: prints one line per citation that names no test (or a binary not built, or a missing file);
# exit status 1 when there is one
check() {
    awk -v ltc="$tmp" -v src="$src" '
    function trim(s) { sub(/^[ \t]+/, "", s); sub(/[ \t]+$/, "", s); return s }
    function load(n,   f, line) {  # the listing of tests_n, once
        if (n in loaded) return loaded[n]
        f = ltc "/" n ".ltc"
        loaded[n] = 0
        while ((getline line < f) > 0) { names[n, ++count[n]] = line; loaded[n] = 1 }
        close(f)
        return loaded[n]
    }
    function matches(name, cite,   parts, k, i, p, rest, at) {  # cite abbreviates name ("..." = any words)
        k = split(cite, parts, /\.\.\.|…/)
        p = trim(parts[1])
        if (substr(name, 1, length(p)) != p) return 0
        rest = substr(name, length(p) + 1)
        for (i = 2; i <= k; i++) {
            p = trim(parts[i])
            if (p == "") continue
            at = index(rest, p)
            if (!at) return 0
            rest = substr(rest, at + length(p))
        }
        return 1
    }
    function cited(n, cite,   i) {  # after seed_numbers, the words that follow "seed numbers: " in tests_00
        cites++
        if (pre != "" && substr(cite, 1, length(pre)) != pre) cite = pre cite
        if (!load(n)) { print where ": tests_" n " `" cite "`: build/bin/tests_" n " is not built (or lists no test)"; bad = 1; return }
        for (i = 1; i <= count[n]; i++) if (matches(names[n, i], cite)) return
        print where ": tests_" n " `" cite "`: no test of tests_" n " begins so"; bad = 1
    }
    function unit(text, line,   n, tok, code) {  # a table row or a paragraph: citations follow their binary
        n = pre = ""
        where = FILENAME ":" line
        while (match(text, /tests_[0-9][0-9]|seed_numbers|`[^`]+`/)) {
            tok = substr(text, RSTART, RLENGTH)
            text = substr(text, RSTART + RLENGTH)
            if (tok == "seed_numbers") { n = "00"; pre = "seed numbers: "; continue }
            if (tok ~ /^tests_/) { n = substr(tok, 7); pre = ""; continue }
            code = substr(tok, 2, length(tok) - 2)
            if (code ~ /^[A-Za-z0-9_.\/-]+\/[A-Za-z0-9_.-]+\.(sh|cpp|hpp|cu|md|txt|py)$/ &&
                system("test -e \"" src "/" code "\"") != 0) { print where ": `" code "`: no such file"; bad = 1 }
            if (n == "" || code !~ / / || code ~ /^-/ || code ~ /^ch[0-9][0-9] np[0-9]+$/) continue
            cited(n, code)
        }
    }
    /^\|/ { if (para != "") unit(para, pline); para = ""; unit($0, FNR); next }
    /^[ \t]*$/ || /^#/ { if (para != "") unit(para, pline); para = ""; next }
    { if (para == "") pline = FNR; para = para " " $0 }
    END { if (para != "") unit(para, pline); print cites + 0 > (ltc "/cites"); exit bad }
    ' "$1"
}

passed=0 failed=0
verdict() {  # name, 0 = pass; on failure what the check printed
    if [ "$2" = 0 ]; then passed=$((passed + 1)); echo "playbook map test: PASS: $1"
    else failed=$((failed + 1)); echo "playbook map test: FAIL: $1"; echo "$out" | head -n 20 | sed 's/^/    | /'; fi
}

out=$(check "$map" 2>&1)
verdict "each of the $(cat "$tmp/cites") tests docs/PLAYBOOK_MAP.md cites is in its binary's -ltc listing" $?

# plant NAME TEXT EXPECT: a map of one row citing TEXT must fail naming that row (EXPECT 1) or pass (0)
plant() {
    local name=$1 text=$2 expect=$3 rc ok=1
    printf '| # | claim | status | where |\n|---|---|---|---|\n| 999.1 | planted | measured | %s |\n' "$text" >"$tmp/map.md"
    out=$(check "$tmp/map.md" 2>&1)
    rc=$?
    if [ "$expect" = 1 ]; then [ "$rc" = 1 ] && grep -q "map.md:3:" <<<"$out" && ok=0
    else [ "$rc" = 0 ] && ok=0; fi
    verdict "$name" $ok
}
plant "a bogus test name is refused" 'tests_00 `rooted: no such test case anywhere`' 1
plant "real names cut short, with ... inside, pass" \
    'tests_00 `rooted: reduce gives ... in rank order`, seed_numbers `GPT-3 175B activations ...`' 0
plant "a real name's words in another order are refused" 'tests_00 `rooted: gives reduce the root`' 1
plant "a binary that does not exist is refused" 'tests_99 `rooted: reduce gives`' 1
plant "a cited file that does not exist is refused" '`tests/01_single_gpu/no_such_test.sh`' 1

echo "$passed passed, $failed failed, 0 skipped"
[ "$failed" = 0 ]
