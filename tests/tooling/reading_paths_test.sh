#!/usr/bin/env bash
# reading_paths_test.sh — the chapter READMEs' reading paths and docs/PLAYBOOK_TERMS.md still point at the code.
#
# Issue 31: every chapter README opens with "Read this first", line ranges of the concept whose first and last
# lines hold a named text; docs/PLAYBOOK_TERMS.md says where each playbook term is defined.
# tests/tooling/reading_check.py checks both and prints the per-chapter totals against the budgets. The check
# must be able to fail, so a copy of the sources gets planted faults, each of which must be refused naming
# what broke: a term's class renamed, a line inserted above a reading-path range, a wrong total, a path over
# its budget with no reason given. A copy with the fault undone by --fix must pass again.
# Prints "N passed, N failed, N skipped" like the test binaries.
#   bash tests/tooling/reading_paths_test.sh
set -uo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
check=$src/tests/tooling/reading_check.py
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "  ok: $1"; }
bad() { fail=$((fail + 1)); echo "FAILED: $1"; }

# the real tree: no problems, the table printed
if python3 "$check" --root "$src" >"$tmp/real.txt" 2>&1; then ok "the tree's reading paths and terms hold"
else bad "the tree's reading paths or terms"; fi
cat "$tmp/real.txt"

# a fresh copy of the chapters, common/ and docs/ (sources only) for each planted fault
copy() {
    rm -rf "$tmp/c" && mkdir -p "$tmp/c"
    (cd "$src" && cp -r docs common [0-9][0-9]_* "$tmp/c/" 2>/dev/null)
}
refused() {  # refused NAME PATTERN: the check on the copy fails and says PATTERN
    if python3 "$check" --root "$tmp/c" >"$tmp/out.txt" 2>&1; then bad "$1: the check passed"
    elif grep -q -- "$2" "$tmp/out.txt"; then ok "$1 refused"
    else bad "$1: refused without naming it ($2)"; sed -n '1,40p' "$tmp/out.txt"; fi
}

# 1. a playbook term's definition renamed
row=$(grep -m1 '^| .* | [0-9][0-9] | `' "$src/docs/PLAYBOOK_TERMS.md")
sym=$(echo "$row" | sed -E 's/^[^`]*`([^`]+)`.*/\1/')
file=$(echo "$row" | sed -E 's/.*\[([^]:]+):[0-9]+\].*/\1/')
copy
sed -i -E "s/\b$sym\b/${sym}Renamed/g" "$tmp/c/$file"
refused "term \`$sym\` renamed in $file" "does not define \`$sym\`"

# 2. a line inserted above the first range of chapter 04's path (its numbers now point one line off); --fix mends
copy
rel=$(grep -m1 -E '^\| 1 \| \[' "$tmp/c/04_tensor_parallel/README.md" | sed -E 's/^\| 1 \| \[([^]:]+):.*/\1/')
sed -i '1i // a line a reader added' "$tmp/c/04_tensor_parallel/$rel"
refused "a line inserted in 04_tensor_parallel/$rel" "does not hold"
python3 "$check" --root "$tmp/c" --fix >/dev/null 2>&1
if python3 "$check" --root "$tmp/c" >/dev/null 2>&1; then ok "--fix renumbers the moved range"; else bad "--fix"; fi

# 3. a total that is not the sum of its rows
copy
sed -i -E '0,/^Total: \*\*/s/^Total: \*\*([0-9,]+) lines\*\*/Total: **1 lines**/' "$tmp/c/02_data_parallel/README.md"
refused "a wrong total in 02's README" "Total says 1 lines"

# 4. over budget with no reason: chapter 05's budget (300) lowered below its path
copy
cp "$check" "$tmp/check.py" && sed -i -E 's/"05": 300/"05": 3/' "$tmp/check.py"
sed -i '/^Over budget:/d' "$tmp/c/05_sequence_parallel/README.md"
if python3 "$tmp/check.py" --root "$tmp/c" >"$tmp/out.txt" 2>&1; then bad "over budget: the check passed"
elif grep -q "over chapter 05's budget" "$tmp/out.txt"; then ok "a path over its budget with no reason refused"
else bad "over budget: not named"; fi

echo "$pass passed, $fail failed, 0 skipped"
[ "$fail" = 0 ]
