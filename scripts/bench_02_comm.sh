#!/usr/bin/env bash
# bench_02_comm.sh — chapter 02's collectives on CPU ranks (`make bench`; prints figures, asserts nothing):
#   1. all-reduce bandwidth of the ring built from send/recv (ring_all_reduce) beside MPI's own all-reduce
#      (non-blocking, as Comm calls it, and blocking), on 2 ranks, 64 KiB to 64 MiB of f32, best of 5, algbw
#      and busbw as nccl-tests defines them (bench/comm.cpp says how);
#   2. against the number of ranks K = 2..8: a reduce-scatter's time beside an all-reduce's (seed 000: "2x
#      faster") and the ring's latency, an all-reduce of K floats = 2(K-1) message latencies (seed 003: "the
#      latency term grows linearly with K"), one row per K (bench/comm_scaling.cpp says how). Ranks beyond the
#      machine's cores share them (--oversubscribe): there the latency is the scheduler's, and says so.
#   bash scripts/bench_02_comm.sh [--reps N] [--max-mib M]     (BIN=build/bin by default; the options go to part 1)
#   KS="2 3 4" bash scripts/bench_02_comm.sh                    (part 2's K values)
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

echo
echo "chapter 02 communication against K: reduce-scatter vs all-reduce (1 MiB of f32), ring latency (K floats);"
cores=$(getconf _NPROCESSORS_ONLN)
echo "best of 50 (250 for K floats), the slowest rank's time; $cores cores here, so K > $cores ranks share them; load average at start:"
echo "$(cut -d' ' -f1-3 /proc/loadavg)"
header=--header
for K in ${KS:-2 3 4 5 6 7 8}; do
    # shellcheck disable=SC2086
    $mpirun_cmd -np "$K" "$bin/bench_comm_scaling" $header
    header=
done
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
