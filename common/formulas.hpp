// formulas.hpp — the playbook's memory formulas as plain functions, next to the exact ones for OUR model,
// so tables, the planner and the tests print prediction beside measurement.
//
// Playbook: "First steps: training on one GPU" — "Memory usage in Transformers" (N = h v + L(12h^2 + 13h)
// + 2h; 4N/4N/8N bytes in fp32; 2N + 2N + 4N + 8N in bf16 mixed precision), "Activation memory"
// (s b h (34 + 5 a s / h) per layer) and "Activation recomputation".
// Test: tests/01_single_gpu/test_model.cpp checks llama_activation_bytes byte-exactly against the allocator's count
// (`build/bin/tests_01 -ts='ch01 np1'`).
#pragma once
#include <cmath>
#include <cstdint>
#include <vector>

#include "model_config.hpp"

namespace penta {

// ---- parameter counts ---------------------------------------------------------------------------------

// The playbook's count for a GPT-style block (4h^2 attention + 8h^2 MLP with biases, two LayerNorms with
// bias, a final LayerNorm, tied embedding, no positional table).
constexpr int64_t playbook_param_count(int64_t h, int64_t v, int64_t L) {
    return h * v + L * (12 * h * h + 13 * h) + 2 * h;
}

// Our Llama block: two RMSNorm weights (no bias), q/o of (nh hd, h), k/v of (nkv hd, h) (GQA), and
// SwiGLU's three (f, h) matrices; no biases anywhere. hd = 0: h / nh (a config's head_dim may differ).
constexpr int64_t llama_layer_param_count(int64_t h, int64_t nh, int64_t nkv, int64_t f, int64_t hd = 0) {
    if (hd == 0) hd = h / nh;
    return 2 * h + 2 * h * nh * hd + 2 * h * nkv * hd + 3 * h * f;
}

// + embedding (V, h), final norm (h) and, when untied, lm_head (V, h)
constexpr int64_t llama_param_count(int64_t V, int64_t h, int64_t L, int64_t nh, int64_t nkv, int64_t f,
                                    bool tied, int64_t hd = 0) {
    return V * h + L * llama_layer_param_count(h, nh, nkv, f, hd) + h + (tied ? 0 : V * h);
}

// ---- model state: weights, gradients, optimizer (Adam: momentum + variance) ---------------------------

struct ModelStateBytes {
    int64_t params = 0, grads = 0, master = 0, optim = 0;
    constexpr int64_t total() const { return params + grads + master + optim; }
};

// fp32 training: 4N + 4N + (4 + 4)N = 16N
constexpr ModelStateBytes model_state_bytes_fp32(int64_t N) { return {4 * N, 4 * N, 0, 8 * N}; }

// bf16 mixed precision: bf16 weights and grads, fp32 master weights, fp32 Adam state = 16N;
// fp32_grads adds the fp32 gradient accumulation buffer some libraries keep (nanotron): 20N
constexpr ModelStateBytes model_state_bytes_bf16_mixed(int64_t N, bool fp32_grads = false) {
    return {2 * N, 2 * N + (fp32_grads ? 4 * N : 0), 4 * N, 8 * N};
}

// ---- activations ------------------------------------------------------------------------------------

// Bytes one decoder layer of model.cpp saves for backward (struct LayerActs), for a micro-batch of
// B sequences of T tokens (N = B T), h hidden, nh query heads and nkv kv heads of size hd, f SwiGLU
// width (all LOCAL to a tensor-parallel rank). `bytes` is the activation element size (4 for f32); the
// RMSNorm rstd vectors and the attention log-sum-exp are always f32 statistics.
//   none / selective, per token:  x_in, xn1, x_mid, xn2      4h
//                                 q, attn_out                2 nh hd
//                                 k, v                       2 nkv hd
//                                 gate, up, act              3f
//                                 attn_rstd, mlp_rstd, lse   2 + nh  (f32)
//   none with the naive kernel adds the probabilities        nh T    (B, nh, T, T)
//   full: only x_in                                          h
//   offload: what none keeps, on the host between the layer's forward and backward (the bytes each way)
constexpr int64_t llama_layer_activation_bytes(Recompute r, AttentionKernel k, int64_t B, int64_t T,
                                               int64_t h, int64_t nh, int64_t nkv, int64_t hd, int64_t f,
                                               int64_t bytes = 4) {
    const int64_t N = B * T;
    if (r == Recompute::full) return bytes * N * h;
    int64_t elems = N * (4 * h + 2 * nh * hd + 2 * nkv * hd + 3 * f);
    if ((r == Recompute::none || r == Recompute::offload) && k == AttentionKernel::naive) elems += B * nh * T * T;
    return bytes * elems + 4 * N * (2 + nh);
}

// The head saves its input x (the last layer's output), the final norm's rstd and output xn, and the
// logits' gradient (N, V): the fused cross-entropy knows d loss / d logits during the forward pass, so it
// overwrites the logits with it and the backward only multiplies. The embedding saves nothing (it reads
// the tokens). Independent of the recompute mode.
constexpr int64_t llama_head_activation_bytes(int64_t B, int64_t T, int64_t h, int64_t V, int64_t bytes = 4) {
    const int64_t N = B * T;
    return bytes * N * (2 * h + V) + 4 * N;
}

// The whole model on one device (tp = 1): L layers + head.
inline int64_t llama_activation_bytes(const LlamaConfig& c, Recompute r, AttentionKernel k, int64_t B,
                                      int64_t T, int64_t bytes = 4) {
    return c.n_layers * llama_layer_activation_bytes(r, k, B, T, c.hidden, c.n_heads, c.n_kv_heads,
                                                     c.head_dim(), c.ffn, bytes) +
           llama_head_activation_bytes(B, T, c.hidden, c.vocab, bytes);
}

// The playbook's per-layer activation memory (Korthikanti et al. 2022, GPT block in mixed precision):
//   none       s b h (34 + 5 a s / h)   = 34 sbh + 5 a s^2 b
//   selective  34 s b h                 (the 5 a s^2 b of scores, softmax and its dropout mask is gone)
//   full       2 s b h                  (the layer input in 16-bit)
// Ours differs because:
//   - f32 here: 4 bytes per element where the playbook counts 2 (and 1 for dropout masks);
//   - no dropout, so none of the playbook's mask bytes (sbh each after attention and MLP, a s^2 b after
//     softmax);
//   - RMSNorm saves one f32 rstd per token instead of LayerNorm's mean and variance;
//   - GQA: k and v are nkv hd wide, not h;
//   - SwiGLU keeps three f-wide tensors (gate, up, act) where GPT keeps the 4h GELU input and output;
//   - the attention keeps one f32 lse per head and token (flash / recomputation needs it);
//   - only the probabilities P are kept, not the scores before softmax (the backward needs P only).
constexpr int64_t playbook_activation_bytes_per_layer(Recompute r, int64_t s, int64_t b, int64_t h,
                                                      int64_t a) {
    switch (r) {
        case Recompute::none:
        case Recompute::offload: return 34 * s * b * h + 5 * a * s * s * b;  // offload: on the host
        case Recompute::selective: return 34 * s * b * h;
        case Recompute::full: return 2 * s * b * h;
    }
    return 0;
}

// ---- tensor and sequence parallelism (chapters 04, 05) -------------------------------------------------

// Elements one decoder layer's TP boundaries send per micro-batch of s·b tokens, forward + backward, by
// the ring accounting of Comm's counters. TP: g all-reduces the (s b, h) output of attention and of the MLP
// in forward, f the two input gradients in backward: 4 all-reduces of 2(t-1)/t · s b h. SP replaces each
// all-reduce by an all-gather + reduce-scatter pair of (t-1)/t · s b h each: the same total. Half of it is
// sent in forward, half in backward.
constexpr double tp_layer_comm_elements(int64_t t, int64_t s, int64_t b, int64_t h) {
    return 8.0 * (double)(t - 1) / (double)t * (double)(s * b * h);
}

// Bytes one layer's norm / residual regions keep for backward (LayerActs x_in and x_mid (N, h), attn_rstd
// and mlp_rstd (N) f32): sequence parallelism keeps only this rank's N / sp tokens (sp = 1 without SP).
constexpr int64_t llama_norm_region_activation_bytes(int64_t B, int64_t T, int64_t h, int64_t sp = 1,
                                                     int64_t bytes = 4) {
    return B * T / sp * (2 * h * bytes + 2 * 4);
}

// ---- ZeRO (chapter 03) ------------------------------------------------------------------------------

// Elements rank r of N holds when each unit of the flat buffer (embedding, every layer, head; their numels
// in unit_numels) is cut into N parts, the first n % N of them one element longer — no padding
// (03_zero/zero_shard.hpp). Sums to Ψ over the ranks; exactly Ψ/N when N divides every unit.
inline int64_t zero_shard_numel(const std::vector<int64_t>& unit_numels, int N, int r) {
    int64_t s = 0;
    for (int64_t n : unit_numels) s += n / N + (r < n % N ? 1 : 0);
    return s;
}

// Model-state bytes on one rank, S = zero_shard_numel(...) (stage 0 = plain DP), for weights of param_b bytes,
// gradients of grad_b, an fp32 master of master_b (0: none) and Adam's two fp32 moments: ZeRO-3 shards the
// weights, ZeRO-2 and up the gradients, ZeRO-1 and up the master and the moments.
constexpr ModelStateBytes zero_model_state_bytes(int stage, int64_t psi, int64_t S, int64_t param_b, int64_t grad_b,
                                                 int64_t master_b) {
    return {param_b * (stage >= 3 ? S : psi), grad_b * (stage >= 2 ? S : psi), master_b * (stage >= 1 ? S : psi),
            8 * (stage >= 1 ? S : psi)};
}

// fp32 training:
//   stage 0: 4Ψ + 4Ψ + 8Ψ    ZeRO-1: 4Ψ + 4Ψ + 8S    ZeRO-2: 4Ψ + 4S + 8S    ZeRO-3: 4S + 4S + 8S
// No master copy: AdamW updates the fp32 weights themselves. Transient buffers (gathered units, per-unit
// gradient buffers) are not model state: ch03 tags them Tag::comm.
constexpr ModelStateBytes zero_model_state_bytes_fp32(int stage, int64_t psi, int64_t S) {
    return zero_model_state_bytes(stage, psi, S, 4, 4, 0);
}

// The playbook's bf16 mixed-precision version, 2Ψ + 2Ψ + kΨ with k = 12 (fp32 master 4 + Adam 8), each
// term divided by N once its stage shards it: ZeRO-1 2Ψ + 2Ψ + 12Ψ/N, ZeRO-2 2Ψ + (2 + 12)Ψ/N,
// ZeRO-3 (2 + 2 + 12)Ψ/N. Ψ/N rounded down (the playbook's figures assume N divides Ψ).
constexpr ModelStateBytes zero_model_state_bytes_bf16_mixed(int stage, int64_t psi, int64_t N) {
    const int64_t part = psi / N;
    return {2 * (stage >= 3 ? part : psi), 2 * (stage >= 2 ? part : psi), 4 * (stage >= 1 ? part : psi),
            8 * (stage >= 1 ? part : psi)};
}

// The same in bf16 mixed precision with this code's uneven shards (S = zero_shard_numel(...)): bf16 weights and
// grads (2 bytes), the fp32 master copy and Adam's two fp32 moments (4 + 8) on the optimizer's shard:
//   stage 0: 2Ψ + 2Ψ + 12Ψ   ZeRO-1: 2Ψ + 2Ψ + 12S   ZeRO-2: 2Ψ + 2S + 12S   ZeRO-3: 2S + 2S + 12S
// (zero_model_state_bytes_bf16_mixed is the playbook's closed form, Ψ/N for S.)
constexpr ModelStateBytes zero_model_state_bytes_bf16(int stage, int64_t psi, int64_t S) {
    return zero_model_state_bytes(stage, psi, S, 2, 2, 4);
}

// Context parallelism's ring attention (06_context_parallel/ring_attention.hpp), bytes one rank sends per layer
// and micro-batch: its K and V block M = 2 · b · (s / cp) · n_kv · d · elem goes round the ring, cp - 1 hops in
// forward, and in backward again with its dK/dV, which travel one hop more: (cp - 1) M + (2 cp - 1) M.
// n_kv: this rank's kv heads (n_kv / tp under TP).
constexpr double cp_ring_layer_bytes(int64_t cp, int64_t b, int64_t s, int64_t nkv, int64_t d, int64_t elem = 4) {
    const double M = 2.0 * (double)b * (double)(s / cp) * (double)(nkv * d * elem);
    return cp > 1 ? (double)(cp - 1) * M + (double)(2 * cp - 1) * M : 0.0;
}

// Bytes one rank sends per optimizer step under ZeRO, by the ring accounting of comm.hpp (each collective
// counts (N-1)/N of its buffer). Write P = (N-1)/N · elem_bytes · Ψ, A = grad_accum:
//   ZeRO-1  reduce-scatter of the gradients once + all-gather of the updated weights        2P
//   ZeRO-2  a reduce-scatter in every micro-batch's backward + the all-gather               (A + 1)P
//   ZeRO-3  per micro-batch: all-gather in forward (P) + all-gather in backward + reduce-scatter (P);
//           the backward gathers every unit but an UNTIED embedding, whose backward reads no weights:
//           A (3P - (N-1)/N · elem_bytes · E), E = V h untied, 0 tied (the head re-reads a tied table)
// So without accumulation ZeRO-3 / ZeRO-1 = 3/2 exactly for a tied model: the playbook's 3Ψ vs 2Ψ.
// grad_bytes: the reduce-scatters carry gradients of that size (f32 beside bf16 weights); 0: elem_bytes.
inline double zero_step_bytes(int stage, int64_t psi, int64_t embedding, bool tied, int64_t A, int N,
                              int64_t elem_bytes = 4, int64_t grad_bytes = 0) {
    const double ring = N > 1 ? double(N - 1) / N : 0.0;
    const double f = ring * (double)elem_bytes, g = ring * (double)(grad_bytes > 0 ? grad_bytes : elem_bytes);
    if (stage <= 1) return (f + g) * (double)psi;
    if (stage == 2) return ((double)A * g + f) * (double)psi;
    return (double)A * ((f + g) * (double)psi + f * (double)(psi - (tied ? 0 : embedding)));
}

// ---- pipeline parallelism (chapter 07) ----------------------------------------------------------------------

// The bubble: the time a stage idles in one step's schedule as a fraction of the time it computes, on p stages
// with m micro-batches (the playbook's r = (p-1)(t_f + t_b) / (m (t_f + t_b))). AFAB and 1F1B idle alike:
// 1F1B changes the memory, not the bubble.
constexpr double pipeline_bubble_1f1b(int p, int m) { return double(p - 1) / m; }
// Interleaved 1F1B with v chunks per stage: the warm-up and cool-down take 1/v of the time each (m a multiple
// of p, as Megatron-LM requires)
constexpr double pipeline_bubble_interleaved(int p, int m, int v) { return double(p - 1) / (double(v) * m); }
// ZB-H1 (Qi et al. 2024, "Zero Bubble Pipeline Parallelism"): (p-1)(t_F + t_B - t_W) / (m (t_F + t_B + t_W)),
// t_B the input-gradient pass only; the W's fill the cool-down. Holds for t_W <= t_F, m >= p.
constexpr double pipeline_bubble_zb1(int p, int m, double tf, double tb, double tw) {
    return (p - 1) * (tf + tb - tw) / (m * (tf + tb + tw));
}
// DualPipe (DeepSeek-V3 technical report, Table 2): (p/2 - 1)(t_F&B + t_B - 3 t_W) with t_B the whole backward
// and F&B a forward chunk overlapped with a backward chunk. Run one after the other (t_F&B = t_F + t_B) and with
// t_B' = t_B - t_W the input-gradient pass: (p/2 - 1)(t_F + 2 t_B' - t_W) — a bound: the sends here leave as soon
// as a chunk ends, and the measured bubble is below it.
constexpr double pipeline_bubble_dualpipe_bound(int p, int m, double tf, double tb, double tw) {
    return (p / 2 - 1) * (tf + 2 * tb - tw) / (m * (tf + tb + tw));
}
// The most micro-batches (model chunks of one) a stage holds between their forward and their weight gradient:
// AFAB all m; 1F1B p - i on stage i (0-based; the playbook's p - i + 1 counts from 1); interleaved, in chunks,
// its warm-up 2(p-i-1) + (v-1)p plus one; ZB-H1 p on every stage (1F1B's first stage's); DualPipe p + 1 chunks
// (DeepSeek's "PP + 1", for m >= 2p).
constexpr int pipeline_in_flight_afab(int m) { return m; }
constexpr int pipeline_in_flight_1f1b(int p, int i, int m) { return p - i < m ? p - i : m; }
constexpr int pipeline_in_flight_interleaved(int p, int i, int m, int v) {
    return 2 * (p - i - 1) + (v - 1) * p + 1 < m * v ? 2 * (p - i - 1) + (v - 1) * p + 1 : m * v;
}
constexpr int pipeline_in_flight_zb1(int p, int m) { return p < m ? p : m; }
constexpr int pipeline_in_flight_dualpipe(int p) { return p + 1; }
// Bytes a stage sends per step: one (tokens, h) activation per forward it passes on and one gradient of it per
// backward it passes back, elem_bytes each; tokens = b s (b s / tp under sequence parallelism). The seeds'
// appendix: 4 s b h bytes per micro-batch in 16-bit, both ways.
constexpr double pipeline_stage_bytes(int64_t sends, int64_t tokens, int64_t h, int64_t elem_bytes = 4) {
    return (double)sends * (double)(tokens * h * elem_bytes);
}

// A measured byte count against its formula. Both are doubles: ring accounting adds (K-1)/K·M per call,
// which is not an integer when K does not divide M, and sums of such terms differ in the last bit from the
// formula's closed form. Equal to 1e-9 relative is "equal"; a real accounting bug is off by whole parts.
inline bool formula_matches(double measured, double formula) {
    const double scale = formula < 0 ? -formula : formula;
    const double diff = measured > formula ? measured - formula : formula - measured;
    return diff <= 1e-9 * (scale > 1 ? scale : 1);
}

// ---- mixture of experts and expert parallelism (chapter 08) ---------------------------------------------

// A MoE model's parameters (moe_config.hpp). Per MoE layer: the norms and attention of our Llama block, the
// router (E, h), E experts of 3 h f_e each and the shared experts' 3 h (n_s f_e); the first_dense layers keep
// the dense 3 h f MLP. total counts every expert; active what one token computes with: its k experts instead
// of E, and everything else — embedding and head included, as Mixtral's "46.7B total, 12.9B active" counts.
struct MoeParamCount {
    int64_t total = 0, active = 0;
};
inline MoeParamCount moe_param_count(const LlamaConfig& c) {
    const MoeConfig& m = c.moe;
    const int64_t h = c.hidden, dense = m.first_dense < c.n_layers ? m.first_dense : c.n_layers;
    const int64_t block = llama_layer_param_count(h, c.n_heads, c.n_kv_heads, 0, c.head_dim());  // norms + attention
    const int64_t expert = 3 * h * m.expert_ffn, always = m.experts * h + 3 * h * m.shared_experts * m.expert_ffn;
    const int64_t ends = c.vocab * h + h + (c.tied_embeddings ? 0 : c.vocab * h);  // embedding, final norm, lm_head
    const int64_t dense_layers = dense * (block + 3 * h * c.ffn), moe_layers = c.n_layers - dense;
    return {ends + dense_layers + moe_layers * (block + always + m.experts * expert),
            ends + dense_layers + moe_layers * (block + always + m.top_k * expert)};
}

// Bytes rank r sends on its expert-parallel group for one MoE layer of one micro-batch, counted as comm.hpp
// counts an all-to-all (what leaves the rank). S[p][q]: the token copies rank p routes to experts held by rank
// q (its kept choices, after the capacity), P = S.size() ranks of El experts each, h the hidden size, elem the
// bytes of an activation. Tokens for the rank's own experts never leave it.
//   forward:  the counts, El int32 to each other rank; the dispatch, S[r][q] rows of h to each q != r; the
//             combine, the S[q][r] rows it computed back to each q != r
//   backward: the two row exchanges again (d expert outputs out, d expert inputs back); the counts are known
inline double ep_layer_all_to_all_bytes(const std::vector<std::vector<int64_t>>& S, int r, int64_t h, int64_t El,
                                        bool backward, int64_t elem = 4) {
    const int P = (int)S.size();
    double rows = 0;
    for (int q = 0; q < P; q++)
        if (q != r) rows += (double)(S[r][q] + S[q][r]);
    const double exchange = rows * (double)h * (double)elem;
    return (double)(P - 1) * (double)El * 4 + exchange * (backward ? 2 : 1);
}

// ---- recomputation's FLOPs and the checkpoint interval (the seeds' figures; tests/00_common/test_seed_numbers.cpp)

// Korthikanti et al. 2022's count of a GPT layer's forward for a micro-batch of b sequences of s tokens: 24 b s h^2
// (q, k, v, o and the 4h MLP: 2 FLOPs per multiply-add of 12 h^2 weights per token) + 4 b s^2 h (Q K^T and P V);
// the backward is twice the forward.
constexpr double playbook_layer_forward_flops(int64_t s, int64_t b, int64_t h) {
    return 24.0 * (double)(b * s) * (double)h * (double)h + 4.0 * (double)b * (double)s * (double)s * (double)h;
}
// What one layer's recomputation adds to that: full reruns the forward; selective reruns only the attention core
// (Q K^T, softmax, P V) whose [a, s, s] tensors it dropped, 4 b s^2 h (the softmax's O(a s^2) is not a matmul).
constexpr double playbook_recompute_flops_per_layer(Recompute r, int64_t s, int64_t b, int64_t h) {
    switch (r) {
        case Recompute::none:
        case Recompute::offload: return 0.0;  // offload pays in bytes moved, not FLOPs
        case Recompute::selective: return 4.0 * (double)b * (double)s * (double)s * (double)h;
        case Recompute::full: return playbook_layer_forward_flops(s, b, h);
    }
    return 0.0;
}

// Young's first-order optimum for the time between checkpoints, sqrt(2 delta M): delta the stall one save costs,
// M the mean time between failures (both in seconds). Seed 003: Llama 3's MTBF 3.09 h, 60 s -> ~19 min.
inline double optimal_checkpoint_interval_s(double save_stall_s, double mtbf_s) {
    return std::sqrt(2.0 * save_stall_s * mtbf_s);
}

}  // namespace penta
