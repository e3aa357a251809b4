#!/usr/bin/env bash
# bad_inputs_test.sh — chapter 08's rows of the bad-input table: the MoE flags (--moe-balance, --moe-capacity,
# --moe-aux-coef, --moe-router, --moe-shared), a dense model, experts that --ep does not divide, the layout's
# rules, Mixtral configs this layer does not model, the one-rank dump, and the parallelisms of other chapters.
# Each row runs chapter 08 under mpirun and must exit non-zero, not by a signal, within 10 s, naming the flag
# or file and the rule (tests/expect_fail.sh). `make test CH=08`.
#   bash tests/08_expert_parallel/bad_inputs_test.sh     (BIN: the programs' folder; MPIRUN: as make sets it)
set -uo pipefail
source "$(dirname "$0")/../expect_fail.sh"
expect_needs_mpi "bad inputs test (chapter 08)"

# small Mixtral configs: 6 experts (ep 4 does not divide them), a sliding window of 16 tokens (shorter than the
# default --seq 32: refused; as long as --seq 16: the control run at the end), and a qwen2_moe
llama='"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
  "intermediate_size": 32, "vocab_size": 256, "max_position_embeddings": 64'
echo "{\"model_type\": \"mixtral\", \"num_local_experts\": 6, \"num_experts_per_tok\": 2, $llama}" >"$TMP/six.json"
echo "{\"model_type\": \"mixtral\", \"num_local_experts\": 4, \"num_experts_per_tok\": 2, \"sliding_window\": 16, $llama}" >"$TMP/window.json"
echo "{\"model_type\": \"qwen2_moe\", \"num_experts\": 4, $llama}" >"$TMP/qwen.json"

EXPECT_JOBS=2 expect_table 10 $MPIRUN -np 2 "$BIN/08_expert_parallel" <<'EOF'
--moe-balance loss                 | --moe-balance loss must be none, aux
--moe-capacity -1                  | --moe-capacity -1 must be a finite number >= 0
--moe-aux-coef nan                 | --moe-aux-coef nan must be a finite number >= 0
--moe-router tanh                  | --moe-router tanh must be softmax or sigmoid
--moe-router sigmoid               | --moe-balance aux with sigmoid scores && --moe-balance bias
--moe-shared -2                    | --moe-shared -2 must be >= 0
--model tiny                       | --model tiny is a dense model: chapter 08 trains a mixture of experts
--ep 3                             | --ep 3 must be between 1 and the job's 2 rank(s)
--dp 1 --cp 2 --ep 1               | --pp 1 --cp 2: this program combines --ep with --dp, --tp (--sp) and ZeRO
--zero 4                           | --zero 4 must be 1, 2 or 3
--model $TMP/window.json           | $TMP/window.json: sliding_window 16 < --seq 32: each token would attend to the last 16 tokens only
--model $TMP/window.json --seq 16 --steps 0 --generate hello --max-new 20 | $TMP/window.json: sliding_window 16 < the 25 tokens --generate's prompt (5) and --max-new 20 make
--model $TMP/qwen.json             | model_type "qwen2_moe" does not fit this MoE layer: its attention has q/k/v biases
--dump-reference $TMP/dump         | --dump-reference: the dump is of the whole model on one rank
--moe-balance bias --export-hf $TMP/x | would have a per-expert routing bias (--moe-balance bias) added to the router's scores when it picks the experts, which transformers' MixtralForCausalLM has no place
--moe-shared 1 --export-hf $TMP/x  | which has no place for: 1 shared experts (DeepSeekMoE)
EOF
EXPECT_JOBS=2 expect_table 10 $MPIRUN -np 4 "$BIN/08_expert_parallel" <<'EOF'
--dp 4 --ep 3                      | --ep 3 must divide --dp 4 × --cp 1 = 4
--dp 4 --ep 4 --model $TMP/six.json | --ep 4 must divide the model's 6 experts
--dp 2 --tp 2 --ep 2 --sp --micro-batch 1 --seq 3 | --sp splits the --micro-batch 1 × --seq 3 tokens into --tp 2 equal blocks
EOF
# a Mixtral's sliding window that no sequence of the run exceeds changes nothing (transformers masks only
# tokens more than 16 back): the run trains
expect_ok "--model window.json --seq 16: a sliding window as long as the sequences, one step" 60 "step 1/1" \
    $MPIRUN -np 2 "$BIN/08_expert_parallel" --model "$TMP/window.json" --seq 16 --steps 1 --eval-every 0
expect_summary
