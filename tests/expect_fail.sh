#!/usr/bin/env bash
# expect_fail.sh — the harness of the failure tests (*_test.sh scripts that run programs which must fail):
# sourced, not run. A failing run passes when it fails CLEANLY: a non-zero exit status that is not a signal
# (> 128: a crash, or mpirun reporting one) and not the time limit (124), within that limit, with an
# expected text in its output (stdout and stderr together) — the flag, file, rank or tensor it must name;
# "TEXT && TEXT" asks for each of them.
#
#   source "$(dirname "$0")/../expect_fail.sh"       # sets BIN, MPIRUN, TMP (removed on exit)
#   expect_fail "a label" 10 "expected text" "$BIN/01_single_gpu" --seq 1
#   expect_table 10 "$BIN/01_single_gpu" <<'EOF'     # one run per row: ARGS | EXPECTED TEXT
#   --seq 1                | --seq 1 must be >= 2
#   --data text:$TMP       | is a directory
#   EOF
#   expect_ok "the same without the fault" 30 "" "$BIN/01_single_gpu" --steps 2   # a control run: exit 0
#   expect_skip "a label" "why it cannot run here"     # counted as skipped, never as passed
#   expect_summary                                     # "N passed, N failed, N skipped"; the exit status
#   expect_needs_mpi "bad inputs test (chapter 03)"    # a multi-rank script in an MPI=0 build: skipped
#
# In a table, ARGS are split into words by the shell with $TMP and $BIN expanded (so quote nothing but
# with '...'), and $TMP and $BIN in EXPECTED are replaced by their values; blank lines and lines starting
# with # are skipped. Each row prints one PASS or FAIL line;
# a FAIL shows the last lines of the output. Environment: BIN (the Makefile's folder of programs, default
# build/bin), MPIRUN (as make sets it: as root --allow-run-as-root; --oversubscribe).
BIN=${BIN:-build/bin}
MPIRUN=${MPIRUN:-mpirun --oversubscribe}
[ "$(id -u)" = 0 ] && [[ "$MPIRUN" != *allow-run-as-root* ]] && MPIRUN+=" --allow-run-as-root"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
expect_passed=0 expect_failed=0 expect_skipped=0
expect_name=$(basename "$0" .sh)

# expect_needs_mpi WHAT: an MPI=0 build has no job of several ranks: say so, count one skip, exit
expect_needs_mpi() {
    [ "${MPI:-1}" != 0 ] && return
    echo "$1: skipped (MPI=0 build: no job of several ranks)"
    echo "0 passed, 0 failed, 1 skipped"
    exit 0
}

# expect_missing OUTPUT EXPECTED: the first part of "TEXT && TEXT ..." not in OUTPUT, as a reason; nothing
# when every part is there
expect_missing() {
    local part
    while IFS= read -r part; do
        part=$(sed -E 's/^[[:space:]]+//; s/[[:space:]]+$//' <<<"$part")
        [ -n "$part" ] && ! grep -qF -- "$part" <<<"$1" && { echo "no '$part' in the output"; return; }
    done < <(sed 's/ && /\n/g' <<<"$2")
}

# expect_verdict LABEL WHY DETAIL OUTPUT: PASS when WHY is empty, else FAIL with OUTPUT's last lines; counted
expect_verdict() {
    if [ -z "$2" ]; then
        expect_passed=$((expect_passed + 1))
        echo "$expect_name: PASS: $1 ($3)"
    else
        expect_failed=$((expect_failed + 1))
        echo "$expect_name: FAIL: $1: $2 ($3); last lines:"
        tail -n 8 <<<"$4" | sed 's/^/    /'
    fi
}

# expect_fail LABEL LIMIT_S EXPECTED COMMAND...
expect_fail() {
    local label=$1 limit=$2 want=$3 out rc t0 ms why=""
    shift 3
    t0=$(date +%s%N)
    out=$(timeout -k 5 "$limit" "$@" </dev/null 2>&1)
    rc=$?
    ms=$((($(date +%s%N) - t0) / 1000000))
    if [ "$rc" = 0 ]; then why="exited 0"
    elif [ "$rc" = 124 ] || [ "$rc" = 137 ]; then why="hung: killed at the ${limit} s limit"
    elif [ "$rc" -gt 128 ]; then why="killed by signal $((rc - 128)) ($(kill -l $((rc - 128)) 2>/dev/null))"
    elif grep -qE 'exited on signal|Segmentation fault|core dumped' <<<"$out"; then why="a rank crashed"
    else why=$(expect_missing "$out" "$want")
    fi
    expect_verdict "$label" "$why" "$(printf 'exit %d, %d.%d s' "$rc" $((ms / 1000)) $((ms % 1000 / 100)))" "$out"
}

# expect_ok LABEL LIMIT_S EXPECTED COMMAND...: a control run, which must exit 0 within the limit and print
# EXPECTED ("" for nothing in particular; "TEXT && TEXT" as above)
expect_ok() {
    local label=$1 limit=$2 want=$3 out rc why=""
    shift 3
    out=$(timeout -k 5 "$limit" "$@" </dev/null 2>&1)
    rc=$?
    if [ "$rc" != 0 ]; then why="exit $rc"; else why=$(expect_missing "$out" "$want"); fi
    expect_verdict "$label" "$why" "exit $rc" "$out"
}

# expect_table LIMIT_S COMMAND... <<TABLE: one expect_fail per row "ARGS | EXPECTED", ARGS appended to COMMAND.
# EXPECT_JOBS rows (default 4) run at once: most of a failing run's time is start-up (MPI_Init), not work.
# Their verdicts are printed in table order.
expect_table() {
    local limit=$1 line args want n=0 i words
    shift
    local pids=()
    while IFS= read -r line; do
        [[ "$line" =~ ^[[:space:]]*(#|$) ]] && continue
        args=${line%%|*} want=${line#*|}
        args=$(sed -E 's/[[:space:]]+$//' <<<"$args") want=$(sed -E 's/^[[:space:]]+//; s/[[:space:]]+$//' <<<"$want")
        want=${want//\$TMP/$TMP} want=${want//\$BIN/$BIN}
        eval "words=($args)"
        (expect_fail "$(basename "${@: -1}") $args" "$limit" "$want" "$@" "${words[@]}") >"$TMP/.row$n" &
        pids+=($!)
        n=$((n + 1))
        if [ "${#pids[@]}" -ge "${EXPECT_JOBS:-4}" ]; then
            wait "${pids[0]}"
            pids=("${pids[@]:1}")
        fi
    done
    wait
    for ((i = 0; i < n; i++)); do
        cat "$TMP/.row$i"
        if grep -q "^$expect_name: PASS: " "$TMP/.row$i"; then expect_passed=$((expect_passed + 1))
        else expect_failed=$((expect_failed + 1)); fi
        rm -f "$TMP/.row$i"
    done
}

# expect_skip LABEL WHY: a check this machine cannot make (no PyTorch): said, and counted as skipped
expect_skip() {
    expect_skipped=$((expect_skipped + 1))
    echo "$expect_name: SKIP: $1 ($2)"
}

expect_summary() {
    echo "$expect_passed passed, $expect_failed failed, $expect_skipped skipped"
    [ "$expect_failed" = 0 ]
}
