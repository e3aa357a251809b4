#!/usr/bin/env bash
# check_layering.sh [ROOT] — the include rules that let chapter NN build and pass its tests while a later
# chapter is broken (a workshop blank, a half-done exercise): `make test CH=NN` compiles nothing later.
#   1. common/ includes no chapter folder: every chapter, and every test binary, rests on common/ alone.
#   2. a chapter NN_name/ (its subfolders included) includes no later chapter MM_name/ (MM > NN).
#   3. a test under tests/NN_name/ includes no later chapter and no later chapter's test folder (MM > NN);
#      the harness at the top of tests/ (testing.hpp, test_main.cpp, linked into every test binary) includes
#      no chapter at all (tests/00_common at most).
# A path names folder MM when one of its parts is MM_something (two digits, an underscore): #include
# "../05_sequence_parallel/sequence_parallel.hpp" names 05, whether it means the chapter or its test folder.
# Prints every violation as file:line, the include and the rule it breaks, then one line "N passed, N failed,
# N skipped" (the whole check is one test) like the test binaries, so scripts/run_tests.sh counts it. Exit
# status 1 on any violation. `make test` runs it (CH=NN too); its own test is tests/tooling/layering_test.sh.
set -uo pipefail
root=${1:-.}
cd "$root" || { echo "check_layering: no folder $root" >&2; exit 2; }

violations=0 files=0
# check FILE ALLOWED RULE: every include of FILE naming a folder MM > ALLOWED (-1: any) breaks RULE
check() {
    local file=$1 allowed=$2 rule=$3 n line path part mm worst
    files=$((files + 1))
    while IFS= read -r line; do
        [[ "$line" =~ ^([0-9]+):[[:space:]]*#[[:space:]]*include[[:space:]]*[\"\<]([^\"\>]+)[\"\>] ]] || continue
        n=${BASH_REMATCH[1]} path=${BASH_REMATCH[2]} worst=-1
        IFS=/ read -ra parts <<<"$path"
        for part in "${parts[@]}"; do
            [[ "$part" =~ ^([0-9][0-9])_ ]] || continue
            mm=$((10#${BASH_REMATCH[1]}))
            [ "$mm" -gt "$worst" ] && worst=$mm
        done
        if [ "$worst" -gt "$allowed" ]; then
            echo "$file:$n: #include \"$path\": $rule"
            violations=$((violations + 1))
        fi
    done < <(grep -nE '^[[:space:]]*#[[:space:]]*include' "$file")
}
# the C++/CUDA sources and headers directly in folder $1
sources() { find "$1" -maxdepth 1 -type f \( -name '*.cpp' -o -name '*.hpp' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' -o -name '*.inc' \) | sort; }

if [ -d common ]; then
    while IFS= read -r f; do
        check "$f" -1 "common/ may not include a chapter folder (rule 1: every chapter rests on common/ alone)"
    done < <(find common -type d | sort | while IFS= read -r d; do sources "$d"; done)
fi
for dir in [0-9][0-9]_*/; do
    [ -d "$dir" ] || continue
    nn=${dir:0:2}
    while IFS= read -r f; do
        check "$f" $((10#$nn)) "chapter $nn may not include a later chapter (rule 2: chapters <= $nn only)"
    done < <(find "$dir" -type d | sort | while IFS= read -r d; do sources "$d"; done)  # its subfolders too (07's tools/)
done
if [ -d tests ]; then
    while IFS= read -r f; do
        check "$f" 0 "the test harness, linked into every test binary, may not include a chapter (rule 3)"
    done < <(sources tests)
    for dir in tests/[0-9][0-9]_*/; do
        [ -d "$dir" ] || continue
        nn=${dir:6:2}
        while IFS= read -r f; do
            check "$f" $((10#$nn)) "a test of chapter $nn may not include a later chapter or test folder (rule 3: <= $nn only)"
        done < <(sources "$dir")
    done
fi

if [ "$violations" = 0 ]; then
    echo "layering: $files files include no later chapter"
    echo "1 passed, 0 failed, 0 skipped"
else
    echo "layering: $violations include(s) break the rules (scripts/check_layering.sh says why they exist)"
    echo "0 passed, 1 failed, 0 skipped"
    exit 1
fi
