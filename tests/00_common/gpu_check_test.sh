#!/usr/bin/env bash
# gpu_check_test.sh — scripts/gpu_check.sh where there is nothing to check must fail and say why, never
# report success: without a GPU (no nvidia-smi, or one that lists none) and without nvcc. It stops before
# building anything, so this takes a second. On a machine with a GPU the no-GPU rows are skipped.
#   bash tests/00_common/gpu_check_test.sh        (make test CH=00 runs it)
source "$(dirname "$0")/../expect_fail.sh"
cd "$(dirname "$0")/../.."
fake=$TMP/fake-bin
mkdir -p "$fake"
# an nvidia-smi that lists no GPU, as on a machine whose driver sees none
printf '#!/bin/sh\necho "No devices were found"\nexit 6\n' >"$fake/nvidia-smi"
# and one that lists a GPU, for the missing-compiler answer
mkdir -p "$fake/gpu"
printf '#!/bin/sh\ncase "$*" in -L) echo "GPU 0: NVIDIA H200 (UUID: GPU-0)";; *) echo "NVIDIA H200, 143771 MiB, 580.1, 9.0";; esac\n' >"$fake/gpu/nvidia-smi"
chmod +x "$fake/nvidia-smi" "$fake/gpu/nvidia-smi"
if ! command -v nvidia-smi >/dev/null; then
    expect_fail "no driver: no nvidia-smi" 30 "no GPU here: nvidia-smi is not installed && nothing was checked" \
        bash scripts/gpu_check.sh "$TMP/out0"
    expect_ok "the summary in OUTDIR says so" 5 "no GPU here" cat "$TMP/out0/summary.txt"
else
    echo "$expect_name: nvidia-smi exists here: the no-driver row is not run"
fi
expect_fail "a driver that sees no GPU" 30 "no GPU visible && No devices were found && nothing was checked" \
    env PATH="$fake:$PATH" bash scripts/gpu_check.sh "$TMP/out1"
expect_fail "a GPU but no nvcc" 30 "no nvcc at $TMP/no-cuda/bin && nothing was built" \
    env PATH="$fake/gpu:$PATH" CUDA_HOME="$TMP/no-cuda" bash scripts/gpu_check.sh "$TMP/out2"
expect_ok "OUTDIR holds exactly summary.txt and logs.tar.gz" 5 "logs.tar.gz summary.txt" \
    bash -c 'ls "$1" | paste -sd" "; [ "$(ls "$1" | paste -sd" ")" = "logs.tar.gz summary.txt" ]' _ "$TMP/out1"

# a healthy run's summary (the lines gpu_check.sh writes), then the same with one change each
cat >"$TMP/healthy.txt" <<'END'
gpu_check 2026-12-06T10:00:00Z on gpu-1, 16 cores, deadline 540 s
-- PASS mpi_probe: an MPI program alone and on 2 ranks (2 runs) (9 s elapsed)
-- PASS build: 24 programs and test binaries (101 s elapsed)
-- PASS gpu_tests: 52 passed (190 s elapsed)
-- PASS ch01: 3 steps, loss 4.1 (cpu 4.1) (201 s elapsed)
-- PASS ch02_nccl_1rank: 3 steps (210 s elapsed)
-- PASS ch02_dp2_mpi: 3 steps (221 s elapsed)
-- PASS ch03_zero3_nccl_1rank: 3 steps (230 s elapsed)
-- PASS ch04_tp1_nccl: 3 steps (240 s elapsed)
-- PASS ch05_tp2_sp_mpi: 3 steps (262 s elapsed)
-- PASS ch06_cp1_nccl: 3 steps (270 s elapsed)
-- NOT-RUN ch08_ep2_mpi: the deadline (500 s elapsed)
-- PASS memcheck_tests_00: 20 passed, 0 failed, 0 skipped (505 s elapsed)
-- NOT-RUN racecheck_tests_00: not finished within its 150 s (505 s elapsed)
END
{ cat "$TMP/healthy.txt"; echo "-- NOT-RUN gpu_bench: 25 s left before the deadline, the bench needs 120 (information only) (515 s elapsed)"; } >"$TMP/no_bench.txt"
expect_ok "verdict: everything ran and passed but the bench (NOT-RUN) and two optional checks" 10 \
    "gpu_check: PASS (11 checks passed, 3 not run, none failed) && NOT-RUN gpu_bench" \
    bash scripts/gpu_check.sh --verdict "$TMP/no_bench.txt"
sed 's/^-- PASS memcheck_tests_00: .*/-- FAIL memcheck_tests_00: exit 99 ========= Invalid __global__ read of size 4 (505 s elapsed)/' \
    "$TMP/no_bench.txt" >"$TMP/memcheck_failed.txt"
expect_fail "verdict: a required check (memcheck) FAILED" 10 "gpu_check: FAIL (1 failed; required but not passed: memcheck)" \
    bash scripts/gpu_check.sh --verdict "$TMP/memcheck_failed.txt"
sed -E 's/^-- PASS (ch03_[a-z0-9_]*): .*/-- NOT-RUN \1: the deadline/' "$TMP/no_bench.txt" >"$TMP/ch03_not_run.txt"
expect_fail "verdict: a required chapter (03) never ran: nothing failed, still no PASS" 10 \
    "gpu_check: FAIL (0 failed; required but not passed: ch03)" bash scripts/gpu_check.sh --verdict "$TMP/ch03_not_run.txt"
sed 's/^-- NOT-RUN ch08_ep2_mpi: .*/-- FAIL ch08_ep2_mpi: loss 5e-2 apart/' "$TMP/no_bench.txt" >"$TMP/ch08_failed.txt"
expect_fail "verdict: an optional check FAILED (ch08)" 10 "gpu_check: FAIL (1 failed)" \
    bash scripts/gpu_check.sh --verdict "$TMP/ch08_failed.txt"
expect_summary
