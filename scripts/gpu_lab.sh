#!/usr/bin/env bash
# gpu_lab.sh OUTDIR — chapter 10, the kernels lab, on a machine with an NVIDIA GPU, in one command: builds the
# lab and its tests for this GPU (ARCH its compute capability; the wgmma rung is always sm_90a), then
#   1. resources: registers, shared memory and spills of every lab kernel (cuobjdump --dump-resource-usage), the
#      tensor-core instructions in the GEMM rungs' machine code (HGMMA for wgmma, HMMA for mma.sync);
#   2. tests: tests_10 (the CPU ladder and reference, and every GPU kernel against the fp64 reference);
#   3. gemm: the GPU GEMM ladder vs cuBLAS/cuBLASLt, 1024..8192 square and llama3-8b's shapes at 4096 tokens;
#   4. fused: the fused kernels vs their unfused sequences, GB/s vs the measured copy bandwidth;
#   5. attention: flash attention fwd and fwd+bwd (head dims 64 and 128, B 2, T 4096; head dim 128's backward
#      needs 171 KB of shared memory a block: the H100 and H200 only, refused by name elsewhere), then
#   6. sdpa: PyTorch's scaled_dot_product_attention on the same shapes (10_kernels/sdpa_compare.py).
# Each step's whole output goes to OUTDIR/<step>.log and its end to OUTDIR/summary.txt; STEPS="tests gemm"
# runs only those (build always runs; make skips what is built). Its environment is scripts/gpu_env.sh's, as
# gpu_check.sh's: the runtime unpacked from .deps/runtime.tar.gz (OpenBLAS, doctest, nlohmann-json, make,
# OpenMPI), NCCL and cuBLAS from the toolkit or PyTorch's wheels; MPI=1 only when the MPI probe runs (else
# MPI=0), and ARCH this GPU's, so it builds the same variant in the same folder (build-gpu) as gpu_check.sh.
#   bash scripts/gpu_lab.sh /tmp/lab          (~8 minutes on an H200 with 16 cores)
set -uo pipefail
out=${1:?usage: gpu_lab.sh OUTDIR}
mkdir -p "$out" && out=$(cd "$out" && pwd)
cd "$(dirname "$0")/.."
source scripts/gpu_env.sh
steps=${STEPS:-resources tests gemm fused attention sdpa}
penta_env_cuda || { echo "gpu_lab: $penta_env_error" >&2; exit 2; }
penta_env_runtime || { echo "gpu_lab: $penta_env_error" >&2; exit 2; }
penta_env_gpu_libs "$PWD/build-gpu/links" || { echo "gpu_lab: $penta_env_error" >&2; exit 2; }
mpi=0
if penta_env_mpi && penta_mpi_probe "$out/mpi_probe"; then mpi=1; fi
cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d ' .')
arch=${ARCH:-${cap:-90}}
bin=build-gpu/bin
summary=$out/summary.txt
{
    echo "gpu_lab $(date -u +%FT%TZ)"
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader 2>&1 | head -n 2
    nvcc --version | tail -n 1
    echo "build: CUDA=1 ARCH=$arch MPI=$mpi (MPI: $penta_mpi_from); NCCL: $penta_nccl; steps: $steps"
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
run_step build 30 make -j"$(nproc)" BUILD=build-gpu CUDA=1 CUDA_HOME="$penta_cuda_home" MPI=$mpi ARCH="$arch" \
    "${penta_mpi_make[@]}" "$bin/10_kernels" "$bin/tests_10" || exit 1
status=0
for s in $steps; do
    case $s in
        resources)
            # registers, shared memory and spills of the lab's kernels as built (cuobjdump reads the objects,
            # whether or not this run compiled them), and the MMA instructions of the GEMM rungs' machine code
            run_step resources 80 bash -c "for o in build-gpu/obj/*/10_kernels/*.o; do echo \"== \$o\"; \
                cuobjdump --dump-resource-usage \$o 2>/dev/null | grep -E 'Function|REG' | sed -E 's/^ +//' | cut -c1-200; done; \
                for o in build-gpu/obj/*/10_kernels/gemm_*.o; do \
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
