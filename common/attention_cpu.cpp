// attention_cpu.cpp — causal attention with GQA on the CPU: the naive reference that materialises the
// (Tq, Tk) probabilities, and flash attention (tiled, online softmax) that never holds more than a tile.
//
// Playbook: "Flash attention" (and "Context parallelism", whose ring attention merges the partial
// results of several key blocks through the log-sum-exp that both versions return: the merge is chapter
// 06's, 06_context_parallel/online_softmax.cpp). Semantics: ops.hpp.
// Test: `make test CH=00` or `build/bin/tests_00 -tc='*attention*'` (tests/00_common/test_attention.cpp).
//
// Layout reminder: q, out, dq are (B, Tq, nh, hd) and k, v, dk, dv are (B, Tk, nkv, hd), so the rows of
// one head are strided by nh*hd (resp. nkv*hd). Every GEMM below passes that stride as its leading
// dimension instead of copying a head into a contiguous buffer; the one copy is K and V transposed, so
// that S = Q K^T and dP = dO V^T are A @ B products (transpose_rows says why).
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "cpu_math.hpp"
#include "ops_backend.hpp"

namespace penta::cpu {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// tile sizes of the flash version: a 32x32 score tile plus a 32 x hd accumulator stay in L1/L2 cache,
// the CPU's stand-in for a GPU's shared memory
constexpr int64_t kBlockQ = 32, kBlockK = 32;

// Sizes, strides and masking of one attention call.
struct Dims {
    int64_t B, Tq, Tk, nh, nkv, hd;
    int64_t ldq, ldk;  // row strides of q/out/dq and of k/v/dk/dv
    float scale;
    AttnSpan span;

    Dims(const Tensor& q, const Tensor& k, AttnSpan s)
        : B(q.size(0)), Tq(q.size(1)), Tk(k.size(1)), nh(q.size(2)), nkv(k.size(2)), hd(q.size(3)),
          ldq(nh * hd), ldk(nkv * hd), scale(1.0f / std::sqrt((float)hd)), span(s) {}
    // element offset of row 0 of query head h (q, out, dout, dq) and of kv head g (k, v, dk, dv)
    int64_t qoff(int64_t b, int64_t h) const { return b * Tq * ldq + h * hd; }
    int64_t koff(int64_t b, int64_t g) const { return b * Tk * ldk + g * hd; }
    int64_t kv_head(int64_t h) const { return h / (nh / nkv); }  // GQA: consecutive heads share one kv head
    // Query i sees key j iff k_offset + j <= q_offset + i, so what it sees is always a PREFIX [0, n) of
    // the local keys: masking is "entries at column >= n", and n = 0 means the query sees nothing here.
    int64_t visible(int64_t i) const {
        if (!span.causal) return Tk;
        return std::clamp<int64_t>(span.q_offset + i - span.k_offset + 1, 0, Tk);
    }
};

// C (M, N) = alpha * op(A) @ op(B) + beta * C, row-major with explicit leading dimensions
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
          const float* Bm, int64_t ldb, float beta, float* C, int64_t ldc) {
    if (M == 0 || N == 0) return;
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)M, (int)N,
                (int)K, alpha, A, (int)lda, Bm, (int)ldb, beta, C, (int)ldc);
}

// xt (hd, cols) = the transpose of `cols` rows of one head of k or v (row stride ldk). With it the score
// products S = Q K^T and dP = dO V^T are plain (rows, hd) @ (hd, cols) GEMMs: at tile sizes OpenBLAS
// runs A @ B^T at well under half the speed of A @ B (bench_ops prints both), far more than the copy costs.
// The tiled kernels transpose a kv head's keys and values once, and every query head of its GQA group and
// every query block reuses them: the CPU's stand-in for the key block a GPU kernel keeps in shared memory.
// Blocks of 8 x 8 keep both the reads and the writes of the copy within a few cache lines.
void transpose_rows(const Dims& d, int64_t cols, const float* x, float* xt, int64_t ldt) {
    constexpr int64_t kB = 8;
    for (int64_t c0 = 0; c0 < cols; c0 += kB)
        for (int64_t e0 = 0; e0 < d.hd; e0 += kB) {
            const int64_t c1 = std::min(c0 + kB, cols), e1 = std::min(e0 + kB, d.hd);
            for (int64_t e = e0; e < e1; e++)
                for (int64_t c = c0; c < c1; c++) xt[e * ldt + c] = x[c * d.ldk + e];
        }
}

