#!/usr/bin/env bash
# gpu_check.sh OUTDIR — one short validation run on a machine with an NVIDIA GPU.
#
# Builds with CUDA (sm_90 only, to build fast on an H100/H200; ARCH= to change), then runs
#   1. the CUDA tests: every CUDA op against the CPU reference (tests/00_common/test_cuda.cpp),
#   2. the op micro-benchmark on the GPU (GEMM via cuBLAS, naive vs tiled attention),
#   3. chapter 01 on the GPU for a few steps, when it is built,
#   4. the NCCL backend's one-GPU test and chapter 02 with --comm nccl beside --comm mpi,
#   5. chapter 08's MoE model on the GPU beside the CPU (the MoE kernels in training), when it is built,
# and writes OUTDIR/summary.txt plus one log per step. It brings its own OpenBLAS, doctest and nlohmann-json
# in .deps/ (made by scripts/fetch_runtime.sh); without mpicxx it builds MPI=0 (single rank).
set -uo pipefail
out=${1:?usage: gpu_check.sh OUTDIR}
mkdir -p "$out"
cd "$(dirname "$0")/.."
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
summary=$out/summary.txt
{
    echo "gpu_check $(date -u +%FT%TZ)"
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -n 2
    nvcc --version | tail -n 1
    echo "build: CUDA=1 ARCH=$arch MPI=$mpi"
} | tee "$summary"

step() {  # step NAME command...: runs it, logs to OUTDIR/NAME.log, appends the last lines to the summary
    local name=$1
    shift
    echo "== $name: $*" | tee -a "$summary"
    local t0=$SECONDS
    "$@" >"$out/$name.log" 2>&1
    local rc=$?
    tail -n 25 "$out/$name.log" >>"$summary"
    echo "== $name: exit $rc, $((SECONDS - t0)) s" | tee -a "$summary"
    return $rc
}

# make's deps step would try apt-get; the packages come from .deps instead
mkdir -p build-gpu && touch build-gpu/.deps-ok
step build make -j"$(nproc)" BUILD=build-gpu CUDA=1 MPI=$mpi ARCH="$arch" all || exit 1
step cuda_tests build-gpu/bin/tests_00 -ts="ch00 np1" -tc="*cuda*"
step bench_ops build-gpu/bin/bench_ops --device cuda
if [ -x build-gpu/bin/01_single_gpu ]; then
    step ch01_gpu build-gpu/bin/01_single_gpu --device cuda --model small --steps 50
fi
# the NCCL backend on one GPU (NCCL needs one GPU per rank, so the group has one rank: every stream path,
# the grouped send/recv, split and counters; the uneven-part padding needs two GPUs)
step nccl_tests build-gpu/bin/tests_02 -ts="ch02 np1" -tc="*NCCL*"
if [ -x build-gpu/bin/02_data_parallel ]; then
    # the same 20 steps through NCCL and through MPI staging: the losses must match
    step ch02_nccl build-gpu/bin/02_data_parallel --dp 1 --micro-batch 16 --device cuda --comm nccl --steps 20 --log-every 5 --eval-every 0
    step ch02_mpi build-gpu/bin/02_data_parallel --dp 1 --micro-batch 16 --device cuda --comm mpi --steps 20 --log-every 5 --eval-every 0
fi
if [ -x build-gpu/bin/08_expert_parallel ]; then
    # the MoE layer's kernels in training (router, dispatch, combine; the all-to-all on one rank), beside the CPU
    step ch08_gpu build-gpu/bin/08_expert_parallel --dp 1 --ep 1 --device cuda --steps 20 --log-every 5 --eval-every 0
    step ch08_cpu build-gpu/bin/08_expert_parallel --dp 1 --ep 1 --device cpu --steps 20 --log-every 5 --eval-every 0
fi
echo "summary in $summary"
