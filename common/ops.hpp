// ops.hpp — every op the Llama trainer needs, as forward/backward pairs, dispatched on the tensor's device.
//
// The CPU versions (ops_cpu.cpp, attention_cpu.cpp) are the reference: plain loops and OpenBLAS sgemm.
// The CUDA versions (cuda/*.cu) use cuBLAS and our own kernels and are tested against the CPU ones.
// Playbook: "First steps: training on one GPU" (the ops of one training step) and "Flash attention"
// (the online-softmax attention that also returns the log-sum-exp, which context parallelism merges).
//
// Conventions, the same for every op:
// - tensors are contiguous, row-major, f32 unless a comment says otherwise; token ids are i32;
// - all operands of one call live on the same device;
// - outputs are overwritten; PARAMETER gradients (dW, dw, dtable) are ACCUMULATED (+=), so gradient
//   accumulation over micro-batches needs no extra buffer; attention backward accumulates into
//   dq/dk/dv too, because context parallelism sums partial contributions from several key blocks;
// - shapes are checked, and a mismatch names the op and the shapes.
// Gradient checks of every op: tests/00_common/test_ops.cpp, tests/00_common/test_attention.cpp (`make test CH=00`).
#pragma once
#include <cmath>
#include <vector>

#include "tensor.hpp"

namespace penta {

// ---- GEMM ------------------------------------------------------------------------------------------
// C = alpha * op(A) @ op(B) + beta * C. op(A) is (M, K): A is (..., M, K), or (..., K, M) when transA.
// op(B) is (K, N). C is (..., M, N). Leading (batch) dims of A and C must match; B either has the same
// leading dims or is 2-D and shared by every batch entry.
void matmul(const Tensor& A, const Tensor& B, Tensor& C, bool transA, bool transB, float alpha = 1.0f,
            float beta = 0.0f);
// While one is alive, f32 matmuls on a GPU may use TF32 tensor cores when `allow` (the precision policy's
// tf32: the model opens one around each pass); the previous setting comes back when it goes. Off outside
// any scope. The CPU always computes in f32; attention's own GEMMs stay f32 (the reference path).
class Tf32Scope {
   public:
    explicit Tf32Scope(bool allow);
    ~Tf32Scope();
    Tf32Scope(const Tf32Scope&) = delete;
    Tf32Scope& operator=(const Tf32Scope&) = delete;
    static bool allowed();

   private:
    bool previous_;
};

// Linear without bias, the PyTorch / Hugging Face layout: W is (out, in), y = x @ W^T.
void linear_forward(const Tensor& x, const Tensor& W, Tensor& y);  // x (N, in) -> y (N, out)
// dx (N, in) = dy @ W (overwritten; skipped when dx is undefined); dW (out, in) += dy^T @ x (skipped when dW
// is undefined). The two halves are independent: the input gradient (B) needs W, the weight gradient (W)
// needs only dy and x, which is what lets zero-bubble pipeline schedules run them at different times.
void linear_backward(const Tensor& dy, const Tensor& x, const Tensor& W, Tensor& dx, Tensor& dW);

// ---- embedding ---------------------------------------------------------------------------------------
// out (N, h) = table[tokens - vocab_start]; tokens outside [vocab_start, vocab_start + V) give zero rows
// (a vocab-parallel shard holds rows [vocab_start, vocab_start + V) of the full table).
void embedding_forward(const Tensor& tokens, const Tensor& table, Tensor& out, int64_t vocab_start = 0);
void embedding_backward(const Tensor& tokens, const Tensor& dout, Tensor& dtable, int64_t vocab_start = 0);

// ---- RMSNorm -----------------------------------------------------------------------------------------
// y = x / sqrt(mean(x^2) + eps) * w ; x, y (N, h); w (h); rstd (N) saved for backward
void rmsnorm_forward(const Tensor& x, const Tensor& w, Tensor& y, Tensor& rstd, float eps);
// dx (N, h) overwritten, dw (h) accumulated; either may be undefined (skipped): the input gradient alone
// (B, needs w) or the weight gradient alone (W, needs only dy, x, rstd), with the bits of the fused call
void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd, Tensor& dx,
                      Tensor& dw);

