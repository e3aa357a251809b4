# bench_mpi.sh — sourced by the training benchmarks (scripts/bench_NN_*.sh): sets $mpirun_cmd (MPIRUN, or
# mpirun --oversubscribe; as root --allow-run-as-root; --bind-to none; one BLAS thread per rank), $cores and a
# scratch $tmp removed on exit, and ends the calling script with a "skipped" line on an MPI=0 build.
#   source "$(dirname "$0")/bench_mpi.sh" bench_06_context_parallel
mpirun_cmd=${MPIRUN:-mpirun --oversubscribe}
[ "$(id -u)" = 0 ] && [[ "$mpirun_cmd" != *allow-run-as-root* ]] && mpirun_cmd+=" --allow-run-as-root"
[[ "$mpirun_cmd" != *bind-to* ]] && mpirun_cmd+=" --bind-to none"
mpirun_cmd+=" -x OPENBLAS_NUM_THREADS=1 -x OMP_NUM_THREADS=1"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
if [ "${MPI:-1}" = 0 ]; then
    echo "$1: skipped (MPI=0 build has one rank)"
    exit 0
fi
cores=$(getconf _NPROCESSORS_ONLN)  # the machine's cores (nproc may report a narrower affinity)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
