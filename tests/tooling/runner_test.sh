#!/usr/bin/env bash
# runner_test.sh — scripts/run_tests.sh must never end in "0 failed" when a test run crashed or hung.
#
# Fake test binaries (shell scripts that answer --list-test-suites as a doctest binary does, then misbehave)
# go through the real runner: one is killed by SIGSEGV, one sleeps past a PENTA_TEST_TIMEOUT of 3 s, one
# prints no summary, one crashes in its 2-rank run only, one test script crashes, one fails a test the
# ordinary way. Each must make the runner exit non-zero with a non-zero failed count on its "total:" line
# and a "FAILED: <its name>, ..." line saying what happened; a fake that prints a proper summary must pass,
# and counts must add up across binaries when one of them crashes. A skip for want of PyTorch is named on a
# note above the total line (without it the comparisons with PyTorch never ran), a skip for want of a GPU not.
# The bookkeeping cases run the fakes directly (the runner's MPI=0 path); the segfault, the hang and the
# 2-rank crash run under mpirun (MPIRUN, as make sets it) unless MPI=0. With PENTA_TEST_FAIL_FAST=1 the
# runner must stop at the first failure (the passing binary after it is not counted). Prints "N passed, N failed,
# N skipped" like the test binaries; `make test` runs it (not `make test CH=NN`).
#   bash tests/tooling/runner_test.sh
set -uo pipefail
runner=$(cd "$(dirname "$0")/../.." && pwd)/scripts/run_tests.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# fake NAME SUITES BODY: a test binary listing SUITES (one per line) whose test run executes BODY
fake() {
    cat >"$tmp/$1" <<EOF
#!/usr/bin/env bash
if [[ " \$* " == *" --list-test-suites "* ]]; then printf '%s\n' $2; exit 0; fi
$3
EOF
    chmod +x "$tmp/$1"
}
fake tests_segv "'ch99 np1'" 'kill -SEGV $$'
fake tests_hang "'ch99 np1'" 'sleep 30'
fake tests_mute "'ch99 np1'" 'exit 0'
fake tests_fail "'ch99 np1'" 'echo "2 passed, 1 failed, 0 skipped"; exit 1'
fake tests_good "'ch99 np1'" 'echo "skipped: a GPU test: no CUDA device"; echo "3 passed, 0 failed, 1 skipped"'
# a comparison with PyTorch skipped, as tests_01 prints it without python3-torch
fake tests_notorch "'ch99 np1'" \
    'echo "skipped: agrees with torch: no python3 that imports torch and numpy"; echo "1 passed, 0 failed, 1 skipped"'
# passes on one rank, segfaults on two (mpirun sets OMPI_COMM_WORLD_SIZE)
fake tests_np2 "'ch99 np1' 'ch99 np2'" \
    '[ "${OMPI_COMM_WORLD_SIZE:-1}" = 2 ] && kill -SEGV $$; echo "1 passed, 0 failed, 0 skipped"'
printf '#!/usr/bin/env bash\necho "1 passed, 0 failed, 0 skipped"\nkill -SEGV $$\n' >"$tmp/crash_test.sh"

passed=0 failed=0
verdict() {  # name, 0 = pass; on failure the runner's output
    if [ "$2" = 0 ]; then passed=$((passed + 1)); echo "runner test: PASS: $1"
    else failed=$((failed + 1)); echo "runner test: FAIL: $1"; echo "$out" | tail -n 15 | sed 's/^/    | /'; fi
}
# expect NAME TOTAL_REGEX FAILED_LINE_REGEX -- ITEMS...: runs the runner on ITEMS (with MPI=$mpi and
# PENTA_TEST_TIMEOUT=$limit); it must end with a "total:" line matching TOTAL_REGEX and print a "FAILED: "
# line matching FAILED_LINE_REGEX with a non-zero exit status (FAILED_LINE_REGEX empty: no FAILED line, exit 0)
mpi=0 limit=60
expect() {
    local name=$1 total=$2 failed_line=$3 ok=0
    shift 4
    [ "$mpi" = 1 ] && name+=", under mpirun"
    out=$(cd "$tmp" && MPI=$mpi PENTA_TEST_TIMEOUT=$limit PENTA_TEST_FAIL_FAST=${PENTA_TEST_FAIL_FAST:-0} bash "$runner" "$@" 2>&1)
    local rc=$? last
    last=$(tail -n 1 <<<"$out")
    [[ "$last" =~ ^total:\ $total$ ]] || ok=1
    if [ -n "$failed_line" ]; then
        [ "$rc" != 0 ] && grep -qE "^FAILED: $failed_line" <<<"$out" || ok=1
    else
        [ "$rc" = 0 ] && ! grep -q '^FAILED' <<<"$out" || ok=1
    fi
    verdict "$name (exit status $rc; $last)" $ok
}

