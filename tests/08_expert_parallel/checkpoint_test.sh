#!/usr/bin/env bash
# checkpoint_test.sh — checkpoints of a mixture of experts (chapter 08), on CPU ranks, tiny-moe at dp 4 × ep 2 (two
# ep groups of 2 ranks: each expert on one rank of a group, replicated over the 2 groups, edp 2):
#   1. --moe-balance aux: a 10-step run saves at step 5 (12.00 bytes a parameter: every expert written once,
#      by its edp rank 0); resumed from it, steps 6-10 equal the uninterrupted run's bit for bit;
#   2. --moe-balance bias (DeepSeek-V3's per-expert bias, state outside the flat buffer and the optimizer): the
#      bias of each MoE layer is in the checkpoint (the balance hook hands it over: common/checkpoint_state.hpp),
#      so the resumed run routes as the uninterrupted one did, bitwise (a resume that restarts the bias from
#      zero differs by up to 5.9e-3 relative in steps 6-10 at this rate); a checkpoint without them (aux) is
#      refused by a bias run, naming the tensor;
#   3. resharding: that bias checkpoint resumed at ep 1 on one rank (the same global batch of 4 sequences):
#      each expert's slices and the bias read by name, steps 6-10 within rtol 1e-5.
# `make test CH=08` runs it.   bash tests/08_expert_parallel/checkpoint_test.sh   (BIN, MPIRUN as make sets them)
set -uo pipefail
here=$(dirname "$0")
source "$here/../expect_fail.sh"
source "$here/../checkpoint_testing.sh"
expect_needs_mpi "checkpoint test (chapter 08)"
common=(--model tiny-moe --seq 16 --steps 10 --warmup 2 --log-every 1 --eval-every 0)
ep=($MPIRUN -np 4 "$BIN/08_expert_parallel" --dp 4 --ep 2 --micro-batch 1 "${common[@]}")

ckpt_run "ep 2 x dp 4, aux: 10 steps, saved at 5" 400 "${ep[@]}" --save "$TMP/aux" --save-every 5 \
    --log-jsonl "$TMP/aux.jsonl"
ckpt_grep "ep 2 x dp 4: 12 bytes a parameter (each expert written once)" "12.00 bytes/param (param 4.00 + m 4.00 + v 4.00)"
ckpt_run "ep 2 x dp 4, aux: resumed from step 5" 400 "${ep[@]}" --resume "$TMP/aux/step_000005" \
    --log-jsonl "$TMP/aux_res.jsonl"
ckpt_grep "the resumed line names the saving layout, ep included" "saved by 4 ranks (dp 4 pp 1 cp 1 tp 1 ep 2)"
ckpt_compare "ep 2 x dp 4, aux: resumed steps 6-10 equal the uninterrupted run's" "$TMP/aux.jsonl" "$TMP/aux_res.jsonl" \
    bitwise
expect_fail "an aux checkpoint resumed with --moe-balance bias: the biases it lacks are named" 120 \
    "holds no model.layers.0.block_sparse_moe.gate.e_score_correction_bias" "${ep[@]}" --moe-balance bias \
    --resume "$TMP/aux/step_000005"

bias=(--moe-balance bias --moe-bias-rate 0.01)
ckpt_run "ep 2 x dp 4, bias: 10 steps, saved at 5" 400 "${ep[@]}" "${bias[@]}" --save "$TMP/bias" --save-every 5 \
    --log-jsonl "$TMP/bias.jsonl"
ckpt_grep "bias: the 4 layers' biases saved as state" "+ state 0.00)"
ckpt_run "ep 2 x dp 4, bias: resumed from step 5" 400 "${ep[@]}" "${bias[@]}" --resume "$TMP/bias/step_000005" \
    --log-jsonl "$TMP/bias_res.jsonl"
ckpt_grep "bias: the resumed run restored them" "; 4 state tensors of the hooks"
ckpt_compare "ep 2 x dp 4, bias: resumed steps 6-10 equal the uninterrupted run's" "$TMP/bias.jsonl" \
    "$TMP/bias_res.jsonl" bitwise

ckpt_run "ep 2 x dp 4 -> ep 1 on one rank, bias: resumed from step 5" 400 "$BIN/08_expert_parallel" --dp 1 --ep 1 \
    --micro-batch 4 "${common[@]}" "${bias[@]}" --resume "$TMP/bias/step_000005" --log-jsonl "$TMP/bias_ep1.jsonl"
ckpt_compare "ep 2 x dp 4 -> ep 1, bias: steps 6-10 within 1e-5" "$TMP/bias.jsonl" "$TMP/bias_ep1.jsonl" 1e-5
expect_summary