// S (rows, cols) = scale * Q K^T for `rows` queries and `cols` keys of one head, given kt = K^T (hd, cols)
void scores(const Dims& d, int64_t rows, int64_t cols, const float* q, const float* kt, int64_t ldt, float* S,
            int64_t lds) {
    gemm(false, false, rows, cols, d.hd, d.scale, q, d.ldq, kt, ldt, 0.0f, S, lds);
}

// Backward turns a score row back into probabilities with the saved lse: P = exp(S - lse) on the visible
// prefix, 0 elsewhere. A row with lse = -inf saw no key, so nvis = 0 and exp(S + inf) is never formed:
// its P, and with it every gradient it feeds, is exactly 0.
void probs_from_lse(float* s, int64_t cols, int64_t nvis, float lse) {
    for (int64_t c = 0; c < nvis; c++) s[c] = exp_f32(s[c] - lse);
    for (int64_t c = nvis; c < cols; c++) s[c] = 0.0f;
}

// The gradients of one (query block, key block) pair, given its probabilities P (rows, cols):
//   dV += P^T dO ;  dP = dO V^T ;  dS = P * (dP - D) ;  dQ += scale dS K ;  dK += scale dS^T Q
// dS = P * (dP - D) is the softmax backward, dS_ij = P_ij (dP_ij - sum_k P_ik dP_ik), with the row sum
// replaced by D_i = rowsum(dO_i * O_i): since O_i = sum_k P_ik V_k, both are the same number, but D needs
// only dO and O — so the tiled backward gets it without ever holding a full row of P.
// Masked entries have P = 0, hence dS = 0: they contribute nothing, as they must.
// q, dout, dq point at the block's first query row; k, dk, dv at its first key row; D at its first query;
// vt is V^T (hd, cols) of the block's keys (transpose_rows).
void backward_block(const Dims& d, int64_t rows, int64_t cols, const float* P, float* dS, int64_t ldp,
                    const float* q, const float* k, const float* vt, int64_t ldt, const float* dout,
                    const float* D, float* dq, float* dk, float* dv) {
    gemm(true, false, cols, d.hd, rows, 1.0f, P, ldp, dout, d.ldq, 1.0f, dv, d.ldk);        // (cols, hd)
    gemm(false, false, rows, cols, d.hd, 1.0f, dout, d.ldq, vt, ldt, 0.0f, dS, ldp);        // dP (rows, cols)
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) dS[r * ldp + c] = P[r * ldp + c] * (dS[r * ldp + c] - D[r]);
    gemm(false, false, rows, d.hd, cols, d.scale, dS, ldp, k, d.ldk, 1.0f, dq, d.ldq);      // (rows, hd)
    gemm(true, false, cols, d.hd, rows, d.scale, dS, ldp, q, d.ldq, 1.0f, dk, d.ldk);       // (cols, hd)
}

// D_i = rowsum(dO_i * O_i) for every query of head h in batch b -> D (Tq)
void row_dots(const Dims& d, int64_t b, int64_t h, const float* dout, const float* out, float* D) {
    const float* o = out + d.qoff(b, h);
    const float* g = dout + d.qoff(b, h);
    for (int64_t i = 0; i < d.Tq; i++) {
        float s = 0.0f;
        for (int64_t e = 0; e < d.hd; e++) s += g[i * d.ldq + e] * o[i * d.ldq + e];
        D[i] = s;
    }
}

// Scratch is a workspace-tagged tensor, so the allocator's peak shows what each version really holds:
// (Tq, Tk) for the naive one, one tile for the flash one.
float* scratch(Tensor& t, int64_t n) {
    t = Tensor::empty({std::max<int64_t>(n, 1)}, DType::f32, Device::cpu, Tag::workspace);
    return t.ptr<float>();
}

}  // namespace

// =====================================================================================================
// Naive: S = scale Q K^T, P = softmax(masked S), O = P V, with the whole (Tq, Tk) P in memory.

