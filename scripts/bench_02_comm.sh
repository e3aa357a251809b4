#!/usr/bin/env bash
# bench_02_comm.sh — chapter 02: all-reduce bandwidth of the ring built from send/recv (ring_all_reduce)
# beside MPI's own all-reduce (non-blocking, as Comm calls it, and blocking), on 2 CPU ranks, 64 KiB to
# 64 MiB of f32, best of 5, algbw and busbw as nccl-tests defines them (bench/comm.cpp says how).
#   bash scripts/bench_02_comm.sh [--reps N] [--max-mib M]     (BIN=build/bin by default; `make bench`)
set -euo pipefail
bin=${BIN:-build/bin}
mpirun_cmd=(mpirun --oversubscribe --bind-to none -x OPENBLAS_NUM_THREADS=1 -x OMP_NUM_THREADS=1)
[ "$(id -u)" = 0 ] && mpirun_cmd+=(--allow-run-as-root)
echo "chapter 02 communication: all-reduce bandwidth on 2 ranks, the ring from send/recv vs MPI's all-reduce"
"${mpirun_cmd[@]}" -np 2 "$bin/bench_comm" "$@"
