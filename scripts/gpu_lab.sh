#!/usr/bin/env bash
# gpu_lab.sh OUTDIR — chapter 10, the kernels lab, on a machine with an NVIDIA GPU, in one command: builds the
# lab and its tests for the GPU (ARCH=90 by default; the wgmma rung is always sm_90a), then
#   1. resources: registers, shared memory and spills of every lab kernel (ptxas, from the build log), and the
#      tensor-core instructions in the GEMM rungs' machine code (HGMMA for wgmma, HMMA for mma.sync);
#   2. tests: tests_10 (the CPU ladder and reference, and every GPU kernel against the fp64 reference);
#   3. gemm: the GPU GEMM ladder vs cuBLAS/cuBLASLt, 1024..8192 square and llama3-8b's shapes at 4096 tokens;
#   4. fused: the fused kernels vs their unfused sequences, GB/s vs the measured copy bandwidth;
#   5. attention: flash attention fwd and fwd+bwd (head dims 64 and 128, B 2, T 4096), then
#   6. sdpa: PyTorch's scaled_dot_product_attention on the same shapes (10_kernels/sdpa_compare.py).
# Each step's whole output goes to OUTDIR/<step>.log and its end to OUTDIR/summary.txt; STEPS="tests gemm"
# runs only those (build always runs; make skips what is built). Without mpicxx it builds MPI=0; it uses the
# OpenBLAS, doctest and nlohmann-json unpacked in .deps/root when there (scripts/fetch_runtime.sh makes them).
#   bash scripts/gpu_lab.sh /tmp/lab          (~8 minutes on an H200 with 16 cores)
set -uo pipefail
out=${1:?usage: gpu_lab.sh OUTDIR}
mkdir -p "$out" && out=$(cd "$out" && pwd)
cd "$(dirname "$0")/.."
steps=${STEPS:-resources tests gemm fused attention sdpa}
export OPENBLAS_NUM_THREADS=1
if [ -d .deps/root ]; then
    r=$PWD/.deps/root
    export CPATH=$r/usr/include:$r/usr/include/x86_64-linux-gnu/openblas-pthread${CPATH:+:$CPATH}
    export LIBRARY_PATH=$r/usr/lib/x86_64-linux-gnu:$r/usr/lib/x86_64-linux-gnu/openblas-pthread${LIBRARY_PATH:+:$LIBRARY_PATH}
    export LD_LIBRARY_PATH=$LIBRARY_PATH${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
mpi=0
command -v mpicxx >/dev/null && mpi=1
arch=${ARCH:-90}
bin=build-gpu/bin
summary=$out/summary.txt
{
    echo "gpu_lab $(date -u +%FT%TZ)"
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader 2>&1 | head -n 2
    nvcc --version | tail -n 1
    echo "build: CUDA=1 ARCH=$arch MPI=$mpi; steps: $steps"
} | tee "$summary"

run_step() {  # run_step NAME LINES command...: the whole output to NAME.log, its last LINES lines to the summary
    local name=$1 lines=$2 t0=$SECONDS rc
    shift 2
    echo "== $name: $*" | tee -a "$summary"
    "$@" >"$out/$name.log" 2>&1
    rc=$?
    tail -n "$lines" "$out/$name.log" >>"$summary"
    echo "== $name: exit $rc, $((SECONDS - t0)) s" | tee -a "$summary"
    return $rc
}

mkdir -p build-gpu && touch build-gpu/.deps-ok  # make's deps step would try apt-get
run_step build 30 make -j"$(nproc)" BUILD=build-gpu CUDA=1 MPI=$mpi ARCH="$arch" \
    NVFLAGS_EXTRA="-Xptxas -v" "$bin/10_kernels" "$bin/tests_10" || exit 1
status=0
for s in $steps; do
    case $s in
        resources)
            # the ptxas lines of the lab's kernels (the build passes -Xptxas -v to chapter 10), and the MMA
            # instructions the GEMM rungs' machine code holds (cuobjdump, when the toolkit has it)
            run_step resources 80 bash -c "grep -A2 \"Compiling entry function '_ZN5penta3lab\" '$out/build.log' | \
                grep -E 'Compiling|registers|spill'; for o in build-gpu/obj/*/10_kernels/gemm_*.o; do \
                echo \"\$o: \$(cuobjdump --dump-sass \$o 2>/dev/null | grep -oE 'HGMMA|HMMA|FFMA' | sort | uniq -c | tr '\n' ' ')\"; done" || status=1 ;;
        tests) run_step tests 40 "$bin/tests_10" -ts='ch10 np1' || status=1 ;;
        gemm) run_step gemm 120 "$bin/10_kernels" --part gpu-gemm --reps "${REPS:-5}" || status=1 ;;
        fused) run_step fused 30 "$bin/10_kernels" --part fused --reps "${REPS:-5}" || status=1 ;;
        attention) run_step attention 40 "$bin/10_kernels" --part attention --reps "${REPS:-5}" || status=1 ;;
        sdpa) run_step sdpa 30 python3 10_kernels/sdpa_compare.py "$out/attention.log" || status=1 ;;
        *) echo "gpu_lab: unknown step '$s' (steps: resources tests gemm fused attention sdpa)" | tee -a "$summary"; status=1 ;;
    esac
done
echo "summary in $summary"
exit $status
