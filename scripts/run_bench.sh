#!/usr/bin/env bash
# run_bench.sh — `make bench`: benchmarks that print figures (never assertions).
# Runs with one BLAS thread per process, as training ranks do. OPENBLAS_CORETYPE is left as the machine
# sets it, and printed, since it decides which sgemm kernel OpenBLAS runs.
set -euo pipefail
bin=${BIN:-build/bin}
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
echo "OpenBLAS kernel: OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-<unset: auto-detected>}, one thread"
"$bin/bench_ops"
if [ -x "$bin/bench_train" ]; then "$bin/bench_train"; fi
