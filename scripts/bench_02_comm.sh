#!/usr/bin/env bash
# bench_02_comm.sh — chapter 02: all-reduce bandwidth of the ring built from send/recv (ring_all_reduce)
# beside MPI's own all-reduce (non-blocking, as Comm calls it, and blocking), on 2 CPU ranks, 64 KiB to
# 64 MiB of f32, best of 5, algbw and busbw as nccl-tests defines them (bench/comm.cpp says how).
#   bash scripts/bench_02_comm.sh [--reps N] [--max-mib M]     (BIN=build/bin by default; `make bench`)
set -euo pipefail
bin=${BIN:-build/bin}
mpirun_cmd=${MPIRUN:-mpirun --oversubscribe --bind-to none}
[ "$(id -u)" = 0 ] && [[ "$mpirun_cmd" != *allow-run-as-root* ]] && mpirun_cmd+=" --allow-run-as-root"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
if [ "${MPI:-1}" = 0 ]; then
    echo "bench_02_comm: skipped (MPI=0 build has one rank)"
    exit 0
fi
echo "chapter 02 communication: all-reduce bandwidth on 2 ranks, the ring from send/recv vs MPI's all-reduce"
# shellcheck disable=SC2086  # mpirun_cmd is a command line
$mpirun_cmd -np 2 "$bin/bench_comm" "$@"
