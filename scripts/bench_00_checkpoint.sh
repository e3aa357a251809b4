#!/usr/bin/env bash
# bench_00_checkpoint.sh — `make bench`'s checkpoint figures: save (sync, async: the training stall, and how much
# slower the training steps that overlap the background write are) and load time and MB/s for smollm-135m-sized
# state (135M parameters, 12 bytes each: 1.6 GB) on one CPU rank, fp32 and bf16 + fp32 master. Writes under
# ${PENTA_BENCH_CKPT_DIR:-/tmp} (removed afterwards).
set -euo pipefail
bin=${BIN:-build/bin}
dir=${PENTA_BENCH_CKPT_DIR:-/tmp}/penta_bench_ckpt_$$
echo "checkpoints (bench/checkpoint.cpp): page cache warm, so the write speed is the memory's more than the disk's"
"$bin/bench_checkpoint" --model smollm-135m --dir "$dir"
"$bin/bench_checkpoint" --model smollm-135m --dir "$dir" --bf16
