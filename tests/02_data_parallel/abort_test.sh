#!/usr/bin/env bash
# abort_test.sh — one failing rank must bring the whole data-parallel job down, fast, naming itself.
#
# A rank that throws while the others wait in an all-reduce would hang them forever; run_main
# (common/runtime.hpp) catches the error, prints "[rank R] ..." and MPI_Aborts the job. This runs
# chapter 02 on 4 ranks with --inject-failure 1:3 (rank 1 throws when step 3 begins) under a 30 s
# timeout: it passes when the job exits non-zero, not by the timeout (124), and the output names rank 1.
# The same command without the injection must exit 0, so the failure is the injection's and nothing else.
# Prints "N passed, N failed, N skipped" like the test binary; scripts/run_tests.sh adds it to the total.
#
#   bash tests/02_data_parallel/abort_test.sh build/bin    (the BIN dir; without it $BIN, as make sets it, or
#                                                          build/bin; MPIRUN from the environment, as make sets it)
set -uo pipefail
bin=${1:-${BIN:-build/bin}}
mpirun_cmd=${MPIRUN:-mpirun --oversubscribe}
[ "$(id -u)" = 0 ] && [[ "$mpirun_cmd" != *allow-run-as-root* ]] && mpirun_cmd+=" --allow-run-as-root"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1

if [ "${MPI:-1}" = 0 ]; then
    echo "abort test: skipped (MPI=0 build: a single rank has no job to abort)"
    echo "0 passed, 0 failed, 1 skipped"
    exit 0
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# `tiny` has a vocabulary of 64, too small for the byte-level addition task: 2048 zero tokens will do
head -c 4096 /dev/zero >"$tmp/zeros.bin"
run=($mpirun_cmd -np 4 "$bin/02_data_parallel" --dp 4 --model tiny --data "raw:$tmp/zeros.bin" --seq 16
     --micro-batch 2 --steps 5 --warmup 1 --eval-every 0 --log-every 1)

passed=0 failed=0
verdict() {  # name, 0 = pass
    if [ "$2" = 0 ]; then passed=$((passed + 1)); echo "abort test: PASS: $1"
    else failed=$((failed + 1)); echo "abort test: FAIL: $1"; fi
}

out=$(timeout 30 "${run[@]}" --inject-failure 1:3 2>&1)
rc=$?
ok=1
[ "$rc" != 0 ] && [ "$rc" != 124 ] && grep -qF "[rank 1]" <<<"$out" && grep -qF "injected failure at step 3" <<<"$out" && ok=0
[ "$ok" != 0 ] && { echo "$out" | tail -n 20; echo "(exit status $rc)"; }
verdict "--inject-failure 1:3 aborts the 4-rank job (exit status $rc) and names rank 1" $ok

out=$(timeout 30 "${run[@]}" 2>&1)
rc=$?
[ "$rc" != 0 ] && { echo "$out" | tail -n 20; echo "(exit status $rc)"; }
verdict "the same job without the injection exits 0 (exit status $rc)" $rc

echo "$passed passed, $failed failed, 0 skipped"
[ "$failed" = 0 ]
