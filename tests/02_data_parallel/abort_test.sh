#!/usr/bin/env bash
# abort_test.sh — one failing rank must bring the whole data-parallel job down, fast, naming itself.
#
# A rank that throws while the others wait in an all-reduce would hang them forever; run_main
# (common/runtime.hpp) catches the error, prints "[rank R] ..." and MPI_Aborts the job. This runs
# chapter 02 on 4 ranks with --inject-failure 1:3 (rank 1 throws when step 3 begins) under a 30 s
# timeout: it passes when the job exits non-zero, not by the timeout (124), and the output names rank 1.
# The same command without the injection must exit 0, so the failure is the injection's and nothing else.
# And rank 2 stopped from outside (kill -STOP) while training: the watchdog (--comm-timeout 5) ends the job, the
# first diagnosis printed names rank 2, and no rank claims a deadlock.
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

# A rank stopped from outside (kill -STOP: a debugger, ^Z, a frozen node): the others' deadlines pass and their
# watchdog ends the job. The first diagnosis printed (a "did not arrive" or "deadlock" line, or an error) must
# name rank 2, and no rank may claim a deadlock: when mpirun kills the job it first wakes a stopped rank
# (SIGCONT), whose wait then looked expired too, and it, and every rank hearing from it, used to report "every
# rank is waiting ... (a deadlock)" (common/watchdog.cpp).
descendants() { local p; for p in $(ps -o pid= --ppid "$1"); do echo "$p"; descendants "$p"; done; }
rank_pid() {  # the process among $1's descendants that is world rank $2 (Open MPI puts the rank in its environment)
    local p
    for p in $(descendants "$1"); do
        tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2" && { echo "$p"; return; }
    done
}
timeout -k 5 60 "${run[@]}" --steps 1000000 --log-every 1000000 --comm-timeout 5 >"$tmp/stop.out" 2>&1 &
job=$!
stopped=""
for _ in $(seq 600); do  # until training runs (the first step line), then rank 2 is stopped
    grep -q '^step' "$tmp/stop.out" && stopped=$(rank_pid "$job" 2) && [ -n "$stopped" ] && break
    sleep 0.1
done
[ -n "$stopped" ] && kill -STOP "$stopped"
wait "$job"
rc=$?
[ -n "$stopped" ] && kill -KILL "$stopped" 2>/dev/null  # ours, if mpirun left it behind
out=$(cat "$tmp/stop.out")
first=$(grep -m1 -E 'did not arrive|deadlock|^error:' <<<"$out")
ok=1
[ -n "$stopped" ] && [ "$rc" != 0 ] && [ "$rc" != 124 ] && [ "$rc" -lt 128 ] && grep -qF "rank 2" <<<"$first" &&
    ! grep -q deadlock <<<"$out" && ok=0
[ "$ok" != 0 ] && { echo "$out" | tail -n 30; echo "(exit status $rc; rank 2's pid: ${stopped:-not found}; first diagnosis: $first)"; }
verdict "rank 2 stopped by SIGSTOP: the job ends (exit status $rc), the first diagnosis names rank 2, no deadlock claimed" $ok

echo "$passed passed, $failed failed, 0 skipped"
[ "$failed" = 0 ]