expect "a segfaulting binary is one failed run, named with its signal" \
    '0 passed, 1 failed, 0 skipped' 'tests_segv, 1-rank run: exited by signal 11 \(SEGV\)' -- "$tmp/tests_segv"
expect "a binary that prints no summary is one failed run" \
    '0 passed, 1 failed, 0 skipped' 'tests_mute, 1-rank run: exited with status 0, no summary printed' -- "$tmp/tests_mute"
expect "a failing test counts as the binary reports it" \
    '2 passed, 1 failed, 0 skipped' 'tests_fail, 1-rank run: 1 failed' -- "$tmp/tests_fail"
expect "a test script killed after its summary is one failed run" \
    '1 passed, 1 failed, 0 skipped' '.*crash_test.sh: exited by signal 11' -- "$tmp/crash_test.sh"
expect "a passing binary passes" '3 passed, 0 failed, 1 skipped' '' -- "$tmp/tests_good"
expect "a crash between passing binaries: their counts plus one failed run" \
    '6 passed, 1 failed, 2 skipped' 'tests_segv, 1-rank run' -- "$tmp/tests_good" "$tmp/tests_segv" "$tmp/tests_good"
# skips for want of PyTorch are named on a note above the total; other skips (no GPU) are not
out=$(cd "$tmp" && MPI=0 bash "$runner" "$tmp/tests_notorch" "$tmp/tests_good" 2>&1)
grep -q '^note: 1 of the skipped tests need PyTorch' <<<"$out" && [[ "$(tail -n 1 <<<"$out")" == "total: 4 passed, 0 failed, 2 skipped" ]]
verdict "a skipped PyTorch comparison is named on a note; a skipped GPU test is not" $?
out=$(cd "$tmp" && MPI=0 bash "$runner" "$tmp/tests_good" 2>&1)
! grep -q '^note:' <<<"$out"
verdict "no note when nothing skipped wants PyTorch" $?
if [ "${MPI:-1}" != 0 ]; then
    mpi=1
    expect "a segfaulting binary is one failed run" \
        '0 passed, 1 failed, 0 skipped' 'tests_segv, 1-rank run: exited by signal 11' -- "$tmp/tests_segv"
    expect "a crash in the 2-rank run only: the 1-rank run counts, the 2-rank run is one failed run" \
        '1 passed, 1 failed, 0 skipped' 'tests_np2, 2-rank run: exited by signal 11' -- "$tmp/tests_np2"
fi
PENTA_TEST_FAIL_FAST=1 expect "PENTA_TEST_FAIL_FAST=1: nothing runs after the first failure" \
    '2 passed, 1 failed, 0 skipped' 'tests_fail, 1-rank run: 1 failed' -- "$tmp/tests_fail" "$tmp/tests_good"
limit=3
expect "a binary that hangs past PENTA_TEST_TIMEOUT=3 is one failed run" \
    '0 passed, 1 failed, 0 skipped' 'tests_hang, 1-rank run: hung: killed at the 3 s limit' -- "$tmp/tests_hang"

echo "$passed passed, $failed failed, 0 skipped"
[ "$failed" = 0 ]