// ---- RoPE (Hugging Face Llama convention: rotate_half pairs element i with i + hd/2) -------------------
// x, out (B, T, nh, hd); pos (T) i32 global positions; inv_freq (hd/2) f32, the model's table (rope.hpp:
// theta^(-2i/hd), rescaled for Llama 3.1's rope_scaling); angle = pos * inv_freq_i in f32, as HF computes
// it. out may alias x. Backward is the rotation by -angle.
void rope_forward(const Tensor& x, const Tensor& pos, const Tensor& inv_freq, Tensor& out);
void rope_backward(const Tensor& dout, const Tensor& pos, const Tensor& inv_freq, Tensor& dx);

// ---- causal attention with GQA -------------------------------------------------------------------------
// q (B, Tq, nh, hd); k, v (B, Tk, nkv, hd); out (B, Tq, nh, hd); lse (B, nh, Tq) natural-log sum-exp of
// the scaled, masked scores. Head j uses kv head j / (nh / nkv). scale = 1/sqrt(hd).
// Query i sits at global position q_offset + i, key j at k_offset + j; causal masks key > query. A query
// that sees no key gets out = 0 and lse = -inf (context parallelism merges such partial results).
struct AttnSpan {
    int64_t q_offset = 0;
    int64_t k_offset = 0;
    bool causal = true;
};
// Naive: materialises the (Tq, Tk) probabilities. When probs (B, nh, Tq, Tk) is given they are written
// there and may be kept for backward (what "no recomputation" stores); otherwise a workspace is used.
void attention_forward_naive(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out, Tensor& lse,
                             Tensor* probs, AttnSpan span = {});
// probs: the saved probabilities, or nullptr to recompute them from q, k and lse.
// dq, dk, dv are ACCUMULATED.
void attention_backward_naive(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& out, const Tensor& lse, const Tensor* probs, Tensor& dq,
                              Tensor& dk, Tensor& dv, AttnSpan span = {});
// Tiled with online softmax (flash attention): never holds more than a tile of scores. f32 on every
// device; on CUDA also bf16 or f16 — q, k, v, out (and dout, dq, dk, dv) in that dtype, lse f32 — run on
// tensor cores (head dims 16, 32, 64, 128; tensors 16-byte aligned), compared with the f32 reference in
// tests/00_common/test_cuda_attention_tc.cpp.
void attention_forward_tiled(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out, Tensor& lse,
                             AttnSpan span = {});
void attention_backward_tiled(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& out, const Tensor& lse, Tensor& dq, Tensor& dk, Tensor& dv,
                              AttnSpan span = {});

// Context parallelism's online softmax (the log-sum-exp merge of two attention partials) is chapter 06's:
// 06_context_parallel/online_softmax.hpp says what it computes and holds the CPU merge. Here: its operand
// check (out (B, T, nh, hd), lse (B, nh, T), the parts alike, all f32 on one device) and its CUDA kernel
// (common/cuda/attention_flash.cu), which a cuda tensor reaches through chapter 06's online_softmax_merge.
void check_attention_merge(const Tensor& out, const Tensor& lse, const Tensor& out_part, const Tensor& lse_part);
void attention_merge_gpu(Tensor& out, Tensor& lse, const Tensor& out_part, const Tensor& lse_part);

// ---- SwiGLU --------------------------------------------------------------------------------------------
// out = silu(gate) * up ; all (N, f)
void swiglu_forward(const Tensor& gate, const Tensor& up, Tensor& out);
void swiglu_backward(const Tensor& dout, const Tensor& gate, const Tensor& up, Tensor& dgate, Tensor& dup);

