#!/usr/bin/env bash
# nan_test.sh — a loss or gradient that becomes NaN or infinite must stop the run at once, naming the step,
# the micro-batch (a loss) and the first parameter tensor whose gradient is not finite.
#
# --inject-nan STEP makes rank 0 write a NaN into layer 0's q_proj gradient after that step's backward
# (common/train_loop.cpp); the step's cheap check (the loss, the gradient norm) fires and the full scan
# names the tensor (common/training_step.cpp). A learning rate of 1e30 without clipping makes the loss
# itself non-finite, and the error names the micro-batch. Each run must exit non-zero within 30 s, not by
# a signal; the same run without the fault must exit 0. Prints "N passed, N failed, N skipped" like the test binaries; `make test CH=01` runs it.
#   bash tests/01_single_gpu/nan_test.sh        (BIN: the programs' folder, default build/bin)
set -uo pipefail
source "$(dirname "$0")/../expect_fail.sh"
run=("$BIN/01_single_gpu" --steps 6 --seq 16 --micro-batch 4 --eval-every 0 --log-every 1)

expect_fail "--inject-nan 3 stops step 3 naming layer 0's q_proj" 30 "step 3: the gradient is not finite (loss && \
the first non-finite gradient is model.layers.0.self_attn.q_proj.weight, element 0" "${run[@]}" --inject-nan 3
expect_fail "--lr 1e30 without clipping: a non-finite loss names its step and micro-batch" 30 \
    "step 2: the loss is not finite && the loss of micro-batch 0 first became non-finite" \
    "${run[@]}" --lr 1e30 --min-lr 0 --weight-decay 0 --grad-clip 0 --warmup 0 --grad-accum 2 --micro-batch 2
expect_ok "the same run without the fault exits 0" 30 "" "${run[@]}"
expect_summary
