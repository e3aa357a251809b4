#!/usr/bin/env bash
# bench_10_kernels.sh — chapter 10, the kernels lab: the CPU GEMM ladder (naive, blocked, packed, avx2, avx512)
# against OpenBLAS's single-thread sgemm at 1024^3 and the shapes of model `small`'s layers (16 x 32 tokens),
# every rung validated against the fp64 reference first. Prints tables; asserts nothing.
#
# OpenBLAS picks its sgemm kernel when it loads, and the table compares like with like, so this runs the
# ladder twice: with OPENBLAS_CORETYPE=Haswell (OpenBLAS's AVX2 kernel, what tests and CI use: compare the
# avx2 rung) and with OPENBLAS_CORETYPE=SkylakeX (its AVX-512 kernel: compare the avx512 rung), then once with
# OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset, to show what OpenBLAS auto-detects on this machine (0.3.21 does
# not know some newer Xeons and falls back to an SSE3 kernel). Each table holds medians of REPS (5)
# interleaved repeats and the load average; on a machine with a GPU the GPU parts follow (scripts/gpu_lab.sh
# runs those with the tests and the PyTorch comparison).
#   BIN=build/bin bash scripts/bench_10_kernels.sh          (make bench runs it)
set -euo pipefail
bin=${BIN:-build/bin}
reps=${REPS:-5}
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
echo "chapter 10: the kernels lab, CPU GEMM ladder, one thread (load average at start: $(cut -d' ' -f1-3 /proc/loadavg))"
for core in Haswell SkylakeX; do
    echo
    OPENBLAS_CORETYPE=$core "$bin/10_kernels" --part cpu-gemm --sizes 1024 --model small --tokens 512 --reps "$reps"
done
echo
echo "OpenBLAS as it auto-detects this CPU (OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset), 1024^3 only:"
env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$bin/10_kernels" --part cpu-gemm --sizes 1024 --model none \
    --rungs avx2,avx512 --reps 3
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
    echo
    "$bin/10_kernels" --part gpu-gemm --reps "$reps"
    "$bin/10_kernels" --part fused --reps "$reps"
    "$bin/10_kernels" --part attention --reps "$reps"
fi