void attention_forward_naive(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out, Tensor& lse,
                             Tensor* probs, AttnSpan span) {
    Dims d(q, k, span);
    Tensor work, work_kt;
    float* P = probs ? nullptr : scratch(work, d.Tq * d.Tk);  // (Tq, Tk)
    float* kt = scratch(work_kt, d.hd * d.Tk);                 // (hd, Tk)
    const int64_t ldp = std::max<int64_t>(d.Tk, 1);
    for (int64_t b = 0; b < d.B; b++)
        for (int64_t h = 0; h < d.nh; h++) {
            if (probs) P = probs->ptr<float>() + (b * d.nh + h) * d.Tq * d.Tk;  // (Tq, Tk) of (B, nh, Tq, Tk)
            const int64_t qo = d.qoff(b, h), ko = d.koff(b, d.kv_head(h));
            float* L = lse.ptr<float>() + (b * d.nh + h) * d.Tq;  // (Tq)
            transpose_rows(d, d.Tk, k.ptr<float>() + ko, kt, ldp);
            scores(d, d.Tq, d.Tk, q.ptr<float>() + qo, kt, ldp, P, ldp);
            for (int64_t i = 0; i < d.Tq; i++) {
                float* p = P + i * ldp;
                const int64_t n = d.visible(i);
                // subtracting the row max keeps exp() from overflowing
                float mx = kNegInf, sum = 0.0f;
                for (int64_t c = 0; c < n; c++) mx = std::max(mx, p[c]);
                for (int64_t c = 0; c < n; c++) sum += exp_f32(p[c] - mx);
                L[i] = n > 0 ? mx + std::log(sum) : kNegInf;
                // P = exp(s - lse): the same arithmetic the backward uses to rebuild P, so recomputing
                // the probabilities (selective recomputation) gives bit-identical gradients
                probs_from_lse(p, d.Tk, n, L[i]);  // also zeroes the masked columns
            }
            // rows that saw no key are all-zero in P, hence out = 0 there
            gemm(false, false, d.Tq, d.hd, d.Tk, 1.0f, P, ldp, v.ptr<float>() + ko, d.ldk, 0.0f,
                 out.ptr<float>() + qo, d.ldq);
        }
}

void attention_backward_naive(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& out, const Tensor& lse, const Tensor* probs, Tensor& dq,
                              Tensor& dk, Tensor& dv, AttnSpan span) {
    Dims d(q, k, span);
    Tensor work_p, work_ds, work_d, work_t;
    float* P = probs ? nullptr : scratch(work_p, d.Tq * d.Tk);  // (Tq, Tk)
    float* dS = scratch(work_ds, d.Tq * d.Tk);                  // (Tq, Tk)
    float* D = scratch(work_d, d.Tq);                           // (Tq)
    float* kt = scratch(work_t, 2 * d.hd * d.Tk);               // (hd, Tk) K^T, then (hd, Tk) V^T
    float* vt = kt + d.hd * d.Tk;
    const int64_t ldp = std::max<int64_t>(d.Tk, 1);
    for (int64_t b = 0; b < d.B; b++)
        for (int64_t h = 0; h < d.nh; h++) {
            const int64_t qo = d.qoff(b, h), ko = d.koff(b, d.kv_head(h));
            transpose_rows(d, d.Tk, v.ptr<float>() + ko, vt, ldp);
            if (probs) {
                P = probs->ptr<float>() + (b * d.nh + h) * d.Tq * d.Tk;
            } else {  // recompute: one GEMM and an exp per entry instead of storing (B, nh, Tq, Tk)
                const float* L = lse.ptr<float>() + (b * d.nh + h) * d.Tq;
                transpose_rows(d, d.Tk, k.ptr<float>() + ko, kt, ldp);
                scores(d, d.Tq, d.Tk, q.ptr<float>() + qo, kt, ldp, P, ldp);
                for (int64_t i = 0; i < d.Tq; i++) probs_from_lse(P + i * ldp, d.Tk, d.visible(i), L[i]);
            }
            row_dots(d, b, h, dout.ptr<float>(), out.ptr<float>(), D);
            backward_block(d, d.Tq, d.Tk, P, dS, ldp, q.ptr<float>() + qo, k.ptr<float>() + ko, vt, ldp,
                           dout.ptr<float>() + qo, D, dq.ptr<float>() + qo, dk.ptr<float>() + ko,
                           dv.ptr<float>() + ko);
        }
}

