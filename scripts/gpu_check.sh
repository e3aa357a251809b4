#!/usr/bin/env bash
# gpu_check.sh OUTDIR — one validation run on a machine with an NVIDIA GPU, within a whole-run deadline
# (GPU_CHECK_DEADLINE, default and at most 540 s: a device run may last 600 s). Written for a bare GPU machine
# (the CUDA toolkit, a driver, python3 with PyTorch; maybe no OpenMPI, OpenBLAS, doctest, nlohmann-json or
# apt, and no network). The steps, in order, each under its own limit and never past the deadline:
#   1. setup: a GPU (nvidia-smi) and nvcc, else it stops at once, exit 2, saying which; the environment of
#      scripts/gpu_env.sh: .deps/runtime.tar.gz unpacked (scripts/fetch_runtime.sh makes it), NCCL and cuBLAS
#      found (the toolkit, the system or PyTorch's wheels), and the MPI probe: a tiny MPI program alone and on
#      2 ranks. When MPI cannot start (a FAIL), it builds MPI=0 and the multi-rank checks are NOT-RUN;
#   2. build: make -k (every target that can be built is), CUDA for this GPU's architecture, in build-gpu;
#      the targets that failed are listed;
#   3. gpu_tests: every test case tagged "[gpu]" of every test binary (doctest -tc='[gpu]*': chapter 10's
#      kernels too; tests/testing.hpp says how a test is tagged), on every world size its suites name; each
#      must pass, none may skip, and as many must run as the binaries list;
#   4. sanitizers (in the background, beside steps 3 and 5): compute-sanitizer's memcheck over the GPU tests
#      of tests_00, 01, 10, 11 and the one-rank NCCL test, racecheck and synccheck over tests_00's kernels,
#      with --report-api-errors no: the code's own polls (cudaErrorNotReady from event and NCCL queries) and
#      NCCL's driver probes are API errors by design; a failing API call the code cares about fails its test;
#   5. chapters 01-08 and 11 on the GPU, each beside the same command on the CPU (run at the same time; losses
#      and grad norms per step within a tolerance), every run with --comm-timeout so a hang reports itself;
#   6. gpu_bench: scripts/gpu_bench.sh as information (INFO lines with figures, no verdict), only when at
#      least 120 s are left.
# Verdict: PASS when every check that ran passed and the required ones (build, gpu_tests, a memcheck,
# chapters 01-06) ran; NOT-RUN (the deadline, no second rank) is not a failure. OUTDIR always holds exactly
# summary.txt (each check's verdict, figures, times) and logs.tar.gz (every log), re-packed after every step,
# so a run killed at any point leaves both.
#   bash scripts/fetch_runtime.sh                here, once (Debian + apt): .deps/runtime.tar.gz
#   bash scripts/gpu_check.sh "$OUT"             there, with .deps/runtime.tar.gz and .deps/nccl.h beside it
#   bash scripts/gpu_check.sh --dry-run          the plan: steps, limits, deadline, the GPU test cases (any machine)
#   bash scripts/gpu_check.sh --verdict FILE     the verdict of a summary.txt (what the run ends with)
# Tests: tests/00_common/gpu_check_test.sh, tests/tooling/gpu_cases_test.sh, tests/tooling/runtime_rehearsal_test.sh.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
source scripts/gpu_env.sh

deadline=${GPU_CHECK_DEADLINE:-540}
if ! [[ $deadline =~ ^[1-9][0-9]*$ ]] || [ "$deadline" -gt 540 ]; then
    echo "gpu_check: GPU_CHECK_DEADLINE=$deadline must be a whole number of seconds <= 540 (a device run lasts 600 s)" >&2
    exit 2
fi
build=${GPU_CHECK_BUILD:-build-gpu}  # the build folder (another one only to rehearse the script on a built tree)
bin=$root/$build/bin
filter='[gpu]*'  # the tag of every GPU test case (tests/testing.hpp)
# the checks that must have run (a name or a name_ prefix) for a PASS
required=(build gpu_tests memcheck ch01 ch02 ch03 ch04 ch05 ch06)
# steps: name, limit (s), role; the chapters' and sanitizers' limits are per run
limit_setup=60 limit_build=240 limit_tests=200 limit_test_run=90 limit_san=150 limit_chapter=60 comm_timeout=30
bench_min=120

