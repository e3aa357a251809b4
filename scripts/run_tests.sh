#!/usr/bin/env bash
# run_tests.sh — runs the doctest binary once per world size, under mpirun, and prints one total line.
#
#   bash scripts/run_tests.sh build/bin/tests        # every chapter      (what `make test` runs)
#   bash scripts/run_tests.sh build/bin/tests 04     # chapter 04 only    (`make test CH=04`)
#
# Test suites are named "chNN npK": chapter NN, run on K ranks. The binary reduces each test's outcome
# over its ranks and prints "N passed, N failed, N skipped"; this script adds those up over the world
# sizes and ends with "total: N passed, N failed, N skipped". It fails if any test failed, or a run died
# or printed no summary. Chapter 02 (and the whole run) also runs tests/02_data_parallel/abort_test.sh, whose summary line
# is added the same way. MPIRUN comes from the Makefile (as root: --allow-run-as-root; --oversubscribe).
set -uo pipefail
bin=${1:?usage: run_tests.sh TEST_BINARY [CHAPTER]}
ch=${2:-}
mpirun_cmd=${MPIRUN:-mpirun --oversubscribe}
[ "$(id -u)" = 0 ] && [[ "$mpirun_cmd" != *allow-run-as-root* ]] && mpirun_cmd+=" --allow-run-as-root"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1

if [ -n "$ch" ] && ! [[ "$ch" =~ ^[0-9][0-9]$ ]]; then
    echo "run_tests: CH=$ch must be a two-digit chapter number such as 01 or 04" >&2
    exit 2
fi
suites=$(OMPI_MCA_plm=isolated "$bin" --list-test-suites --no-colors 2>/dev/null | grep -E '^ch[0-9]{2} np[0-9]+$' | sort -u)
[ -n "$ch" ] && suites=$(grep -E "^ch$ch " <<<"$suites")
if [ -z "$suites" ]; then
    echo "run_tests: no test suites${ch:+ for chapter $ch} in $bin" >&2
    exit 1
fi
sizes=$(sed -E 's/.* np([0-9]+)$/\1/' <<<"$suites" | sort -n -u)
if [ "${MPI:-1}" = 0 ]; then
    [ "$sizes" != 1 ] && echo "run_tests: MPI=0 build: only the 1-rank suites run; multi-rank suites are not counted"
    sizes=1
fi

start=$(date +%s)
tp=0 tf=0 ts=0 bad=0
# adds the "N passed, N failed, N skipped" line of log $3 to the totals; $1 names the run, $2 is its status
count() {
    local line p f s
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed, [0-9]+ skipped$' "$3" | tail -n 1)
    if [ -z "$line" ]; then
        echo "run_tests: $1 exited with status $2 and printed no summary" >&2
        bad=1
        return
    fi
    read -r p _ f _ s _ <<<"${line//,/}"
    tp=$((tp + p)) tf=$((tf + f)) ts=$((ts + s))
    [ "$2" != 0 ] && [ "$f" = 0 ] && { echo "run_tests: $1 exited with status $2" >&2; bad=1; }
}
for k in $sizes; do
    filter=$(grep -E " np$k\$" <<<"$suites" | paste -sd, -)
    echo "=== $k rank(s): $filter"
    if [ "${MPI:-1}" = 0 ]; then cmd=("$bin"); else cmd=($mpirun_cmd -np "$k" "$bin"); fi
    log=$(mktemp)
    timeout 900 "${cmd[@]}" --no-colors -ts="$filter" 2>&1 | tee "$log"
    count "the $k-rank run" "${PIPESTATUS[0]}" "$log"
    rm -f "$log"
done
# chapter 02's failing-rank test is a script (it starts its own 4-rank job): tests/02_data_parallel/abort_test.sh
if [ -z "$ch" ] || [ "$ch" = 02 ]; then
    echo "=== abort test: tests/02_data_parallel/abort_test.sh"
    log=$(mktemp)
    MPIRUN="$mpirun_cmd" bash "$(dirname "$0")/../tests/02_data_parallel/abort_test.sh" "$(dirname "$bin")" 2>&1 | tee "$log"
    count "tests/02_data_parallel/abort_test.sh" "${PIPESTATUS[0]}" "$log"
    rm -f "$log"
fi
echo "tests took $(( $(date +%s) - start )) s"
echo "total: $tp passed, $tf failed, $ts skipped"
[ "$tf" = 0 ] && [ "$bad" = 0 ]