// =====================================================================================================
// Flash attention (Dao et al. 2022; backward as in FlashAttention-2).
//
// The naive forward needs the whole row of scores before it can normalise: softmax_j = exp(s_j) / sum.
// The online softmax removes that need. Walking a row's keys block by block, keep
//   m   the max score seen so far,
//   l   sum of exp(s - m) over the keys seen so far,
//   acc sum of exp(s - m) * v over the keys seen so far.
// When a new block raises the max from m to m', every term kept so far was exp(s - m) and must become
// exp(s - m') = exp(s - m) * exp(m - m'): so l and acc are multiplied by alpha = exp(m - m') and the new
// block's terms are added. After the last block, out = acc / l exactly, and lse = m + log(l).
// Only a tile of scores (kBlockQ, kBlockK) and the accumulator (kBlockQ, hd) ever exist (besides K^T of one kv
// head, a copy of an input, never a (Tq, Tk) matrix).
//
// Why save lse: it is all the backward needs to rebuild any tile of P as exp(scale q k^T - lse) without
// redoing the max/sum pass; and it lets context parallelism merge partial attentions over disjoint key
// sets: lse = logaddexp(lse_1, lse_2), out = exp(lse_1 - lse) out_1 + exp(lse_2 - lse) out_2.

void attention_forward_tiled(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out, Tensor& lse,
                             AttnSpan span) {
    Dims d(q, k, span);
    Tensor work_s, work_acc, work_ml, work_kt;
    float* S = scratch(work_s, kBlockQ * kBlockK);  // (kBlockQ, kBlockK) scores, then probabilities
    float* kt = scratch(work_kt, d.hd * d.Tk);       // (hd, Tk) K^T of one kv head (transpose_rows)
    float* acc = scratch(work_acc, kBlockQ * d.hd);  // (kBlockQ, hd)
    float* m = scratch(work_ml, 2 * kBlockQ);        // (kBlockQ) running max, then (kBlockQ) running sum
    float* l = m + kBlockQ;
    const int64_t group = d.nh / d.nkv;  // query heads per kv head
    for (int64_t b = 0; b < d.B; b++)
        for (int64_t g = 0; g < d.nkv; g++) {
            const float* vh = v.ptr<float>() + d.koff(b, g);
            transpose_rows(d, d.Tk, k.ptr<float>() + d.koff(b, g), kt, d.Tk);
            for (int64_t h = g * group; h < (g + 1) * group; h++) {
                const float* qh = q.ptr<float>() + d.qoff(b, h);
                float* oh = out.ptr<float>() + d.qoff(b, h);
                float* L = lse.ptr<float>() + (b * d.nh + h) * d.Tq;
                for (int64_t i0 = 0; i0 < d.Tq; i0 += kBlockQ) {
                    const int64_t rows = std::min(kBlockQ, d.Tq - i0);
                    std::fill(m, m + rows, kNegInf);
                    std::fill(l, l + rows, 0.0f);
                    std::fill(acc, acc + rows * d.hd, 0.0f);
                    // the block's last query sees the most keys; key blocks past that are entirely masked
                    const int64_t kend = d.visible(i0 + rows - 1);
                    for (int64_t j0 = 0; j0 < kend; j0 += kBlockK) {
                        const int64_t cols = std::min(kBlockK, d.Tk - j0);
                        scores(d, rows, cols, qh + i0 * d.ldq, kt + j0, d.Tk, S, kBlockK);
                        for (int64_t r = 0; r < rows; r++) {
                            float* s = S + r * kBlockK;
                            const int64_t n = std::clamp<int64_t>(d.visible(i0 + r) - j0, 0, cols);
                            float mnew = m[r];
                            for (int64_t c = 0; c < n; c++) mnew = std::max(mnew, s[c]);
                            if (mnew == kNegInf) {  // this row has seen no key yet: nothing to add
                                std::fill(s, s + cols, 0.0f);
                                continue;
                            }
                            const float alpha = exp_f32(m[r] - mnew);  // 0 on the row's first visible block
                            for (int64_t c = 0; c < n; c++) s[c] = exp_f32(s[c] - mnew);
                            float sum = 0.0f;
                            for (int64_t c = 0; c < n; c++) sum += s[c];
                            for (int64_t c = n; c < cols; c++) s[c] = 0.0f;
                            l[r] = l[r] * alpha + sum;
                            for (int64_t e = 0; e < d.hd; e++) acc[r * d.hd + e] *= alpha;
                            m[r] = mnew;
                        }
                        gemm(false, false, rows, d.hd, cols, 1.0f, S, kBlockK, vh + j0 * d.ldk, d.ldk, 1.0f, acc,
                             d.hd);  // acc (rows, hd) += P~ (rows, cols) @ V (cols, hd)
                    }
                    for (int64_t r = 0; r < rows; r++) {
                        // l = 0 only when the query saw no key at all: out = 0, lse = -inf
                        const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
                        for (int64_t e = 0; e < d.hd; e++) oh[(i0 + r) * d.ldq + e] = acc[r * d.hd + e] * inv;
                        L[i0 + r] = l[r] > 0.0f ? m[r] + std::log(l[r]) : kNegInf;
                    }
                }
            }
        }
}