// ---- mixture of experts (chapter 08) ---------------------------------------------------------------------
// A token row n goes to k of E experts. Its choice j sits at pos[n, j], its row in the expert-sorted buffer
// of copies (-1: dropped by the capacity); every row of that buffer is the copy of exactly one (n, j), so
// the kernels below write disjoint rows and sum in a fixed order: deterministic on every device.
//
// The router: scores (N, E) = the softmax of each row of logits (N, E) over the experts (Mixtral), or the
// sigmoid of each logit (sigmoid: DeepSeek-V3); experts (N, k) i32 = the k highest scores + bias, highest
// first, ties to the lower expert (bias (E) or undefined: the aux-loss-free balancing's offsets, which move
// the choice and never the weights); weights (N, k) = the chosen scores, divided by their sum when
// normalize (Mixtral's renormalisation over the chosen k).
void moe_router_forward(const Tensor& logits, const Tensor& bias, bool sigmoid, bool normalize, Tensor& scores,
                        Tensor& experts, Tensor& weights);
// dlogits (N, E) (overwritten) = d loss / d logits from dweights (N, k) = d loss / d weights, plus, when
// aux_dscores (B, E) is defined, d loss / d scores of a per-sequence term: the N rows are B sequences of
// N / B rows, and every row of sequence b adds aux_dscores[b] to its d scores (the balance loss)
void moe_router_backward(const Tensor& dweights, const Tensor& scores, const Tensor& experts,
                         const Tensor& aux_dscores, bool sigmoid, bool normalize, Tensor& dlogits);
// Per sequence of the B = counts.size(0) sequences of N / B rows: counts (B, E) f32 = how many of its
// (N / B)·k choices picked expert e (before any capacity); score_sums (B, E) = the sum of its rows' scores
void moe_sequence_stats(const Tensor& scores, const Tensor& experts, Tensor& counts, Tensor& score_sums);
// out (M, h): out[pos[n, j]] = x[n] for every kept choice (x (N, h), pos (N, k) i32); rows no choice maps
// to are left as they are. With k = 1 and pos a permutation it permutes rows.
void moe_dispatch(const Tensor& x, const Tensor& pos, Tensor& out);
// dx (N, h) (overwritten) = sum over the kept choices j of dout[pos[n, j]]: the dispatch's backward
void moe_dispatch_backward(const Tensor& dout, const Tensor& pos, Tensor& dx);
// y (N, h) (overwritten) = sum over the kept choices j of weights[n, j] · expert_out[pos[n, j]]
void moe_combine(const Tensor& expert_out, const Tensor& pos, const Tensor& weights, Tensor& y);
// d_expert_out (M, h) (overwritten; rows no choice maps to are 0): row pos[n, j] = weights[n, j] · dy[n];
// dweights (N, k) (overwritten) = dy[n] · expert_out[pos[n, j]], 0 for a dropped choice
void moe_combine_backward(const Tensor& dy, const Tensor& expert_out, const Tensor& pos, const Tensor& weights,
                          Tensor& d_expert_out, Tensor& dweights);

// ---- fused softmax + cross-entropy ------------------------------------------------------------------
// logits (N, V); targets (N) i32. Rows whose target == ignore_index count nothing and get zero grads.
// Returns the SUM of the per-row losses (the caller divides by the global token count).
// If dlogits (N, V) is defined it receives (softmax - onehot) * grad_scale; it may alias logits.
// If losses (N) is defined it receives each row's loss (0 for ignored rows).
double cross_entropy_forward_backward(const Tensor& logits, const Tensor& targets, Tensor& dlogits,
                                      float grad_scale, int32_t ignore_index, Tensor& losses);