# ---- the verdict of a summary: its "-- VERDICT name: why" lines ---------------------------------------------
# FAIL when any check FAILED or a required check has no PASS; NOT-RUN and INFO lines never fail
verdict_of() {
    local file=$1 line v name bad=0 n=0 r missing=() passed
    passed=$(grep -E '^-- PASS ' "$file" | awk '{print $3}' | sed 's/:$//')
    while IFS= read -r line; do
        v=$(awk '{print $2}' <<<"$line")
        echo "  ${line#-- }"
        n=$((n + 1))
        [ "$v" = FAIL ] && bad=$((bad + 1))
    done < <(grep -E '^-- (PASS|FAIL|NOT-RUN|INFO) ' "$file" | sed -E 's/ \([0-9]+ s elapsed\)$//')
    for r in "${required[@]}"; do
        grep -qE "^${r}(_|$)" <<<"$passed" || missing+=("$r")
    done
    if [ "$bad" = 0 ] && [ ${#missing[@]} = 0 ]; then
        echo "gpu_check: PASS ($(grep -c '^-- PASS ' "$file") checks passed, $(grep -c '^-- NOT-RUN ' "$file") not run, none failed)"
        return 0
    fi
    echo "gpu_check: FAIL ($bad failed$([ ${#missing[@]} -gt 0 ] && echo "; required but not passed: ${missing[*]}"))"
    return 1
}
if [ "${1:-}" = --verdict ]; then
    [ -f "${2:-}" ] || { echo "usage: gpu_check.sh --verdict SUMMARY_FILE" >&2; exit 2; }
    verdict_of "$2"
    exit
fi

# ---- the chapters: name, ranks, tolerance, program and its arguments (COMM2: nccl on 2 GPUs, else mpi) --------
# every step's loss (and grad norm, at 5x the tolerance) within the tolerance, relative to the CPU's; chapter
# 11's policies through cuBLASLt beside the CPU's exact emulation (a rounding that flips on one side only moves
# a step's loss by more than fp32's 1e-3, as --tf32 does); fp8's block scales need Hopper
chapter_plan() {
    cat <<'EOF'
ch01 1 1e-3 01_single_gpu --model small
ch01_naive_recompute 1 1e-3 01_single_gpu --model small --attention naive --recompute full
ch01_tf32 1 2e-2 01_single_gpu --model small --tf32
ch02_nccl_1rank 1 1e-3 02_data_parallel --dp 1 --comm nccl
ch02_dp2_COMM2 2 1e-3 02_data_parallel --dp 2 --micro-batch 8 --comm COMM2
ch03_zero3_nccl_1rank 1 1e-3 03_zero --dp 1 --zero 3 --comm nccl
ch03_zero1_dp2_COMM2 2 1e-3 03_zero --dp 2 --zero 1 --micro-batch 8 --comm COMM2
ch03_zero2_dp2_COMM2 2 1e-3 03_zero --dp 2 --zero 2 --micro-batch 8 --comm COMM2
ch03_zero3_dp2_COMM2 2 1e-3 03_zero --dp 2 --zero 3 --micro-batch 8 --comm COMM2
ch04_tp1_nccl 1 1e-3 04_tensor_parallel --tp 1 --comm nccl
ch04_tp2_COMM2 2 1e-3 04_tensor_parallel --tp 2 --comm COMM2
ch05_tp2_sp_COMM2 2 1e-3 05_sequence_parallel --tp 2 --sp --comm COMM2
ch06_cp1_nccl 1 1e-3 06_context_parallel --cp 1 --comm nccl
ch06_cp2_COMM2 2 1e-3 06_context_parallel --cp 2 --comm COMM2
ch07_pp2_1f1b_COMM2 2 1e-3 07_pipeline_parallel --pp 2 --pp-schedule 1f1b --comm COMM2
ch08_moe_nccl_1rank 1 1e-3 08_expert_parallel --ep 1 --comm nccl
ch08_ep2_COMM2 2 1e-3 08_expert_parallel --ep 2 --comm COMM2
ch01_bf16 1 2e-2 01_single_gpu --model small --precision bf16
ch11_fp16 1 2e-2 11_mixed_precision --model small --schemes fp16
ch11_fp8 1 2e-2 11_mixed_precision --model small --schemes fp8
EOF
}
# the sanitizer runs: tool, name, binary, suite (each over the binary's "[gpu]" cases of that suite)
sanitizer_plan() {
    cat <<'EOF'
memcheck memcheck_tests_00 tests_00 ch00 np1
racecheck racecheck_tests_00 tests_00 ch00 np1
synccheck synccheck_tests_00 tests_00 ch00 np1
memcheck memcheck_tests_01 tests_01 ch01 np1
memcheck memcheck_tests_02_nccl tests_02 ch02 np1
memcheck memcheck_tests_10 tests_10 ch10 np1
memcheck memcheck_tests_11 tests_11 ch11 np1
EOF
}
# the GPU test cases each binary lists (all suites, or one-rank suites only with "np1"): "count binary" lines
gpu_case_counts() {
    local t n suites=()
    [ "${1:-}" = np1 ] && suites=(-ts='*np1')
    for t in "$bin"/tests_*; do
        [ -x "$t" ] || continue
        n=$(OMPI_MCA_plm=isolated timeout -k 5 30 "$t" --list-test-cases --no-colors -tc="$filter" "${suites[@]}" 2>/dev/null |
            grep -oE 'passing the current filters: [0-9]+' | grep -oE '[0-9]+$')
        echo "${n:-0} $(basename "$t")"
    done
}

if [ "${1:-}" = --dry-run ]; then
    echo "gpu_check plan (dry run, nothing is run): whole-run deadline $deadline s (GPU_CHECK_DEADLINE, at most 540);"
    echo "OUTDIR holds exactly summary.txt and logs.tar.gz, re-packed after every step; a step that would pass the"
    echo "deadline is NOT-RUN. Required for a PASS: ${required[*]}."
    printf '  %-11s %-14s %s\n' step limit what \
        setup "${limit_setup} s" "nvidia-smi, nvcc, scripts/gpu_env.sh (runtime, NCCL, cuBLAS), MPI probe (alone, 2 ranks)" \
        build "${limit_build} s" "make -k -j\$(nproc) BUILD=$build CUDA=1 ARCH=<this GPU> MPI=1 (MPI=0 when the probe fails) all" \
        gpu_tests "${limit_tests} s" "scripts/run_tests.sh, -tc='$filter', PENTA_TEST_TIMEOUT=$limit_test_run per run" \
        sanitizers "${limit_san} s each" "in the background from the build on, --report-api-errors no --error-exitcode 99" \
        chapters "${limit_chapter} s each" "GPU and CPU runs side by side, --comm-timeout $comm_timeout (chapters 02-11)" \
        gpu_bench "what is left" "information only, when >= $bench_min s are left"
    echo "sanitizer runs:"
    sanitizer_plan | while read -r tool name t ch np; do echo "  $name: $tool over $t -ts='$ch $np' -tc='$filter'"; done
    echo "chapter runs (COMM2: nccl with 2 GPUs, else mpi; ch11_fp8 on sm_90 only):"
    chapter_plan | while read -r name np tol prog args; do echo "  $name: $np rank(s), tolerance $tol: $prog $args"; done
    if ls "$bin"/tests_* >/dev/null 2>&1; then
        counts=$(gpu_case_counts)
        echo "GPU test cases selected by -tc='$filter' (from $bin):"
        for t in "$bin"/tests_*; do
            [ -x "$t" ] || continue
            OMPI_MCA_plm=isolated timeout -k 5 30 "$t" --list-test-cases --no-colors -tc="$filter" 2>/dev/null |
                grep -F '[gpu]' | sed "s|^|  $(basename "$t"): |"
        done
        echo "gpu_check: dry run: $(awk '{s += $1} END {print s}' <<<"$counts") GPU test cases in $(wc -l <<<"$counts") binaries"
    else
        echo "GPU test cases: $bin holds no test binaries yet (listed after the build)"
    fi
    exit 0
fi

out=${1:?usage: gpu_check.sh OUTDIR | --dry-run | --verdict SUMMARY_FILE}
mkdir -p "$out"
out=$(cd "$out" && pwd)
summary=$out/summary.txt
: >"$summary"
rm -rf "$out/logs" "$out/logs.tar.gz.tmp"  # an older gpu_check's folder: OUTDIR holds the two files alone
work=$(mktemp -d)
logs=$work/logs  # packed into OUTDIR/logs.tar.gz after every step: a device run hands back only a few files
mkdir -p "$logs"
t0=$SECONDS
san_pid=""

pack() {
    tar -C "$work" -czf "$out/logs.tar.gz.tmp" logs 2>/dev/null && mv -f "$out/logs.tar.gz.tmp" "$out/logs.tar.gz"
}
say() { echo "$*" | tee -a "$summary"; }
verdict() {  # verdict PASS|FAIL|NOT-RUN|INFO name [why]
    local v=$1 name=$2 why=${3:-}
    say "-- $v $name${why:+: $why} ($((SECONDS - t0)) s elapsed)"
    pack
}
finish() {
    local rc
    trap - EXIT TERM INT
    [ -n "$san_pid" ] && kill -- -"$san_pid" 2>/dev/null
    say ""
    say "== gpu_check verdicts ($((SECONDS - t0)) s of the $deadline s deadline)"
    verdict_of "$summary" >"$work/verdict.txt"
    rc=$?
    tee -a "$summary" <"$work/verdict.txt"
    pack
    rm -rf "$work"
    exit $rc
}
trap finish EXIT
trap 'say "gpu_check: stopped by a signal"; finish' TERM INT
left() { echo $((deadline - (SECONDS - t0) - 10)); }  # 10 s kept for the verdict and the last packing
# limit WANT MIN: WANT, or what is left before the deadline if less; 0 when less than MIN is left
limit() {
    local l
    l=$(left)
    [ "$l" -lt "$2" ] && { echo 0; return; }
    [ "$l" -lt "$1" ] && echo "$l" || echo "$1"
}
# run NAME LIMIT command...: logs to NAME.log, its first errors and last lines to the summary; its status
run() {
    local name=$1 lim=$2 rc
    shift 2
    echo "== $name (limit $lim s): $*" >>"$summary"
    timeout -k 10 "$lim" "$@" </dev/null >"$logs/$name.log" 2>&1  # mpirun reads stdin: not the plan's lines
    rc=$?
    { grep -m 3 -E '^error:|FAILED|[Ee]rror:|ERROR' "$logs/$name.log"; tail -n 8 "$logs/$name.log"; } | cut -c1-300 | sed 's/^/   | /' >>"$summary"
    [ "$rc" = 124 ] && echo "   | (killed at its $lim s limit)" >>"$summary"
    return $rc
}

# ---- 1. setup -----------------------------------------------------------------------------------------------
say "gpu_check $(date -u +%FT%TZ) on $(uname -n), $(nproc) cores, deadline $deadline s"
if ! command -v nvidia-smi >/dev/null; then
    say "gpu_check: no GPU here: nvidia-smi is not installed (no NVIDIA driver); nothing was checked"
    trap - EXIT; pack; rm -rf "$work"; exit 2
fi
gpus=$(nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv,noheader 2>&1)
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
if [ "${ngpu:-0}" -lt 1 ]; then
    say "gpu_check: no GPU visible: nvidia-smi says: $(echo "$gpus" | head -n 2); nothing was checked"
    trap - EXIT; pack; rm -rf "$work"; exit 2
fi
say "GPUs ($ngpu): $gpus"
if ! penta_env_cuda; then
    say "gpu_check: $penta_env_error; nothing was built"
    trap - EXIT; pack; rm -rf "$work"; exit 2
fi
cuda_home=$penta_cuda_home
say "nvcc: $(nvcc --version | tail -n 1)  (CUDA_HOME=$cuda_home)"
cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n 1 | tr -d ' .')
arch=${ARCH:-$cap}
if ! penta_env_runtime; then
    verdict FAIL build "$penta_env_error"
    exit
fi
if ! penta_env_gpu_libs "$root/$build/links"; then
    verdict FAIL build "$penta_env_error"
    exit
fi
say "NCCL: $penta_nccl; cuBLAS: $penta_cublas"
mpi=0
if penta_env_mpi; then
    say "MPI: $penta_mpi_from"
    if penta_mpi_probe "$logs/mpi_probe"; then
        mpi=1
        verdict PASS mpi_probe "an MPI program alone and on 2 ranks ($(grep -c '^mpi_probe:' "$logs/mpi_probe/mpi_probe.log") runs)"
    else
        verdict FAIL mpi_probe "$penta_mpi_from cannot start: $(grep -m 2 -iE 'error|failed|cannot|Sorry' "$logs/mpi_probe/mpi_probe.log" | tr '\n' ' ' | cut -c1-240) (mpi_probe/mpi_probe.log); building MPI=0"
        penta_mpi_make=()
    fi
else
    say "MPI: none ($penta_env_error): MPI=0, the multi-rank checks will not run"
fi

# ---- 2. build -----------------------------------------------------------------------------------------------
mkdir -p "$build" && touch "$build/.deps-ok"  # the packages come from the runtime, not apt
lim=$(limit $limit_build 60)
say "build: make -k CUDA=1 ARCH=$arch MPI=$mpi, $(nproc) jobs"
if [ "$lim" = 0 ]; then verdict NOT-RUN build "the deadline"; exit; fi
if run build "$lim" make -k -j"$(nproc)" BUILD="$build" CUDA=1 CUDA_HOME="$cuda_home" MPI=$mpi ARCH="$arch" "${penta_mpi_make[@]}" all; then
    verdict PASS build "$(ls "$bin" | wc -l) programs and test binaries"
else
    failed=$(grep -oE '\*\*\* \[[^]]*: [^]]*\]' "$logs/build.log" | sed -E 's/.*: ([^]]*)\]/\1/' | sed "s|^$build/||" | sort -u | tr '\n' ' ')
    verdict FAIL build "did not build: ${failed:-see build.log}$(grep -q 'Terminated\|killed' "$logs/build.log" && echo ' (killed at its limit)')"
fi

# ---- 4. sanitizers, in the background from here on (slow; they share the GPU without changing what the rest checks)
san=$(command -v compute-sanitizer || ls "$cuda_home"/bin/compute-sanitizer "$cuda_home"/compute-sanitizer/compute-sanitizer 2>/dev/null | head -n 1)
san_verdicts=$logs/sanitizer.verdicts
: >"$san_verdicts"
san_lim=$(limit $limit_san 30)
if [ -z "$san" ]; then
    verdict NOT-RUN sanitizers "no compute-sanitizer in PATH or $cuda_home"
elif [ "$san_lim" = 0 ]; then
    verdict NOT-RUN sanitizers "the deadline"
else
    sanitize() {  # sanitize TOOL NAME BINARY SUITE: one verdict line into $san_verdicts
        local tool=$1 name=$2 t=$bin/$3 suite=$4 rc counts
        [ -x "$t" ] || { echo "FAIL $name: $t was not built" >>"$san_verdicts"; return; }
        timeout -k 10 "$san_lim" env OMPI_MCA_plm=isolated "$san" --tool "$tool" --report-api-errors no --error-exitcode 99 \
            --print-limit 20 "$t" -ts="$suite" -tc="$filter" --no-colors </dev/null >"$logs/$name.log" 2>&1
        rc=$?
        counts=$(grep -E '^[0-9]+ passed, [0-9]+ failed, [0-9]+ skipped$' "$logs/$name.log" | tail -n 1)
        if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
            echo "NOT-RUN $name: not finished within its $san_lim s ($name.log)" >>"$san_verdicts"
        elif [ "$rc" != 0 ]; then
            echo "FAIL $name: exit $rc $(grep -m 2 -E '=========.*(Error|error|Race|Invalid|hazard|Barrier)' "$logs/$name.log" | tr -s ' ' | cut -c1-160 | tr '\n' ' ') ($name.log)" >>"$san_verdicts"
        elif [[ $counts =~ ^[1-9][0-9]*\ passed,\ 0\ failed,\ 0\ skipped$ ]]; then
            echo "PASS $name: $counts" >>"$san_verdicts"
        else  # a clean exit proves nothing if the tests skipped (a sanitizer that hides the GPU): all must run
            echo "FAIL $name: the tests under it did not all run: ${counts:-no summary} ($name.log)" >>"$san_verdicts"
        fi
    }
    set -m  # the sanitizers in their own process group, so that finish() can stop them all
    (
        while read -r tool name t ch np; do sanitize "$tool" "$name" "$t" "$ch $np" & done < <(sanitizer_plan)
        wait
    ) &
    san_pid=$!
    set +m
    say "sanitizers: started in the background (limit $san_lim s each): $(sanitizer_plan | awk '{print $2}' | tr '\n' ' ')"
fi

# ---- 3. every GPU test ----------------------------------------------------------------------------------------
listed=$(gpu_case_counts | awk '{s += $1} END {print s + 0}')
listed_np1=$(gpu_case_counts np1 | awk '{s += $1} END {print s + 0}')
expected=$([ "$mpi" = 1 ] && echo "$listed" || echo "$listed_np1")
lim=$(limit $limit_tests 30)
if [ "$lim" = 0 ]; then
    verdict NOT-RUN gpu_tests "the deadline"
else
    per_run=$((lim - 10 < limit_test_run ? lim - 10 : limit_test_run))
    run gpu_tests "$lim" env PENTA_TEST_CASES="$filter" PENTA_TEST_TIMEOUT="$per_run" MPI=$mpi BIN="$bin" \
        bash scripts/run_tests.sh "$bin"/tests_*
    total=$(grep -E '^total: ' "$logs/gpu_tests.log" | tail -n 1)
    read -r p f s <<<"$(sed -E 's/total: ([0-9]+) passed, ([0-9]+) failed, ([0-9]+) skipped/\1 \2 \3/' <<<"${total:-total: 0 passed, 1 failed, 0 skipped}")"
    say "GPU tests: ${total:-no total line} (the binaries list $listed, $listed_np1 of them on one rank; expected to run: $expected)"
    if [ "${f:-1}" != 0 ]; then verdict FAIL gpu_tests "$f failed: $(grep '^FAILED:' "$logs/gpu_tests.log" | head -n 4 | tr '\n' ' ')(gpu_tests.log)"
    elif [ "${s:-0}" != 0 ]; then verdict FAIL gpu_tests "$s skipped: $(grep -m 3 '^skipped:' "$logs/gpu_tests.log" | tr '\n' ' ')"
    elif [ "${p:-0}" -lt "$expected" ] || [ "$expected" = 0 ]; then verdict FAIL gpu_tests "$p passed of $expected expected"
    else verdict PASS gpu_tests "$p passed"; fi
fi
[ "$mpi" = 1 ] || verdict NOT-RUN multi_rank_gpu_tests "$((listed - listed_np1)) multi-rank GPU tests need mpirun"

# ---- 5. the chapters on the GPU, each beside the CPU ------------------------------------------------------------
chapter() {  # chapter NAME NP TOL PROGRAM ARGS...
    local name=$1 np=$2 tol=$3 prog=$4 launch=() lim gpu_rc cpu_rc
    shift 4
    if [ "$np" -gt 1 ] && [ "$mpi" != 1 ]; then
        verdict NOT-RUN "$name" "needs $np ranks (mpirun)"
        return
    fi
    lim=$(limit $limit_chapter 20)
    if [ "$lim" = 0 ]; then verdict NOT-RUN "$name" "the deadline"; return; fi
    [ "$mpi" = 1 ] && launch=($MPIRUN -np "$np")
    local common=(--steps 12 --log-every 4 --eval-every 0 "$@")
    case $prog in 01_single_gpu | 11_mixed_precision) ;; *) common+=(--comm-timeout "$comm_timeout") ;; esac  # the parallel chapters' flag
    local cpu_args=("${common[@]}") i
    for i in "${!cpu_args[@]}"; do [ "${cpu_args[$i]}" = nccl ] && cpu_args[$i]=mpi; done  # the CPU's backend
    for i in "${!cpu_args[@]}"; do [ "${cpu_args[$i]}" = --tf32 ] && unset "cpu_args[$i]"; done
    # the CPU twin at the same time: it needs no GPU, and the cores are idle while the GPU runs
    run "$name.cpu" "$lim" "${launch[@]}" "$bin/$prog" --device cpu "${cpu_args[@]}" --log-jsonl "$logs/$name.cpu.jsonl" &
    local cpu_pid=$!
    run "$name" "$lim" "${launch[@]}" "$bin/$prog" --device cuda "${common[@]}" --log-jsonl "$logs/$name.gpu.jsonl"
    gpu_rc=$?
    wait "$cpu_pid"
    cpu_rc=$?
    if [ "$gpu_rc" != 0 ]; then
        verdict FAIL "$name" "the GPU run failed (exit $gpu_rc): $(grep -m 1 '^error:' "$logs/$name.log" | cut -c1-220) ($name.log)"
        return
    elif [ "$cpu_rc" != 0 ]; then
        verdict FAIL "$name" "the CPU run beside it failed (exit $cpu_rc): $(grep -m 1 '^error:' "$logs/$name.cpu.log" | cut -c1-220)"
        return
    fi
    local cmp
    if cmp=$(python3 - "$logs/$name.gpu.jsonl" "$logs/$name.cpu.jsonl" "$tol" 2>&1 <<'PY'
import json, sys
g = [json.loads(l) for l in open(sys.argv[1])]
c = [json.loads(l) for l in open(sys.argv[2])]
tol = float(sys.argv[3])
assert len(g) == len(c) and g, f"{len(g)} GPU steps vs {len(c)} CPU steps"
worst_l = max(abs(a["loss"] - b["loss"]) / abs(b["loss"]) for a, b in zip(g, c))
worst_n = max(abs(a["grad_norm"] - b["grad_norm"]) / max(abs(b["grad_norm"]), 1e-12) for a, b in zip(g, c))
print(f"{len(g)} steps, loss {g[-1]['loss']:.4f} (cpu {c[-1]['loss']:.4f}), worst relative difference: loss "
      f"{worst_l:.2e}, grad norm {worst_n:.2e} (tolerance {tol:g} / {5 * tol:g}); GPU {g[-1]['seconds'] * 1e3:.1f} ms/step")
sys.exit(0 if worst_l <= tol and worst_n <= 5 * tol else 1)
PY
    ); then
        verdict PASS "$name" "$cmp"
    else
        verdict FAIL "$name" "$cmp"
    fi
}
comm2=$([ "$ngpu" -ge 2 ] && echo nccl || echo mpi)  # two ranks on one GPU: NCCL refuses, MPI stages
while read -r name np tol prog args; do
    name=${name//COMM2/$comm2} args=${args//COMM2/$comm2}
    if [ "$name" = ch11_fp8 ] && [ "$cap" != 90 ]; then
        say "ch11_fp8: not a check here: cuBLASLt's block-scaled fp8 needs Hopper (sm_90), this GPU is sm_$cap (its [gpu] test checks the refusal)"
        continue
    fi
    # shellcheck disable=SC2086  # the arguments are words
    chapter "$name" "$np" "$tol" "$prog" $args
done < <(chapter_plan)

# the sanitizers' verdicts (their limits end them before the deadline; the bench runs alone)
if [ -n "$san_pid" ]; then
    wait "$san_pid"
    san_pid=""
    while IFS= read -r v; do
        name=$(cut -d' ' -f2 <<<"$v" | cut -d: -f1)
        verdict "${v%% *}" "$name" "$(cut -d: -f2- <<<"$v" | cut -c2-)"
        tail -n 4 "$logs/$name.log" 2>/dev/null | sed 's/^/   | /' >>"$summary"
    done <"$san_verdicts"
fi

# ---- 6. the benchmark: information, no verdict -------------------------------------------------------------------
lim=$(limit 600 $bench_min)
if [ "$lim" = 0 ]; then
    verdict NOT-RUN gpu_bench "$(left) s left before the deadline, the bench needs $bench_min (information only)"
else
    if run gpu_bench "$lim" env BIN="$bin" CUDA_HOME="$cuda_home" COMPILE_TIMEOUT=$((lim / 3)) bash scripts/gpu_bench.sh "$logs/bench"; then
        verdict INFO gpu_bench "figures below and in gpu_bench.log"
    else
        verdict INFO gpu_bench "it did not finish or something in it could not run (gpu_bench.log); figures below"
    fi
    grep -E '^bench: ' "$logs/gpu_bench.log" | head -n 60 | sed 's/^/INFO /' >>"$summary"
fi
finish
