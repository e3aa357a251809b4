#!/usr/bin/env bash
# gpu_cases_test.sh — scripts/gpu_check.sh selects the GPU tests by their tag, -tc='[gpu]*' (tests/testing.hpp):
# the selection must hold every test case that needs a GPU and nothing else, chapter 10's kernels included
# (their cases once skipped through gpu_unavailable() under names the old filter, '*cuda*,*nccl*', missed).
#   1. the sources: every GPU guard (SKIP_WITHOUT_GPU, SKIP_GPU_TEST) that sits in a TEST_CASE sits in a
#      tagged one, and no test asks cuda_available() or gpu_unavailable() except through a guard (the guard
#      also fails an untagged test at run time, in every `make test`);
#   2. the binaries, here without a GPU: the cases the filter selects, run on every world size of their suites,
#      must all skip (every one needs a GPU; a CUDA build's refusal tests, which run before touching the
#      device, may pass), none may fail, and as many must run as the binaries list (X-macro copies count once
#      per suite, as doctest counts them);
#   3. gpu_check.sh --dry-run lists the same number, and chapter 10's five GPU cases among them.
#   bash tests/tooling/gpu_cases_test.sh        (make test runs it)
source "$(dirname "$0")/../expect_fail.sh"
cd "$(dirname "$0")/../.."

# 1. the sources
lint=$(for f in tests/*/test_*.cpp; do
    awk -v f="$f" '
        /^[[:space:]]*TEST_CASE\(/ || /^[A-Za-z].*\) *\{$/ { owner = $0; line = FNR }
        /SKIP_WITHOUT_GPU\(\)|SKIP_GPU_TEST\(/ {
            if (owner ~ /TEST_CASE\(/ && owner !~ /TEST_CASE\("\[gpu\] /) printf "%s:%d: a GPU guard in an untagged test: %s\n", f, line, owner
        }
        /cuda_available\(\)|gpu_unavailable\(\)/ && !/SKIP_WITHOUT_GPU|SKIP_GPU_TEST/ {
            printf "%s:%d: asks for a GPU outside a guard (SKIP_WITHOUT_GPU / SKIP_GPU_TEST): %s\n", f, FNR, $0
        }' "$f"
done)
expect_verdict "the sources: GPU guards only in tagged tests, no GPU query outside a guard" "$([ -n "$lint" ] && echo "$lint")" \
    "$(grep -lE 'SKIP_WITHOUT_GPU\(\)|SKIP_GPU_TEST\(' tests/*/test_*.cpp | wc -l) files with guards" "$lint"

# 2. the binaries: what the filter lists, and what running it does without a GPU
listed=0 per_bin=""
for t in "$BIN"/tests_*; do
    n=$(OMPI_MCA_plm=isolated "$t" --list-test-cases --no-colors -tc='[gpu]*' $([ "${MPI:-1}" = 0 ] && echo "-ts=*np1") 2>/dev/null |
        grep -oE 'passing the current filters: [0-9]+' | grep -oE '[0-9]+$')
    listed=$((listed + ${n:-0}))
    per_bin+="$(basename "$t") ${n:-0}, "
done
echo "$expect_name: the binaries list $listed GPU test cases ($per_bin${MPI:+MPI=$MPI})"
n10=$(OMPI_MCA_plm=isolated "$BIN/tests_10" --list-test-cases --no-colors -tc='[gpu]*' 2>/dev/null | grep -cE '^\[gpu\] gpu (gemm|fused|flash attention):')
expect_verdict "chapter 10's GPU cases are selected (gpu gemm, gpu fused, gpu flash attention: 5)" \
    "$([ "$n10" = 5 ] || echo "tests_10 lists $n10 of them")" "$n10 selected" ""
run=$(PENTA_TEST_CASES='[gpu]*' PENTA_TEST_TIMEOUT=120 bash scripts/run_tests.sh "$BIN"/tests_* 2>&1)
total=$(grep -E '^total: ' <<<"$run" | tail -n 1)
read -r p f s <<<"$(sed -E 's/total: ([0-9]+) passed, ([0-9]+) failed, ([0-9]+) skipped/\1 \2 \3/' <<<"${total:-total: 0 passed, 1 failed, 0 skipped}")"
why=""
if [ "$f" != 0 ]; then why="$f failed"
elif [ $((p + s)) != "$listed" ]; then why="$((p + s)) ran of the $listed listed"
elif [ "${CUDA:-0}" != 1 ] && [ "$p" != 0 ]; then why="$p passed in a build without CUDA: they do not need a GPU, so they must not be tagged"
elif [ "$s" = 0 ]; then why="none skipped: this machine has a GPU, or the guards do not skip"
fi
expect_verdict "every selected case needs a GPU: run here, each skips (CUDA=${CUDA:-0})" "$why" "$total" "$run"

# 3. the dry run's plan
dry=$(GPU_CHECK_BUILD=$(realpath --relative-to=. "$(dirname "$BIN")") bash scripts/gpu_check.sh --dry-run 2>&1)
all=$(OMPI_MCA_plm=isolated bash -c 'for t in "$1"/tests_*; do "$t" --list-test-cases --no-colors -tc="[gpu]*" 2>/dev/null |
    grep -oE "passing the current filters: [0-9]+" | grep -oE "[0-9]+$"; done' _ "$BIN" | awk '{s += $1} END {print s + 0}')
expect_ok "gpu_check.sh --dry-run: the steps, their limits, the deadline and every GPU case" 60 \
    "whole-run deadline 540 s && build && gpu_tests && memcheck_tests_10 && chapters && gpu_bench && tests_10: [gpu] gpu gemm: && tests_10: [gpu] gpu flash attention: forward and backward && tests_10: [gpu] gpu fused: && dry run: $all GPU test cases in" \
    bash -c 'printf "%s\n" "$1"; grep -q "dry run: " <<<"$1"' _ "$dry"
expect_summary
