#!/usr/bin/env bash
# gpu_check.sh OUTDIR — one validation run on a machine with an NVIDIA GPU; exits 0 only when every check
# ran and passed. Written for a bare GPU machine (the CUDA toolkit, a driver, python3 with PyTorch; maybe no
# OpenMPI, OpenBLAS, doctest, nlohmann-json or apt, and no network), in about 8 minutes on 16 cores:
#
#   0. a GPU is visible (nvidia-smi) and nvcc is there, else it stops at once, non-zero, saying which;
#   1. the runtime: .deps/runtime.tar.gz (made here by scripts/fetch_runtime.sh: OpenMPI, OpenBLAS, doctest,
#      nlohmann-json, make, ~20 MB) unpacked into .deps/root for whatever the machine lacks; NCCL found
#      wherever the machine has it (the CUDA toolkit, the system, or PyTorch's wheel: nvidia/nccl); cuBLAS
#      likewise. Without a working OpenMPI it builds MPI=0 and the multi-rank checks count as not run;
#   2. the build: every program and test binary, CUDA for this GPU's architecture only (BUILD=build-gpu);
#   3. every GPU test of every test binary (doctest -tc='*cuda*,*nccl*': a GPU test must say cuda or NCCL in
#      its name, tests/testing.hpp enforces it), on every world size its suites name; each must pass, none
#      may skip, and as many must run as the binaries list;
#   4. compute-sanitizer: memcheck over the CUDA tests of tests_00, tests_01, tests_11 and the one-rank NCCL
#      test, racecheck and synccheck over tests_00's kernels (in the background, beside steps 3 and 5: they are
#      slow and share the GPU without changing what the others check; the bench waits for them);
#   5. chapters 01-08 on the GPU, each beside the same command on the CPU (losses and grad norms per step
#      within a tolerance): one rank through NCCL, and two ranks through NCCL when there are two GPUs, else
#      through MPI on the shared GPU; and chapter 11's --precision bf16, fp16 (and fp8 on Hopper) on one rank;
#   6. scripts/gpu_bench.sh (pentatron vs PyTorch on one GPU; figures only, it fails only if it cannot run).
# Writes OUTDIR/summary.txt (each check's verdict, the figures, the time) and OUTDIR/logs.tar.gz (one log
# per check, the runs' step logs, the bench's output). GPU_CHECK_BUDGET (s, default 480) bounds the whole: the bench gets what is left.
#   bash scripts/fetch_runtime.sh            here, once (Debian + apt): .deps/runtime.tar.gz
#   bash scripts/gpu_check.sh "$OUT"         there, carrying .deps
set -uo pipefail
out=${1:?usage: gpu_check.sh OUTDIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/.."
root=$PWD
build=${GPU_CHECK_BUILD:-build-gpu}  # the build folder (another one only to rehearse the script on a built tree)
summary=$out/summary.txt
: >"$summary"
logs=$out/logs  # packed into OUTDIR/logs.tar.gz at the end: a device run hands back only a few files
rm -rf "$logs" "$out/logs.tar.gz"
mkdir -p "$logs"
t0=$SECONDS
verdicts=()  # "PASS name" / "FAIL name: why" / "NOT RUN name: why"

say() { echo "$*" | tee -a "$summary"; }
verdict() {  # verdict PASS|FAIL|NOT-RUN name [why]
    local v=$1 name=$2 why=${3:-}
    verdicts+=("$v $name${why:+: $why}")
    say "-- $v $name${why:+: $why} ($((SECONDS - t0)) s elapsed)"
}
finish() {
    local bad=0 v
    tar -C "$out" -czf "$out/logs.tar.gz" logs && rm -rf "$logs"
    say ""
    say "== gpu_check verdicts ($((SECONDS - t0)) s)"
    for v in "${verdicts[@]}"; do
        say "  $v"
        [[ $v == PASS* ]] || bad=$((bad + 1))
    done
    if [ "$bad" = 0 ] && [ ${#verdicts[@]} -gt 0 ]; then
        say "gpu_check: PASS (${#verdicts[@]} checks)"
        exit 0
    fi
    say "gpu_check: FAIL ($bad of ${#verdicts[@]} checks failed or did not run)"
    exit 1
}
# run NAME LIMIT command...: logs to OUTDIR/NAME.log, the last lines to the summary; returns its status
run() {
    local name=$1 limit=$2 rc
    shift 2
    echo "== $name: $*" >>"$summary"
    timeout -k 10 "$limit" "$@" >"$logs/$name.log" 2>&1
    rc=$?
    # the first errors (mpirun's trailer would hide them), then the end of the log
    { grep -m 3 -E '^error:|FAILED|[Ee]rror:|ERROR' "$logs/$name.log"; tail -n 8 "$logs/$name.log"; } | sed 's/^/   | /' >>"$summary"
    [ "$rc" = 124 ] && echo "   | (killed at its $limit s limit)" >>"$summary"
    return $rc
}

# ---- 0. a GPU and a compiler ----------------------------------------------------------------------------
say "gpu_check $(date -u +%FT%TZ) on $(uname -n), $(nproc) cores"
if ! command -v nvidia-smi >/dev/null; then
    say "gpu_check: no GPU here: nvidia-smi is not installed (no NVIDIA driver); nothing was checked"
    rmdir "$logs"; exit 2
fi
gpus=$(nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv,noheader 2>&1)
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
if [ "${ngpu:-0}" -lt 1 ]; then
    say "gpu_check: no GPU visible: nvidia-smi says: $(echo "$gpus" | head -n 2); nothing was checked"
    rmdir "$logs"; exit 2
fi
say "GPUs ($ngpu): $gpus"
cuda_home=${CUDA_HOME:-}
if [ -z "$cuda_home" ]; then
    if command -v nvcc >/dev/null; then cuda_home=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
    else cuda_home=/usr/local/cuda; fi
fi
if [ ! -x "$cuda_home/bin/nvcc" ]; then
    say "gpu_check: no nvcc at $cuda_home/bin (set CUDA_HOME); nothing was built"
    rmdir "$logs"; exit 2
fi
export PATH=$cuda_home/bin:$PATH
say "nvcc: $("$cuda_home/bin/nvcc" --version | tail -n 1)  (CUDA_HOME=$cuda_home)"
cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n 1 | tr -d ' .')
arch=${ARCH:-$cap}

# ---- 1. what the build needs --------------------------------------------------------------------------
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
deps=$root/.deps/root
if [ -f .deps/runtime.tar.gz ] && [ ! -d "$deps" -o .deps/runtime.tar.gz -nt "$deps" ]; then
    rm -rf "$deps" && tar -C .deps -xzf .deps/runtime.tar.gz && touch "$deps"
fi
have_deps=0
[ -d "$deps/usr" ] && have_deps=1
prepend() { eval "export $1=$2\${$1:+:\$$1}"; }
missing=()
if [ "$have_deps" = 1 ]; then
    # OpenBLAS always from .deps (the headers and library this tree was tested with); the rest only if absent
    prepend CPATH "$deps/usr/include/x86_64-linux-gnu/openblas-pthread"
    prepend LIBRARY_PATH "$deps/usr/lib/x86_64-linux-gnu/openblas-pthread:$deps/usr/lib/x86_64-linux-gnu"
    prepend LD_LIBRARY_PATH "$deps/usr/lib/x86_64-linux-gnu/openblas-pthread:$deps/usr/lib/x86_64-linux-gnu"
    { [ -f /usr/include/doctest/doctest.h ] && [ -f /usr/include/nlohmann/json.hpp ]; } || prepend CPATH "$deps/usr/include"
    command -v make >/dev/null || export PATH=$PATH:$deps/usr/bin
else
    [ -f /usr/include/doctest/doctest.h ] || missing+=(doctest)
    [ -f /usr/include/nlohmann/json.hpp ] || missing+=(nlohmann-json)
    ldconfig -p 2>/dev/null | grep -q libopenblas || missing+=(OpenBLAS)
fi
command -v make >/dev/null || missing+=(make)
if [ ${#missing[@]} -gt 0 ]; then
    say "gpu_check: cannot build: missing ${missing[*]} and no .deps/runtime.tar.gz (run scripts/fetch_runtime.sh on a Debian machine and carry .deps)"
    verdict FAIL build "missing ${missing[*]}"
    finish
fi

# MPI: the machine's own mpicxx, else the carried OpenMPI (relocated with OPAL_PREFIX), else MPI=0
mpi=0
mpi_make=()
if command -v mpicxx >/dev/null && command -v mpirun >/dev/null; then
    mpi=1
    say "MPI: the machine's ($(command -v mpirun))"
elif [ -x "$deps/usr/bin/orterun" ]; then
    mpi=1
    ompi=$deps/usr/lib/x86_64-linux-gnu/openmpi
    export OPAL_PREFIX=$deps/usr PMIX_PREFIX=$deps/usr PATH=$deps/usr/bin:$PATH
    prepend LD_LIBRARY_PATH "$ompi/lib"
    mpi_make=(MPI_CFLAGS="-I$ompi/include -I$ompi/include/openmpi" MPI_LIBS="-L$ompi/lib -lmpi")
    say "MPI: the carried OpenMPI ($OPAL_PREFIX)"
else
    say "MPI: none (no mpicxx, nothing carried): MPI=0, the multi-rank checks will not run"
fi
if [ "$mpi" = 1 ]; then
    # one node, shared memory only: no network transports, no ssh (isolated launcher when there is none)
    export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none
    command -v ssh >/dev/null || export OMPI_MCA_plm=isolated
fi

# NCCL and cuBLAS: the toolkit, the system, or the pip wheels PyTorch brings (nvidia/nccl, nvidia/cublas)
links=$root/$build/links
mkdir -p "$links/include" "$links/lib"
py=$(command -v python3 || true)
found=""
# find_lib NAME WHEEL HEADER: makes libNAME.so (and HEADER) findable by the build and the runs; sets `found`
find_lib() {
    local name=$1 wheel=$2 hdr=$3 d w so
    for d in "$cuda_home/lib64" "$cuda_home/targets/x86_64-linux/lib" /usr/lib/x86_64-linux-gnu /usr/local/lib; do
        [ -e "$d/lib$name.so" ] || continue
        [ -z "$hdr" ] || [ -f "$cuda_home/include/$hdr" ] || [ -f /usr/include/$hdr ] || [ -f "$d/../include/$hdr" ] || continue
        [ -f "$d/../include/$hdr" ] && prepend CPATH "$d/../include"
        prepend LIBRARY_PATH "$d"
        prepend LD_LIBRARY_PATH "$d"
        found=$d
        return 0
    done
    w=$([ -n "$py" ] && "$py" -c "import nvidia.$wheel as m; print(list(m.__path__)[0])" 2>/dev/null)
    so=$(ls "$w"/lib/lib"$name".so* 2>/dev/null | head -n 1)
    [ -n "$w" ] && [ -n "$so" ] || return 1
    ln -sf "$so" "$links/lib/lib$name.so"  # the wheels hold lib*.so.N only; the link step asks for lib*.so
    prepend LD_LIBRARY_PATH "$w/lib"
    if [ -n "$hdr" ]; then
        if [ -f "$w/include/$hdr" ]; then ln -sf "$w/include/$hdr" "$links/include/$hdr"
        elif [ -f "$root/.deps/$hdr" ]; then ln -sf "$root/.deps/$hdr" "$links/include/$hdr"  # fetch_runtime.sh's copy
        else return 1; fi
    fi
    found="$w (python3's nvidia.$wheel)"
}
prepend CPATH "$links/include"
prepend LIBRARY_PATH "$links/lib"
if ! find_lib nccl nccl nccl.h; then
    verdict FAIL build "no NCCL: not in $cuda_home, the system or python3's nvidia.nccl (pip nvidia-nccl-cu13)"
    finish
fi
say "NCCL: $found"
for lib in cublas cublasLt; do
    if ! find_lib "$lib" cublas ""; then
        verdict FAIL build "no lib$lib.so in $cuda_home, the system or python3's nvidia.cublas"
        finish
    fi
done
say "cuBLAS: $found"

# ---- 2. build -------------------------------------------------------------------------------------------
mkdir -p "$build" && touch "$build/.deps-ok"  # the packages come from above, not apt
export MPIRUN="mpirun $([ "$(id -u)" = 0 ] && echo --allow-run-as-root) --oversubscribe --bind-to none -x OPENBLAS_NUM_THREADS=1 -x OMP_NUM_THREADS=1 -x LD_LIBRARY_PATH"
say "build: CUDA=1 ARCH=$arch MPI=$mpi, $(nproc) jobs"
if ! run build 420 make -j"$(nproc)" BUILD="$build" CUDA=1 CUDA_HOME="$cuda_home" MPI=$mpi ARCH="$arch" "${mpi_make[@]}" all; then
    verdict FAIL build "make failed: see build.log"
    finish
fi
verdict PASS build
bin=$root/$build/bin
if [ "$mpi" = 1 ] && ! run mpi_smoke 60 $MPIRUN -np 2 "$bin/tests_02" -ts="ch02 np2" -tc="barrier*" --no-colors; then
    say "mpirun does not work here (mpi_smoke.log): the multi-rank checks will not run"
    verdict FAIL mpirun "mpirun -np 2 failed: see mpi_smoke.log"
    mpi_works=0
else
    mpi_works=$mpi
fi

# ---- 4. compute-sanitizer, started first in the background (slow) beside steps 3 and 5 ----------------
san=$(command -v compute-sanitizer || ls "$cuda_home"/bin/compute-sanitizer "$cuda_home"/compute-sanitizer/compute-sanitizer 2>/dev/null | head -n 1)
san_verdicts=$logs/sanitizer.verdicts
: >"$san_verdicts"
if [ -z "$san" ]; then
    verdict NOT-RUN sanitizers "no compute-sanitizer in PATH or $cuda_home"
    san_pid=""
else
    sanitize() {  # sanitize TOOL NAME binary args...: a verdict line into $san_verdicts
        local tool=$1 name=$2
        shift 2
        local counts
        if timeout -k 10 150 env OMPI_MCA_plm=isolated "$san" --tool "$tool" --error-exitcode 99 --print-limit 20 "$@" \
            --no-colors >"$logs/$name.log" 2>&1; then
            # a clean exit proves nothing if the tests skipped (a sanitizer that hides the GPU): all must run
            counts=$(grep -E '^[0-9]+ passed, [0-9]+ failed, [0-9]+ skipped$' "$logs/$name.log" | tail -n 1)
            if [[ $counts =~ ^[1-9][0-9]*\ passed,\ 0\ failed,\ 0\ skipped$ ]]; then echo "PASS $name: $counts" >>"$san_verdicts"
            else echo "FAIL $name: the tests under it did not all run: ${counts:-no summary} ($name.log)" >>"$san_verdicts"; fi
        else
            echo "FAIL $name: exit $? $(grep -m 2 -E '=========.*(Error|error|Race|Invalid|hazard|Barrier)' "$logs/$name.log" | tr -s ' ' | cut -c1-160 | tr '\n' ' ') ($name.log)" >>"$san_verdicts"
        fi
    }
    (  # all at once: each is a small program, slowed down by its tool
        sanitize memcheck memcheck_tests_00 "$bin/tests_00" -ts='ch00 np1' -tc='*cuda*' &
        sanitize racecheck racecheck_tests_00 "$bin/tests_00" -ts='ch00 np1' -tc='*cuda*' &
        sanitize synccheck synccheck_tests_00 "$bin/tests_00" -ts='ch00 np1' -tc='*cuda*' &
        sanitize memcheck memcheck_tests_01 "$bin/tests_01" -ts='ch01 np1' -tc='*cuda*' &
        sanitize memcheck memcheck_tests_11 "$bin/tests_11" -ts='ch11 np1' -tc='*cuda*' &  # the lowp GEMMs' kernel
        sanitize memcheck memcheck_nccl "$bin/tests_02" -ts='ch02 np1' -tc='*nccl*,*cuda*' &
        wait
    ) &
    san_pid=$!
fi

# ---- 3. every GPU test ----------------------------------------------------------------------------------
filter='*cuda*,*nccl*'
listed=0 listed_np1=0
for t in "$bin"/tests_*; do
    n=$(OMPI_MCA_plm=isolated "$t" --list-test-cases --no-colors -tc="$filter" 2>/dev/null |
        grep -oE 'passing the current filters: [0-9]+' | grep -oE '[0-9]+$')
    n1=$(OMPI_MCA_plm=isolated "$t" --list-test-cases --no-colors -tc="$filter" -ts='*np1' 2>/dev/null |
        grep -oE 'passing the current filters: [0-9]+' | grep -oE '[0-9]+$')
    listed=$((listed + ${n:-0})) listed_np1=$((listed_np1 + ${n1:-0}))
done
expected=$([ "$mpi_works" = 1 ] && echo "$listed" || echo "$listed_np1")
run gpu_tests 300 env PENTA_TEST_CASES="$filter" MPI=$mpi_works BIN="$bin" bash scripts/run_tests.sh "$bin"/tests_*
total=$(grep -E '^total: ' "$logs/gpu_tests.log" | tail -n 1)
read -r p f s <<<"$(sed -E 's/total: ([0-9]+) passed, ([0-9]+) failed, ([0-9]+) skipped/\1 \2 \3/' <<<"${total:-total: 0 passed, 1 failed, 0 skipped}")"
say "GPU tests: ${total:-no total line} (the binaries list $listed, $listed_np1 of them on one rank; expected to run: $expected)"
if [ "${f:-1}" != 0 ]; then verdict FAIL gpu_tests "$f failed (gpu_tests.log)"
elif [ "${s:-0}" != 0 ]; then verdict FAIL gpu_tests "$s skipped: $(grep -m 3 '^skipped:' "$logs/gpu_tests.log" | tr '\n' ' ')"
elif [ "${p:-0}" -lt "$expected" ] || [ "$expected" = 0 ]; then verdict FAIL gpu_tests "$p passed of $expected expected"
else verdict PASS gpu_tests "$p passed"; fi
[ "$mpi_works" = 1 ] || verdict NOT-RUN multi_rank_gpu_tests "$((listed - listed_np1)) multi-rank GPU tests need mpirun"

# ---- 5. the chapters on the GPU, each beside the CPU ----------------------------------------------------
# chapter NAME NP TOL PROGRAM ARGS...: the program on the GPU and on the CPU with the same arguments; every
# step's loss (and grad norm, at 5x the tolerance) within TOL relative of the CPU's
chapter() {
    local name=$1 np=$2 tol=$3 prog=$4 launch=()
    shift 4
    if [ "$np" -gt 1 ] && [ "$mpi_works" != 1 ]; then
        verdict NOT-RUN "$name" "needs $np ranks (mpirun)"
        return
    fi
    [ "$mpi_works" = 1 ] && launch=($MPIRUN -np "$np")
    local common=(--steps 12 --log-every 4 --eval-every 0 "$@")
    if ! run "$name" 180 "${launch[@]}" "$bin/$prog" --device cuda "${common[@]}" --log-jsonl "$logs/$name.gpu.jsonl"; then
        verdict FAIL "$name" "the GPU run failed: $(grep -m 1 '^error:' "$logs/$name.log" | cut -c1-220) ($name.log)"
        return
    fi
    local cpu_args=("${common[@]}")
    for i in "${!cpu_args[@]}"; do [ "${cpu_args[$i]}" = nccl ] && cpu_args[$i]=mpi; done  # the CPU's backend
    for i in "${!cpu_args[@]}"; do [ "${cpu_args[$i]}" = --tf32 ] && unset "cpu_args[$i]"; done
    if ! run "$name.cpu" 180 "${launch[@]}" "$bin/$prog" --device cpu "${cpu_args[@]}" --log-jsonl "$logs/$name.cpu.jsonl"; then
        verdict FAIL "$name" "the CPU run beside it failed: $(grep -m 1 '^error:' "$logs/$name.cpu.log" | cut -c1-220)"
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
chapter ch01 1 1e-3 01_single_gpu --model small
chapter ch01_naive_recompute 1 1e-3 01_single_gpu --model small --attention naive --recompute full
chapter ch01_tf32 1 2e-2 01_single_gpu --model small --tf32
chapter ch02_nccl_1rank 1 1e-3 02_data_parallel --dp 1 --comm nccl
chapter ch02_dp2_$comm2 2 1e-3 02_data_parallel --dp 2 --micro-batch 8 --comm "$comm2"
chapter ch03_zero3_nccl_1rank 1 1e-3 03_zero --dp 1 --zero 3 --comm nccl
for z in 1 2 3; do chapter ch03_zero${z}_dp2_$comm2 2 1e-3 03_zero --dp 2 --zero $z --micro-batch 8 --comm "$comm2"; done
chapter ch04_tp1_nccl 1 1e-3 04_tensor_parallel --tp 1 --comm nccl
chapter ch04_tp2_$comm2 2 1e-3 04_tensor_parallel --tp 2 --comm "$comm2"
chapter ch05_tp2_sp_$comm2 2 1e-3 05_sequence_parallel --tp 2 --sp --comm "$comm2"
chapter ch06_cp1_nccl 1 1e-3 06_context_parallel --cp 1 --comm nccl
chapter ch06_cp2_$comm2 2 1e-3 06_context_parallel --cp 2 --comm "$comm2"
chapter ch07_pp2_1f1b_$comm2 2 1e-3 07_pipeline_parallel --pp 2 --pp-schedule 1f1b --comm "$comm2"
chapter ch08_moe_nccl_1rank 1 1e-3 08_expert_parallel --ep 1 --comm nccl
chapter ch08_ep2_$comm2 2 1e-3 08_expert_parallel --ep 2 --comm "$comm2"
# chapter 11's policies: the GEMMs through cuBLASLt beside the CPU's exact emulation (a rounding that flips on
# one side only moves a step's loss by more than fp32's 1e-3, as --tf32 does); fp8's block scales need Hopper
chapter ch01_bf16 1 2e-2 01_single_gpu --model small --precision bf16
chapter ch01_fp16 1 2e-2 01_single_gpu --model small --precision fp16
if [ "$cap" = 90 ]; then chapter ch01_fp8 1 2e-2 01_single_gpu --model small --precision fp8
else say "ch01_fp8: not a check here: cuBLASLt's block-scaled fp8 needs Hopper (sm_90), this GPU is sm_$cap (its cuda test checks the refusal)"; fi

# the sanitizers' verdicts (the bench runs alone)
if [ -n "$san_pid" ]; then
    wait "$san_pid"
    while IFS= read -r v; do
        verdict "${v%% *}" "$(cut -d' ' -f2- <<<"$v" | cut -d: -f1)" "$(grep -o ': .*' <<<"$v" | cut -c3-)"
        tail -n 4 "$logs/$(cut -d' ' -f2 <<<"$v" | cut -d: -f1).log" | sed 's/^/   | /' >>"$summary"
    done <"$san_verdicts"
fi

# ---- 6. the benchmark -----------------------------------------------------------------------------------
left=$((${GPU_CHECK_BUDGET:-480} - (SECONDS - t0)))
if [ "$left" -lt 60 ]; then
    verdict NOT-RUN gpu_bench "only $left s left of the ${GPU_CHECK_BUDGET:-480} s budget (GPU_CHECK_BUDGET)"
elif run gpu_bench "$left" env BIN="$bin" CUDA_HOME="$cuda_home" COMPILE_TIMEOUT=$((left / 3)) bash scripts/gpu_bench.sh "$logs/bench"; then
    verdict PASS gpu_bench "figures below and in gpu_bench.log"
    grep -E '^bench: ' "$logs/gpu_bench.log" | head -n 60 >>"$summary"
else
    verdict FAIL gpu_bench "see gpu_bench.log"
    grep -E '^bench: ' "$logs/gpu_bench.log" | head -n 60 >>"$summary"
fi
finish