// FlashAttention-2 backward: the outer loop walks key blocks and the inner loop the query blocks that can
// see them, so a key block's dK and dV are finished in one sweep (on a GPU they live in registers the
// whole time; dQ is the one accumulated across key blocks). Each tile's P is rebuilt from the saved lse,
// and D = rowsum(dO * O) (see backward_block) replaces the row sums of P * dP that a tile cannot see.
void attention_backward_tiled(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& out, const Tensor& lse, Tensor& dq, Tensor& dk, Tensor& dv,
                              AttnSpan span) {
    Dims d(q, k, span);
    Tensor work_p, work_ds, work_d, work_t;
    float* P = scratch(work_p, kBlockQ * kBlockK);   // (kBlockQ, kBlockK)
    float* dS = scratch(work_ds, kBlockQ * kBlockK);  // (kBlockQ, kBlockK)
    float* D = scratch(work_d, d.Tq);                 // (Tq), like FA2's preprocessing pass
    float* kt = scratch(work_t, 2 * d.hd * d.Tk);     // (hd, Tk) K^T, then (hd, Tk) V^T, of one kv head
    float* vt = kt + d.hd * d.Tk;
    const int64_t group = d.nh / d.nkv;  // query heads per kv head
    for (int64_t b = 0; b < d.B; b++)
        for (int64_t g = 0; g < d.nkv; g++) {
            const int64_t ko = d.koff(b, g);
            transpose_rows(d, d.Tk, k.ptr<float>() + ko, kt, d.Tk);
            transpose_rows(d, d.Tk, v.ptr<float>() + ko, vt, d.Tk);
            for (int64_t h = g * group; h < (g + 1) * group; h++) {
                const int64_t qo = d.qoff(b, h);
                const float* L = lse.ptr<float>() + (b * d.nh + h) * d.Tq;
                row_dots(d, b, h, dout.ptr<float>(), out.ptr<float>(), D);
                for (int64_t j0 = 0; j0 < d.Tk; j0 += kBlockK) {
                    const int64_t cols = std::min(kBlockK, d.Tk - j0);
                    if (d.visible(d.Tq - 1) <= j0) continue;  // no query sees these keys
                    const float* kj = k.ptr<float>() + ko + j0 * d.ldk;
                    for (int64_t i0 = 0; i0 < d.Tq; i0 += kBlockQ) {
                        const int64_t rows = std::min(kBlockQ, d.Tq - i0);
                        if (d.visible(i0 + rows - 1) <= j0) continue;  // no query of the block sees these keys
                        const float* qi = q.ptr<float>() + qo + i0 * d.ldq;
                        scores(d, rows, cols, qi, kt + j0, d.Tk, P, kBlockK);
                        for (int64_t r = 0; r < rows; r++)
                            probs_from_lse(P + r * kBlockK, cols,
                                           std::clamp<int64_t>(d.visible(i0 + r) - j0, 0, cols), L[i0 + r]);
                        backward_block(d, rows, cols, P, dS, kBlockK, qi, kj, vt + j0, d.Tk,
                                       dout.ptr<float>() + qo + i0 * d.ldq, D + i0,
                                       dq.ptr<float>() + qo + i0 * d.ldq, dk.ptr<float>() + ko + j0 * d.ldk,
                                       dv.ptr<float>() + ko + j0 * d.ldk);
                    }
                }
            }
        }
}

}  // namespace penta::cpu
