#!/usr/bin/env bash
# layering_test.sh — scripts/check_layering.sh must pass the tree as it is and fail each kind of violation.
#
# Copies common/, the chapter folders and tests/ to a scratch folder, checks that the copy passes, then
# plants one forbidden #include at a time at the end of a file — common/ including a chapter, a chapter
# (or a file in its subfolder) including a later one, a chapter-04 test including chapter 05 and chapter 05's
# test folder, the harness including a chapter — and requires exit status 1 and the file:line of the planted
# include in the output. Also that including an earlier chapter stays allowed. Prints "N passed, N failed,
# N skipped" like the test binaries; `make test` runs it (not `make test CH=NN`).
#   bash tests/tooling/layering_test.sh
set -uo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
check=$src/scripts/check_layering.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$src" && cp -r common [0-9][0-9]_* tests "$tmp/")

passed=0 failed=0
verdict() {  # name, 0 = pass; on failure the checker's output
    if [ "$2" = 0 ]; then passed=$((passed + 1)); echo "layering test: PASS: $1"
    else failed=$((failed + 1)); echo "layering test: FAIL: $1"; echo "$out" | tail -n 8 | sed 's/^/    | /'; fi
}

out=$(bash "$check" "$tmp" 2>&1)
verdict "the tree as it is passes (exit status $?)" $?

# plant NAME FILE INCLUDE EXPECT: FILE with `#include "INCLUDE"` appended must make the check exit with
# EXPECT (1: naming FILE:line; 0: passing); FILE is restored afterwards
plant() {
    local name=$1 file=$2 include=$3 expect=$4 line rc ok=1
    cp -p "$tmp/$file" "$tmp/keep"
    printf '#include "%s"\n' "$include" >>"$tmp/$file"
    line=$(wc -l <"$tmp/$file")
    out=$(bash "$check" "$tmp" 2>&1)
    rc=$?
    if [ "$expect" = 1 ]; then
        [ "$rc" = 1 ] && grep -qF "$file:$line: #include \"$include\"" <<<"$out" && ok=0
    else
        [ "$rc" = 0 ] && ok=0
    fi
    verdict "$name: $file:$line includes $include (exit status $rc, want $expect)" $ok
    mv "$tmp/keep" "$tmp/$file"
}
plant "common/ includes a chapter" common/tensor.hpp ../01_single_gpu/training_step.hpp 1
plant "common/cuda/ includes a chapter" common/cuda/gemm.cu ../../05_sequence_parallel/sequence_parallel.hpp 1
plant "a chapter includes a later chapter" 02_data_parallel/data_parallel.cpp ../03_zero/zero.hpp 1
plant "a chapter's subfolder includes a later chapter" 07_pipeline_parallel/tools/schedule_check.cpp \
    ../../08_expert_parallel/moe_layer.hpp 1
plant "a chapter-04 test helper includes chapter 05" tests/04_tensor_parallel/tp_testing.cpp \
    ../../05_sequence_parallel/sequence_parallel.hpp 1
plant "a chapter-04 test includes chapter 05's test folder" tests/04_tensor_parallel/test_tp.cpp \
    ../05_sequence_parallel/sp_testing.hpp 1
plant "the test harness includes a chapter" tests/testing.hpp ../01_single_gpu/training_step.hpp 1
plant "a chapter includes an earlier chapter (allowed)" 03_zero/zero.cpp ../02_data_parallel/data_parallel.hpp 0
plant "a chapter-05 test includes chapter 04's test folder (allowed)" tests/05_sequence_parallel/test_sp.cpp \
    ../04_tensor_parallel/tp_testing.hpp 0

echo "$passed passed, $failed failed, 0 skipped"
[ "$failed" = 0 ]
