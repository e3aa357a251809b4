#!/usr/bin/env bash
# plan_bad_inputs_test.sh — chapter 09's layout planner, its rows of the bad-input table: the machine, the
# model, the sizes, and a layout given by flags that breaks a rule (tp across nodes, ZeRO-3 with pp, sp without
# tp, a grid that is not the GPU count, cp that does not cut the sequence, degrees whose product does not divide
# the GPUs) or that names a layout's options without its degrees, a --pp-chunks beyond the layers or an int, and
# no plan (nothing fits, no legal layout, one layout that does not fit: printed, then exit 1). Each row runs
# build/bin/09_5d_plan (one process, no mpirun) and must exit non-zero, not by a signal, within 20 s, naming the
# flag and the rule
# (tests/expect_fail.sh); control runs rank a small job, saying why its first layout wins, read a Hugging Face
# config.json, and evaluate the one layout --tp and --pp give without --dp. `make test CH=09`.
#   bash tests/09_5d/plan_bad_inputs_test.sh     (BIN: the programs' folder)
set -uo pipefail
source "$(dirname "$0")/../expect_fail.sh"

echo '{"hidden_size": 64}' > "$TMP/config.json"
mkdir -p "$TMP/llama"  # Llama 3 8B's Hugging Face config.json keys: the planner must read it as the preset
cat > "$TMP/llama/config.json" <<'JSON'
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32,
 "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256,
 "max_position_embeddings": 8192, "rope_theta": 500000.0, "rms_norm_eps": 1e-05, "tie_word_embeddings": false,
 "hidden_act": "silu"}
JSON
EXPECT_JOBS=2 expect_table 20 "$BIN/09_5d_plan" <<'EOF'
--machine a100                                  | --machine a100: unknown machine; choose one of h100, h200, cpu
--model llama9                                  | unknown model preset 'llama9'
--model $TMP/missing.json                       | --model $TMP/missing.json: no such file
--model $TMP/config.json                        | $TMP/config.json
--gpus 0                                        | --gpus 0 must be in 1..1048576
--efficiency 1.5                                | --efficiency 1.5 must be in (0, 1]
--seq 0                                         | --seq 0 must be in 1..16777216
--global-batch 0                                | --global-batch 0 must be >= 1
--precision fp8                                 | --precision fp8: choose fp32
--gpus 64 --dp 4 --tp 16                        | --tp 16 must divide the model's 8 key/value heads
--model llama3-70b --gpus 32 --dp 1 --tp 8 --pp 4 --zero 3 | --zero 3 with --pp 4
--gpus 64 --dp 64 --sp                          | --sp needs --tp > 1
--gpus 64 --dp 8 --tp 4                         | --dp
--gpus 64 --dp 8 --cp 8 --seq 4100              | --cp 8: --seq 4100 must split into 2·cp = 16 zig-zag chunks
--steps 5                                       | unknown flag --steps
--gpus 64 --zero 1 --sp                         | --zero 1 --sp: these describe one layout, and without its degrees
--gpus 64 --tp 3 --pp 2                         | --tp 3 × --pp 2 × --cp 1 = 6 does not divide --gpus 64
--gpus 64 --tp 8 --pp 2 --pp-schedule interleaved --pp-chunks 1000000000 | the model has 32 layers, fewer than the pipeline's 2000000000 virtual stages
--gpus 64 --tp 8 --pp 2 --pp-schedule interleaved --pp-chunks 4294967298 | --pp-chunks 4294967298 is out of range: at most 2147483647
# no plan: the table is printed, and the exit status says there is none
--model llama3-70b --gpus 1 --global-batch 8    | nothing fits: the closest layout
--model tiny --machine cpu --gpus 3 --seq 8 --global-batch 8 --precision fp32 | no legal layout of model tiny on --gpus 3
--model llama3-70b --gpus 8 --dp 8              | layout dp 8 tp 1 pp 1 cp 1 && does not fit: its fullest GPU needs
EOF
expect_ok "a small job ranked, and why the first layout wins" 60 "step 3, maximise throughput" \
    "$BIN/09_5d_plan" --model smollm-135m --machine h100 --gpus 8 --seq 2048 --global-batch 64 --top 3
expect_ok "a Hugging Face config.json folder read as the model (8.03B, as the llama3-8b preset)" 60 "8.03B parameters" \
    "$BIN/09_5d_plan" --model "$TMP/llama" --machine h200 --gpus 16 --global-batch 64 --top 2
expect_ok "--tp and --pp without --dp: that one layout, dp from the GPUs left (was: every layout ranked)" 60 \
    "layout dp 4 tp 8 pp 2 cp 1 && per-rank prediction" \
    "$BIN/09_5d_plan" --model llama3-8b --machine h100 --gpus 64 --tp 8 --pp 2
expect_summary
