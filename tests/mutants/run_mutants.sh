#!/usr/bin/env bash
# run_mutants.sh — the mutation harness: every known-wrong variant of the concept code in the catalogue
# must make its chapter's tests fail. The instructor's guarantee that the grader fails wrong solutions.
#
#   make mutants              every catalogue file tests/mutants/NN_*.txt (builds everything first)
#   make mutants CH=03        chapter 03's catalogue only
#   MUTANTS=rope-sign,no-prefetch make mutants      only these ids
#
# A catalogue file tests/mutants/NN_name.txt lists the variants that `make test CH=NN` must kill (the format
# is in tests/mutants/README.md). For each variant, one at a time, in ONE scratch copy of the working tree
# and of the build folder (timestamps kept, so only the edited file recompiles):
#   1. apply its edits (each text to replace must occur exactly once in its file);
#   2. if it names a `first:` run (a binary, a suite and a test-case filter), build that binary and run it:
#      a failure kills the variant in seconds;
#   3. otherwise, or if that run passed, `make test CH=NN` with PENTA_TEST_FAIL_FAST=1 (the runner stops at
#      the first failure): a failure kills it, a pass means it SURVIVED;
#   4. put the edited files back and every build file it changed (from the real build folder, timestamps
#      and all), so the next variant starts from the pristine tree.
# PyTorch is hidden (PENTA_NO_TORCH=1: tests/01_single_gpu/test_reference.cpp skips), so chapter 01's stored
# golden values must do the work. Before any variant, every `first:` run must pass on the pristine tree
# (else it would "kill" everything); a variant killed only by the full run counts once the pristine
# `make test CH=NN` is seen to pass (run once per chapter, when first needed).
# Verdicts: KILLED (with the first error line of the run that failed), SURVIVED, BROKEN (an edit that does
# not apply, or a variant that does not compile: the catalogue is wrong). Exits 0 only when every variant
# was killed; prints "N passed, N failed, 0 skipped" (killed = passed) like the test binaries.
# Environment: MUTANTS_DIR (the catalogue folder, default tests/mutants), MUTANTS (ids to run), BUILD, CUDA,
# MPI, DEBUG, ARCH (the build options, as the Makefile passes them), MPIRUN, PENTA_MUTANT_TIMEOUT (seconds
# per test run, default 600). Its own test: tests/tooling/mutants_test.sh.
set -uo pipefail
shopt -u patsub_replacement 2>/dev/null  # a '&' in a replacement is a '&' (bash 5.2 would insert the match)
src=$(cd "$(dirname "$0")/../.." && pwd)
cd "$src" || exit 1
catalogue=${MUTANTS_DIR:-tests/mutants}
build=${BUILD:-build}
[[ "$build" = /* ]] || build=$src/$build
limit=${PENTA_MUTANT_TIMEOUT:-600}
only_ch=${1:-}
mpirun_cmd=${MPIRUN:-mpirun --oversubscribe}
[ "$(id -u)" = 0 ] && [[ "$mpirun_cmd" != *allow-run-as-root* ]] && mpirun_cmd+=" --allow-run-as-root"
export PENTA_NO_TORCH=1 OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MPIRUN=$mpirun_cmd

die() { echo "mutants: $*" >&2; exit 2; }
[ -d "$build" ] || die "no build folder $build: run make first (make mutants does)"

# ---- the catalogue -------------------------------------------------------------------------------------
# m_id, m_ch (the chapter whose tests must kill it), m_desc, m_first ("" or "BINARY SUITE FILTER"), m_edits
# (records "file<US>search<US>replace" separated by <RS>), m_where (file:line of its header)
m_id=() m_ch=() m_desc=() m_first=() m_edits=() m_where=()
US=$'\x1f' RS=$'\x1e'
parse() {  # parse FILE CH
    local f=$1 ch=$2 n=0 line cur=-1 file="" minus="" plus="" have_minus=0 have_plus=0
    flush() {
        if [ "$have_minus" = 1 ]; then
            [ -n "$file" ] || die "$f:$n: an edit before any 'file:' line"
            [ -n "$minus" ] || die "$f:$n: the text to replace is empty"
            m_edits[$cur]+="$file$US$minus$US$plus$RS"
        elif [ "$have_plus" = 1 ]; then
            die "$f:$n: '+' lines without the '-' lines they replace"
        fi
        minus="" plus="" have_minus=0 have_plus=0
    }
    while IFS= read -r line || [ -n "$line" ]; do
        n=$((n + 1))
        case $line in
            "## "*)
                flush
                cur=${#m_id[@]} file=""
                local head=${line#\#\# }
                m_id+=("${head%%:*}") m_ch+=("$ch") m_desc+=("$(sed 's/^ *//' <<<"${head#*:}")") m_first+=("")
                m_edits+=("") m_where+=("$f:$n")
                [[ "${head%%:*}" =~ ^[a-z0-9][a-z0-9-]*$ ]] ||
                    die "$f:$n: the id '${head%%:*}' must be lower-case letters, digits and '-'"
                ;;
            "first: "*) [ "$cur" -ge 0 ] || die "$f:$n: 'first:' outside a variant"; m_first[$cur]=${line#first: } ;;
            "exercise: "*)  # the workshop exercise whose region it edits: for tools/exercises.py (check, sweep)
                [ "$cur" -ge 0 ] || die "$f:$n: 'exercise:' outside a variant"
                [[ "${line#exercise: }" =~ ^[0-9][0-9]\.[0-9]+$ ]] || die "$f:$n: 'exercise: NN.k' names an exercise: $line"
                ;;
            "file: "*)
                [ "$cur" -ge 0 ] || die "$f:$n: 'file:' outside a variant"
                flush
                file=${line#file: }
                [ -f "$file" ] || die "$f:$n: no file $file"
                ;;
            "-"*)
                [ "$cur" -ge 0 ] || die "$f:$n: an edit outside a variant"
                [ "$have_plus" = 1 ] && flush
                if [ "$have_minus" = 1 ]; then minus+=$'\n'"${line:1}"; else minus=${line:1}; fi
                have_minus=1
                ;;
            "+"*)
                [ "$have_minus" = 1 ] || die "$f:$n: a '+' line without the '-' lines it replaces"
                if [ "$have_plus" = 1 ]; then plus+=$'\n'"${line:1}"; else plus=${line:1}; fi
                have_plus=1
                ;;
            "" | "#"*) flush ;;
            *) die "$f:$n: not understood (a line is '## id: what is wrong', 'first: ...', 'exercise: NN.k', 'file: ...', '-old'," \
                   "'+new', '#...' or empty): $line" ;;
        esac
    done <"$f"
    flush
}
shopt -s nullglob
files=("$catalogue"/[0-9][0-9]_*.txt)
[ ${#files[@]} -gt 0 ] || die "no catalogue files $catalogue/NN_*.txt"
for f in "${files[@]}"; do
    ch=$(basename "$f"); ch=${ch:0:2}
    [ -n "$only_ch" ] && [ "$ch" != "$only_ch" ] && continue
    parse "$f" "$ch"
done
[ ${#m_id[@]} -gt 0 ] || die "no variants for chapter ${only_ch:-any} in $catalogue"
declare -A seen
for i in "${!m_id[@]}"; do
    [ -n "${seen[${m_id[$i]}]:-}" ] && die "${m_where[$i]}: id ${m_id[$i]} is used twice (also ${seen[${m_id[$i]}]})"
    seen[${m_id[$i]}]=${m_where[$i]}
    [ -n "${m_edits[$i]}" ] || die "${m_where[$i]}: variant ${m_id[$i]} has no edit"
done
selected=()
for i in "${!m_id[@]}"; do
    if [ -n "${MUTANTS:-}" ] && [[ ",$MUTANTS," != *",${m_id[$i]},"* ]]; then continue; fi
    selected+=("$i")
done
[ ${#selected[@]} -gt 0 ] || die "MUTANTS=${MUTANTS:-} names no variant of the catalogue"

# ---- the scratch copy ----------------------------------------------------------------------------------
t0=$SECONDS
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
git ls-files -co --exclude-standard -z | while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
    xargs -0 -r cp -a --parents -t "$tmp"
cp -a "$build" "$tmp/build"
echo "mutants: ${#selected[@]} variant(s); scratch copy $tmp made in $((SECONDS - t0)) s" \
     "(load average $(cut -d' ' -f1-3 /proc/loadavg))"
unset MAKEFLAGS MFLAGS MAKELEVEL  # the outer make's flags are not the inner makes' business
opts=(-C "$tmp" -j"$(getconf _NPROCESSORS_ONLN)" BUILD=build)  # (nproc would honour OMP_NUM_THREADS=1)
for v in CUDA MPI DEBUG ARCH; do [ -n "${!v:-}" ] && opts+=("$v=${!v}"); done

log=$tmp/.log
# first_run "BINARY SUITE FILTER": runs it in the scratch copy; 0 when it passed at least one test and
# failed none. Its output is in $log.
first_run() {
    local spec=$1 bin suite filter k
    read -r bin s1 s2 filter <<<"$spec"
    suite="$s1 $s2"
    k=${s2#np}
    [[ "$bin" =~ ^tests_[0-9][0-9]$ && "$s1" =~ ^ch[0-9][0-9]$ && "$k" =~ ^[0-9]+$ && -n "$filter" ]] ||
        die "'first: $spec' must be 'tests_NN chNN npK FILTER'"
    [[ "$filter" != *,* ]] || die "'first: $spec': doctest splits a filter at commas; use * instead of a comma"
    local cmd=("$tmp/build/bin/$bin")
    [ "${MPI:-1}" = 0 ] || cmd=($mpirun_cmd -np "$k" "${cmd[@]}")
    timeout -k 10 "$limit" "${cmd[@]}" --no-colors -ts="$suite" -tc="$filter" >"$log" 2>&1 </dev/null
    local rc=$?
    [ "$rc" = 0 ] && grep -qE '^[1-9][0-9]* passed, 0 failed, [0-9]+ skipped$' "$log"
}
first_usable() {  # a first: run this build can make (MPI=0 runs only 1-rank suites)
    [ -n "$1" ] && { [ "${MPI:-1}" != 0 ] || [[ "$1" == *" np1 "* ]]; }
}
first_error() {  # what failed first in $log: doctest's file:line and what it logged, or an error line
    awk '/ ERROR: |: FATAL ERROR/ && !loc { loc = $0; sub(/: (FATAL )?ERROR.*/, "", loc); err = $0; next }
         loc && (/^=+$/ || /^$/ || / ERROR: /) { if (msg) stop = 1; else if (!/^$/) stop = 1 }
         loc && !stop && /^  logged: / { sub(/^  logged: /, ""); msg = msg (msg ? " | " : "") $0; next }
         loc && !stop && msg && /^          / { sub(/^ +/, ""); msg = msg " | " $0 }
         stop { exit }
         END { if (loc) print (msg ? loc ": " msg : err) }' "$log" | cut -c1-300
    grep -q -E ' ERROR: |: FATAL ERROR' "$log" ||
        grep -E 'FAILED:|error:|Error|hung|signal|^[0-9]+ passed, [0-9]+ failed' "$log" | head -n 1 |
        sed -E 's/^[[:space:]]+//' | cut -c1-300
}

# every first: run must pass on the pristine tree
declare -A first_ok
for i in "${selected[@]}"; do
    spec=${m_first[$i]}
    first_usable "$spec" || continue
    [ -n "${first_ok[$spec]:-}" ] && continue
    bin=${spec%% *}
    # a kill must come from the tests that grade the chapter: its own binary or common/'s
    [ "$bin" = tests_00 ] || [ "$bin" = "tests_${m_ch[$i]}" ] ||
        die "${m_where[$i]}: 'first: $spec' is not a test of make test CH=${m_ch[$i]} (tests_00 or tests_${m_ch[$i]})"
    make "${opts[@]}" "build/bin/$bin" >"$log" 2>&1 || die "building $bin in the scratch copy failed: $(tail -n 5 "$log")"
    first_run "$spec" ||
        die "'first: $spec' (${m_where[$i]}) does not pass on the pristine tree, so it proves nothing: $(first_error)"
    first_ok[$spec]=1
done

# ---- one variant at a time -------------------------------------------------------------------------------
declare -A pristine_ok pristine_failed  # chapter -> 0/1: make test CH=NN passes without any variant; its FAILED lines
killed=0 survived=0 broken=0
report=()
restore() {  # restore FILES...: the edited files and every build file changed since $tmp/.marker
    local f rel
    for f in "$@"; do cp -a "$src/$f" "$tmp/$f"; done
    while IFS= read -r -d '' f; do
        rel=${f#"$tmp"/build/}
        if [ -e "$build/$rel" ]; then cp -a "$build/$rel" "$f"; else rm -f "$f"; fi
    done < <(find "$tmp/build" -newer "$tmp/.marker" -type f -print0)
}
full_run() {  # full_run CH: make test CH=NN in the scratch copy; 0 = passed. Output in $log.
    PENTA_TEST_FAIL_FAST=1 PENTA_TEST_TIMEOUT=$limit make "${opts[@]}" test CH="$1" >"$log" 2>&1 </dev/null
}
for i in "${selected[@]}"; do
    id=${m_id[$i]} ch=${m_ch[$i]}
    name="$ch/$id"
    t=$SECONDS
    touch "$tmp/.marker"
    edited=() verdict="" why="" need_pristine=0
    IFS=$RS read -r -d '' -a recs <<<"${m_edits[$i]}"
    for rec in "${recs[@]}"; do
        [ "$rec" = $'\n' ] || [ -z "$rec" ] && continue
        IFS=$US read -r -d '' file search replace <<<"$rec"
        replace=${replace%$'\n'}  # read -d '' keeps the here-string's newline
        content=$(cat "$tmp/$file"; printf x)
        content=${content%x}
        rest=${content//"$search"/}
        count=$(((${#content} - ${#rest}) / ${#search}))
        if [ "$count" != 1 ]; then
            verdict=BROKEN why="the text to replace occurs $count times in $file (it must occur once): $(head -n 1 <<<"$search")"
            break
        fi
        printf '%s' "${content/"$search"/"$replace"}" >"$tmp/$file"
        [[ " ${edited[*]} " == *" $file "* ]] || edited+=("$file")
    done
    if [ -z "$verdict" ] && first_usable "${m_first[$i]}"; then
        bin=${m_first[$i]%% *}
        if ! make "${opts[@]}" "build/bin/$bin" >"$log" 2>&1; then
            verdict=BROKEN why="does not build: $(grep -m 1 -E 'error' "$log" | cut -c1-200)"
        elif ! first_run "${m_first[$i]}"; then
            verdict=KILLED why="by first: ${m_first[$i]}: $(first_error)"
        fi
    fi
    if [ -z "$verdict" ]; then
        if full_run "$ch"; then
            verdict=SURVIVED why="make test CH=$ch passes with it (PyTorch hidden)"
        elif ! grep -q '^total: ' "$log"; then
            verdict=BROKEN why="make test CH=$ch did not get to run the tests: $(grep -m 1 -E 'error' "$log" | cut -c1-200)"
        else
            verdict=KILLED why="by make test CH=$ch: $(grep -m 1 '^FAILED: ' "$log") $(first_error)"
            need_pristine=1
        fi
    fi
    restore "${edited[@]}"
    if [ "$verdict" = KILLED ] && [ "$need_pristine" = 1 ]; then
        if [ -z "${pristine_ok[$ch]:-}" ]; then
            echo "mutants: checking that make test CH=$ch passes without any variant"
            touch "$tmp/.marker"
            if full_run "$ch"; then pristine_ok[$ch]=1; else pristine_ok[$ch]=0; fi
            pristine_failed[$ch]=$(grep '^FAILED: ' "$log" | paste -sd';' - | cut -c1-300)
            restore
        fi
        [ "${pristine_ok[$ch]}" = 1 ] ||
            verdict=BROKEN why="make test CH=$ch fails without any variant too (${pristine_failed[$ch]}): a kill proves nothing"
    fi
    case $verdict in
        KILLED) killed=$((killed + 1)) ;;
        SURVIVED) survived=$((survived + 1)) ;;
        *) broken=$((broken + 1)) ;;
    esac
    line=$(printf '%-8s %-28s %4d s  %s — %s' "$verdict" "$name" $((SECONDS - t)) "${m_desc[$i]}" "$why")
    echo "mutants: $line"
    report+=("$line")
done

echo "mutants: the catalogue ($catalogue) against the tests, PyTorch hidden, $((SECONDS - t0)) s:"
printf '  %s\n' "${report[@]}"
[ "$survived" = 0 ] ||
    echo "mutants: SURVIVED means the tests cannot tell that variant from the right code: add a test that fails on it"
[ "$broken" = 0 ] || echo "mutants: BROKEN means the catalogue entry no longer applies or builds: update it"
echo "mutants: $killed killed, $survived survived, $broken broken, of ${#selected[@]}"
echo "$killed passed, $((survived + broken)) failed, 0 skipped"
[ "$survived" = 0 ] && [ "$broken" = 0 ]