// ---- optimizer -----------------------------------------------------------------------------------------
struct AdamWConfig {
    float lr = 3e-4f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.1f;
    // false: the run never steps (--steps 0: export or generate only), so AdamW allocates no moments or
    // master copy (12 of fp32's 16 bytes a parameter) and refuses to step
    bool trains = true;
};
// The step's scalars, computed once on the host in double, by the CPU and the CUDA update alike (so both
// round them the same): decay = 1 - lr·wd, step_size = lr / (1 - beta1^step), bc2_sqrt = sqrt(1 - beta2^step)
struct AdamWScalars {
    float decay, step_size, bc2_sqrt;
};
inline AdamWScalars adamw_scalars(const AdamWConfig& cfg, int step) {
    return {1.0f - cfg.lr * cfg.weight_decay, (float)(cfg.lr / (1.0 - std::pow((double)cfg.beta1, step))),
            (float)std::sqrt(1.0 - std::pow((double)cfg.beta2, step))};
}
// PyTorch AdamW: p -= lr*wd*p; m,v updated with g = grad*grad_scale; p -= lr * mhat / (sqrt(vhat) + eps).
// step counts from 1. All four tensors have the same numel.
void adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWConfig& cfg, int step,
                float grad_scale = 1.0f);

// sum of squares (accumulated in double), returned on the host: global grad norm = sqrt(sum over ranks)
double sum_squares(const Tensor& x);
// the same over several tensors (one device), the sum of the tensors' sums taken in order: on a GPU one
// wait for the host instead of one per tensor (AdamW's global norm over every parameter tensor)
double sum_squares(const std::vector<Tensor>& xs);

// ---- FLOP counter ----------------------------------------------------------------------------------------
// What the op layer ran, counted where it runs (one relaxed atomic add a call, on the host, any device): every
// linear layer's GEMM (linear_gemm, whatever its format) 2·M·N·K; every attention call its GEMMs over the dense
// (Tq, Tk) square of each query head — forward Q·Kᵀ and P·V, backward dV, dP, dQ and dK, and Q·Kᵀ again where
// it rebuilds P (the tiled kernel always, the naive one without saved probabilities). The causal mask is not
// halved, as in model_flops_per_token (metrics.hpp), so one step under --recompute none with the naive kernel
// counts exactly the model's FLOPs, and every mode's extra is recompute_flops_per_token's (tests/01_single_gpu/
// test_hfu.cpp); the step log's HFU reads it. Other matmul calls (benchmarks, tests) are not counted.
struct FlopCount {
    int64_t linear = 0, attention = 0;
    int64_t total() const { return linear + attention; }
};
FlopCount counted_flops();  // since the process started or the last reset
void reset_counted_flops();
void count_linear_flops(int64_t M, int64_t N, int64_t K);  // linear_gemm's C (M, N) from K: 2·M·N·K

// ---- elementwise and data movement -----------------------------------------------------------------------
void add(const Tensor& a, const Tensor& b, Tensor& out);         // out = a + b (out may alias a or b)
void add_inplace(Tensor& dst, const Tensor& src, float alpha = 1.0f);  // dst += alpha * src
void scale_inplace(Tensor& x, float s);                         // x *= s
void fill(Tensor& x, float value);                              // any float dtype or i32
// same dtype and numel; across devices allowed. On a GPU, host -> device returns before the copy has run
// (up to 4 MiB: staged; the source may be changed at once), device -> host when the data is there.
void copy(Tensor& dst, const Tensor& src);
void convert(Tensor& dst, const Tensor& src);  // dtype conversion (f32 <-> bf16/f16/e4m3/e5m2), same device
// element (r, c) of x (R, C) := std * rng_normal(seed, stream, (row0 + r) * full_cols + col0 + c):
// the values a shard gets are exactly its slice of the full (?, full_cols) tensor. full_cols = -1: C.
void init_normal(Tensor& x, uint64_t seed, uint64_t stream, float std, int64_t row0 = 0, int64_t col0 = 0,
                 int64_t full_cols = -1);
void device_synchronize(Device d);

}  // namespace penta
