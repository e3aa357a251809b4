#!/usr/bin/env bash
# run_tests.sh — runs test binaries and test scripts, each under a time limit, and prints one total line.
#
#   bash scripts/run_tests.sh build/bin/tests_00 build/bin/tests_02 tests/02_data_parallel/abort_test.sh
#
# (`make test` passes its list: see the Makefile.) A test binary (build/bin/tests_NN, one per chapter) holds
# doctest suites named "chNN npK": chapter NN, run on K ranks. Its suites are grouped by world size and each
# world size runs once, under `mpirun -np K` (MPI=0: the binary alone, and only the 1-rank suites). The
# binary reduces each test's outcome over its ranks and prints "N passed, N failed, N skipped". An argument
# ending in .sh is a test script: run with bash, it prints the same line.
#
# Every run gets PENTA_TEST_TIMEOUT seconds (default 900). A run that does not report its own failure —
# it crashed (killed by a signal, or a non-zero exit with no failed test), hung past the limit, or printed
# no summary — counts as ONE failed test, so a crash or a hang can never end in "0 failed". The closing
# lines name every run that failed ("FAILED: tests_05, 4-rank run: exited by signal 11 (SEGV)"), then
# "total: N passed, N failed, N skipped"; the exit status is 0 only when nothing failed. Above it, a note counts
# the tests skipped for want of PyTorch, transformers or tokenizers: the suite passes without them, but the
# comparisons with PyTorch have not run.
# Environment: MPIRUN (from the Makefile: as root --allow-run-as-root; --oversubscribe), MPI=0|1,
# PENTA_TEST_TIMEOUT, PENTA_TEST_CASES (a doctest -tc filter added to every binary's runs: gpu_check.sh
# runs '[gpu]*'); scripts also see BIN (the Makefile's folder of programs and test binaries).
# PENTA_TEST_FAIL_FAST=1 stops after the first run that failed and names the runs left out (the mutation
# harness, tests/mutants/, wants only to know whether anything fails).
# The runner's own test: tests/tooling/runner_test.sh.
set -uo pipefail
if [ $# = 0 ]; then
    echo "usage: run_tests.sh TEST_BINARY|TEST_SCRIPT.sh ..." >&2
    exit 2
fi
mpirun_cmd=${MPIRUN:-mpirun --oversubscribe}
[ "$(id -u)" = 0 ] && [[ "$mpirun_cmd" != *allow-run-as-root* ]] && mpirun_cmd+=" --allow-run-as-root"
export MPIRUN=$mpirun_cmd OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
limit=${PENTA_TEST_TIMEOUT:-900}
if ! [[ "$limit" =~ ^[1-9][0-9]*$ ]]; then
    echo "run_tests: PENTA_TEST_TIMEOUT=$limit must be a whole number of seconds" >&2
    exit 2
fi

start=$SECONDS
tp=0 tf=0 ts=0
py_skips=0      # skipped for want of PyTorch, transformers or tokenizers (see count)
failed_runs=()  # "name: why", printed at the end

# one failed entry for a run that could not count its own failure
fail_run() {
    tf=$((tf + 1))
    failed_runs+=("$1: $2")
    echo "run_tests: FAILED: $1: $2"
}

# why a run whose exit status is $1 ended badly, after $2 seconds; log $3 (mpirun names a rank's signal)
why() {
    local rc=$1 took=$2 log=$3 rank
    if [ "$rc" = 124 ] || { [ "$rc" = 137 ] && [ "$took" -ge "$limit" ]; }; then
        echo "hung: killed at the ${limit} s limit (PENTA_TEST_TIMEOUT)"
    elif [ "$rc" -gt 128 ]; then
        rank=$(grep -oE 'process rank [0-9]+ .* exited on signal [0-9]+( \([^)]*\))?' "$log" | head -n 1 |
            sed -E 's/process (rank [0-9]+) .* exited on (signal .*)/, \1 exited on \2/')
        echo "exited by signal $((rc - 128)) ($(kill -l $((rc - 128)) 2>/dev/null || echo '?'))$rank"
    else
        echo "exited with status $rc"
    fi
}

# adds the "N passed, N failed, N skipped" line of log $4 to the totals; $1 names the run, $2 is its exit
# status, $3 how many seconds it took
count() {
    local name=$1 rc=$2 took=$3 log=$4 line p f s n
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed, [0-9]+ skipped$' "$log" | tail -n 1)
    if [ -z "$line" ]; then
        fail_run "$name" "$(why "$rc" "$took" "$log"), no summary printed"
        return
    fi
    read -r p _ f _ s _ <<<"${line//,/}"
    tp=$((tp + p)) tf=$((tf + f)) ts=$((ts + s))
    # the skips a Python package would turn into checks ("skipped: <test>: <why>" from a binary, "<name>:
    # skipped (<why>)" from a script): counted apart, since without them the suite still passes while the
    # comparisons with PyTorch and transformers, which catch a wrong model, never ran. Only unindented lines,
    # and at most the run's own skip count: a tooling test may echo an inner run's output, indented
    n=$(grep -ciE '^(skipped: |[^[:space:]].*: skipped \().*(torch|transformers|tokenizers)' "$log")
    py_skips=$((py_skips + (${n:-0} < s ? ${n:-0} : s)))
    [ "$f" != 0 ] && failed_runs+=("$name: $f failed")
    # a failing test exits 1; a signal, a hang, or a failure status with nothing failed is a crash
    if [ "$rc" -gt 128 ] || { [ "$rc" != 0 ] && [ "$f" = 0 ]; }; then
        fail_run "$name" "$(why "$rc" "$took" "$log") after its summary"
    fi
}

# runs "$@" under the time limit as the run named $1, its output shown and counted
run_counted() {
    local name=$1 log t0 rc
    shift
    log=$(mktemp)
    t0=$SECONDS
    timeout -k 10 "$limit" "$@" </dev/null 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    count "$name" "$rc" $((SECONDS - t0)) "$log"
    rm -f "$log"
}

# a doctest binary: one run per world size K over its "chNN npK" suites
run_binary() {
    local bin=$1 name suites sizes k filter cmd rc
    name=$(basename "$bin")
    if [ ! -x "$bin" ]; then
        fail_run "$name" "$bin is not an executable file"
        return
    fi
    suites=$(OMPI_MCA_plm=isolated timeout -k 10 "$limit" "$bin" --list-test-suites --no-colors </dev/null 2>/dev/null)
    rc=$?
    suites=$(grep -E '^ch[0-9]{2} np[0-9]+$' <<<"$suites" | sort -u)
    if [ "$rc" != 0 ]; then
        fail_run "$name" "--list-test-suites: $(why "$rc" 0 /dev/null)"
        return
    elif [ -z "$suites" ]; then
        fail_run "$name" "--list-test-suites lists no suites named \"chNN npK\""
        return
    fi
    sizes=$(sed -E 's/.* np([0-9]+)$/\1/' <<<"$suites" | sort -n -u)
    if [ "${MPI:-1}" = 0 ]; then
        if ! grep -qx 1 <<<"$sizes"; then
            echo "=== $name: MPI=0 build: no 1-rank suites; its multi-rank suites are not run, nor counted"
            return
        fi
        [ "$sizes" != 1 ] && echo "=== $name: MPI=0 build: only the 1-rank suites run; multi-rank suites are not counted"
        sizes=1
    fi
    for k in $sizes; do
        if [ "${PENTA_TEST_FAIL_FAST:-0}" = 1 ] && [ "$tf" != 0 ]; then
            echo "run_tests: PENTA_TEST_FAIL_FAST=1: stopped at the first failure; not run: $name's $k-rank suites"
            return
        fi
        filter=$(grep -E " np$k\$" <<<"$suites" | paste -sd, -)
        echo "=== $name, $k rank(s): $filter"
        if [ "${MPI:-1}" = 0 ]; then cmd=("$bin"); else cmd=($mpirun_cmd -np "$k" "$bin"); fi
        [ -n "${PENTA_TEST_CASES:-}" ] && cmd+=(-tc="$PENTA_TEST_CASES")
        run_counted "$name, $k-rank run" "${cmd[@]}" --no-colors -ts="$filter"
    done
}

items=("$@")
for i in "${!items[@]}"; do
    item=${items[$i]}
    if [ "${PENTA_TEST_FAIL_FAST:-0}" = 1 ] && [ "$tf" != 0 ]; then
        echo "run_tests: PENTA_TEST_FAIL_FAST=1: stopped at the first failure; not run: ${items[*]:$i}"
        break
    fi
    case $item in
        *.sh)
            echo "=== $item"
            run_counted "$item" bash "$item"
            ;;
        *) run_binary "$item" ;;
    esac
done
echo "tests took $((SECONDS - start)) s"
for r in "${failed_runs[@]}"; do echo "FAILED: $r"; done
[ "$py_skips" != 0 ] && echo "note: $py_skips of the skipped tests need PyTorch, transformers or tokenizers (missing," \
    "or hidden by PENTA_NO_TORCH=1): the comparisons with PyTorch did not run (PENTA_TORCH=1 bash scripts/install_deps.sh" \
    "installs them; CI runs them)"
echo "total: $tp passed, $tf failed, $ts skipped"
[ "$tf" = 0 ]
