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
expect_summary
