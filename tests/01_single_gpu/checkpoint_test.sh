#!/usr/bin/env bash
# checkpoint_test.sh — checkpoints of chapter 01's program on one CPU rank, end to end (the in-process cases are
# tests/00_common/test_checkpoint.cpp):
#   1. bf16 (--precision bf16: bf16 weights and GEMMs, fp32 master): saved at step 5, resumed, steps 6-10 equal
#      the uninterrupted run's bit for bit;
#   2. that bf16 checkpoint resumed in fp32: allowed, printed as a precision change;
#   3. --steps 0 --resume DIR --export-hf: the checkpoint's weights exported without training (no AdamW state
#      is built), the same file byte for byte as the export at the end of the run that saved it (bf16);
#   4. --save-every auto: the interval √(2δM) printed in steps after the first save (step 1), and a save at
#      that step (an MTBF of 0.018 s makes it a few steps: δ ~ 0.3 s and a step ~ 0.04 s give 3).
# `make test CH=01` runs it.   bash tests/01_single_gpu/checkpoint_test.sh   (BIN as make sets it)
set -uo pipefail
here=$(dirname "$0")
source "$here/../expect_fail.sh"
source "$here/../checkpoint_testing.sh"
common=("$BIN/01_single_gpu" --model small --seq 16 --micro-batch 2 --steps 10 --warmup 2 --log-every 1 --eval-every 0)
bf16=("${common[@]}" --precision bf16)

ckpt_run "bf16: 10 steps, saved at 5 and 10" 300 "${bf16[@]}" --save "$TMP/h" --save-every 5 --log-jsonl "$TMP/h.jsonl"
ckpt_grep "bf16: the checkpoint holds 14 bytes a parameter (bf16 weights + fp32 master + m + v)" \
    "14.00 bytes/param (param 2.00 + master 4.00 + m 4.00 + v 4.00)"
ckpt_run "bf16: resumed from step 5" 300 "${bf16[@]}" --resume "$TMP/h/step_000005" --log-jsonl "$TMP/h_res.jsonl"
ckpt_compare "bf16: resumed steps 6-10 equal the uninterrupted run's" "$TMP/h.jsonl" "$TMP/h_res.jsonl" bitwise

ckpt_run "bf16 checkpoint resumed in fp32" 300 "${common[@]}" --resume "$TMP/h/step_000005"
ckpt_grep "bf16 -> fp32: a precision change, said so" "note: a precision change: saved in (param bf16"

ckpt_run "bf16: 5 steps, saved at 5, exported at the end" 300 "${common[@]}" --precision bf16 --steps 5 \
    --save "$TMP/b" --save-every 5 --export-hf "$TMP/b_end"
ckpt_run "bf16: --steps 0 --resume step 5 --export-hf" 300 "${common[@]}" --precision bf16 --steps 0 \
    --resume "$TMP/b/step_000005" --export-hf "$TMP/b_loaded"
why=""
cmp -s "$TMP/b_end/model.safetensors" "$TMP/b_loaded/model.safetensors" ||
    why="the export of the loaded checkpoint differs from the export at the end of the run that saved it"
expect_verdict "--steps 0 --resume: the checkpoint's weights exported, byte for byte the saving run's" "$why" \
    "$(ls -l "$TMP/b_end/model.safetensors" "$TMP/b_loaded/model.safetensors" 2>&1)" "$ckpt_last_output"

ckpt_run "--save-every auto (MTBF 0.018 s)" 300 "${common[@]}" --save "$TMP/auto" --save-every auto \
    --mtbf-hours 0.000005
line=$(grep -F -e "--save-every auto: δ =" <<<"$ckpt_last_output")
every=$(sed -nE 's/.* = every ([0-9]+) steps of .*/\1/p' <<<"$line")
why=""
[ -z "$every" ] && why="no '--save-every auto: ... every N steps' line"
[ -z "$why" ] && [ ! -d "$TMP/auto/step_000001" ] && why="no save at step 1 (the one that measures δ)"
[ -z "$why" ] && [ "$every" -gt 9 ] && why="the interval, $every steps, leaves no save inside the run to check"
[ -z "$why" ] && [ ! -d "$TMP/auto/$(printf 'step_%06d' "$every")" ] &&
    why="the interval is $every steps, and step $every was not saved"
[ -z "$why" ] && [ "$(cat "$TMP/auto/latest")" != step_000010 ] && why="latest is not step_000010 (the last step)"
expect_verdict "--save-every auto: δ measured at step 1, the interval printed and kept" "$why" \
    "${line:-no line}; saved: $(ls "$TMP/auto" | grep -v latest | tr '\n' ' ')" "$ckpt_last_output"
expect_summary
