// ops_cpu.cpp — the CPU reference of every op except attention (attention_cpu.cpp): GEMM (OpenBLAS sgemm),
// the Llama layer ops forward and backward (embedding, RMSNorm, RoPE, SwiGLU, fused softmax +
// cross-entropy), the AdamW step, reductions, elementwise ops, fill / dtype conversion and the
// counter-based initialiser.
//
// These are both the reference the CUDA kernels are tested against and the CPU training path, so GEMM
// goes to sgemm and every other op walks contiguous rows in one or two passes the compiler vectorises;
// row sums are accumulated in double because h and V reach thousands of terms. What keeps those loops
// vectorised: the element count is read once before the loop (numel() in the loop condition is a call
// made every iteration), reductions and exponentials go through cpu_math.hpp (sum_f64, max_f32, exp_f32).
// Playbook: "First steps: training on one GPU" (the ops of one training step), "Tensor parallelism"
// (vocab_start: a vocab-parallel shard owns rows [vocab_start, vocab_start + V) of the embedding) and
// "Mixed precision training" (f32 <-> bf16/f16/fp8 conversion).
// Tested by tests/00_common/test_ops.cpp: `make test CH=00` or `build/bin/tests_00 -ts='ch00 np1'`.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <experimental/simd>
#include <vector>

#include "cpu_math.hpp"
#include "ops_backend.hpp"

namespace penta::cpu {

// ---- GEMM ------------------------------------------------------------------------------------------

void matmul(const Tensor& A, const Tensor& B, Tensor& C, bool transA, bool transB, float alpha, float beta) {
    const int64_t M = C.size(-2), N = C.size(-1), K = transA ? A.size(-2) : A.size(-1);
    int64_t batch = C.numel() / std::max<int64_t>(M * N, 1);
    if (M == 0 || N == 0 || batch == 0) return;
    const float* a = A.ptr<float>();
    const float* b = B.ptr<float>();
    float* c = C.ptr<float>();
    if (K == 0) {  // an empty sum: only the beta * C part remains (BLAS rejects leading dim 0)
        const int64_t n = C.numel();
        for (int64_t i = 0; i < n; i++) c[i] = beta == 0.0f ? 0.0f : beta * c[i];
        return;
    }
    const bool shared_b = B.dim() == 2;
    // A shared B with untransposed A: the batch is just more rows of one (batch*M, K) @ (K, N) product
    int64_t rows = M;
    if (shared_b && !transA) {
        rows = batch * M;
        batch = 1;
    }
    const int lda = (int)(transA ? M : K), ldb = (int)(transB ? K : N), ldc = (int)N;
    for (int64_t e = 0; e < batch; e++) {
        cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans, transB ? CblasTrans : CblasNoTrans,
                    (int)rows, (int)N, (int)K, alpha, a + e * M * K, lda, b + (shared_b ? 0 : e * K * N), ldb,
                    beta, c + e * M * N, ldc);
    }
}

// ---- embedding ---------------------------------------------------------------------------------------

void embedding_forward(const Tensor& tokens, const Tensor& table, Tensor& out, int64_t vocab_start) {
    const int64_t N = tokens.size(0), V = table.size(0), h = table.size(1);
    const int32_t* tok = tokens.ptr<int32_t>();
    const float* tab = table.ptr<float>();  // (V, h)
    float* o = out.ptr<float>();           // (N, h)
    for (int64_t n = 0; n < N; n++) {
        int64_t row = (int64_t)tok[n] - vocab_start;
        if (row >= 0 && row < V)
            std::memcpy(o + n * h, tab + row * h, h * sizeof(float));
        else  // another vocab shard owns this token; the TP all-reduce adds its row
            std::memset(o + n * h, 0, h * sizeof(float));
    }
}

void embedding_backward(const Tensor& tokens, const Tensor& dout, Tensor& dtable, int64_t vocab_start) {
    const int64_t N = tokens.size(0), V = dtable.size(0), h = dtable.size(1);
    const int32_t* tok = tokens.ptr<int32_t>();
    const float* d = dout.ptr<float>();  // (N, h)
    float* dt = dtable.ptr<float>();     // (V, h)
    for (int64_t n = 0; n < N; n++) {
        int64_t row = (int64_t)tok[n] - vocab_start;
        if (row < 0 || row >= V) continue;
        for (int64_t i = 0; i < h; i++) dt[row * h + i] += d[n * h + i];
    }
}

// ---- RMSNorm -----------------------------------------------------------------------------------------

void rmsnorm_forward(const Tensor& x, const Tensor& w, Tensor& y, Tensor& rstd, float eps) {
    const int64_t N = x.size(0), h = x.size(1);
    const float* xp = x.ptr<float>();  // (N, h)
    const float* wp = w.ptr<float>();  // (h)
    float* yp = y.ptr<float>();        // (N, h)
    float* rp = rstd.ptr<float>();     // (N)
    for (int64_t n = 0; n < N; n++) {
        const float* xr = xp + n * h;
        const double ss = sum_f64(h, [&](int64_t i) { return (double)xr[i] * xr[i]; });
        float r = (float)(1.0 / std::sqrt(ss / h + eps));
        rp[n] = r;
        for (int64_t i = 0; i < h; i++) yp[n * h + i] = xr[i] * r * wp[i];
    }
}

// y_i = x_i r w_i with r = (mean(x^2) + eps)^(-1/2), so dr/dx_j = -r^3 x_j / h and
// dx_i = r (dy_i w_i) - r^3 x_i / h * sum_j dy_j w_j x_j ; dw_i += dy_i x_i r (summed over rows).
void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd, Tensor& dx,
                      Tensor& dw) {
    const int64_t N = x.size(0), h = x.size(1);
    const float* dyp = dy.ptr<float>();  // (N, h)
    const float* xp = x.ptr<float>();    // (N, h)
    const float* rp = rstd.ptr<float>(); // (N)
    if (dx.defined()) {  // the input gradient (B)
        const float* wp = w.ptr<float>();  // (h)
        float* dxp = dx.ptr<float>();      // (N, h)
        for (int64_t n = 0; n < N; n++) {
            const float* dyr = dyp + n * h;
            const float* xr = xp + n * h;
            const float r = rp[n];
            const double dot = sum_f64(h, [&](int64_t i) { return (double)dyr[i] * wp[i] * xr[i]; });
            const float c = (float)(dot * r * r * r / h);
            for (int64_t i = 0; i < h; i++) dxp[n * h + i] = r * dyr[i] * wp[i] - c * xr[i];
        }
    }
    if (dw.defined()) {  // the weight gradient (W), summed over rows in row order
        float* dwp = dw.ptr<float>();  // (h)
        for (int64_t n = 0; n < N; n++) {
            const float* dyr = dyp + n * h;
            const float* xr = xp + n * h;
            const float r = rp[n];
            for (int64_t i = 0; i < h; i++) dwp[i] += dyr[i] * xr[i] * r;
        }
    }
}

// ---- RoPE --------------------------------------------------------------------------------------------

namespace {

// Rotates each (x_i, x_{i+hd/2}) pair by sign * angle(pos, i). HF's rotate_half form:
// out_i = x_i cos - x_{i+hd/2} sin, out_{i+hd/2} = x_{i+hd/2} cos + x_i sin. The angle is computed in f32
// exactly as HF does (from HF's own inv_freq table, rope.hpp), so positions in the thousands give the
// same rounding.
void rope_rotate(const Tensor& x, const Tensor& pos, const Tensor& inv_freq, Tensor& out, float sign) {
    const int64_t B = x.size(0), T = x.size(1), nh = x.size(2), hd = x.size(3), half = hd / 2;
    const int32_t* pp = pos.ptr<int32_t>();       // (T)
    const float* freq = inv_freq.ptr<float>();    // (hd/2)
    std::vector<float> cs(T * half), sn(T * half);  // (T, hd/2)
    for (int64_t i = 0; i < half; i++) {
        for (int64_t t = 0; t < T; t++) {
            float angle = (float)pp[t] * freq[i];
            cs[t * half + i] = cosf(angle);
            sn[t * half + i] = sign * sinf(angle);
        }
    }
    const float* xp = x.ptr<float>();  // (B, T, nh, hd)
    float* op = out.ptr<float>();      // (B, T, nh, hd), may be xp
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++) {
            const float* c = &cs[t * half];
            const float* s = &sn[t * half];
            for (int64_t j = 0; j < nh; j++) {
                int64_t base = ((b * T + t) * nh + j) * hd;
                for (int64_t i = 0; i < half; i++) {
                    float x1 = xp[base + i], x2 = xp[base + half + i];
                    op[base + i] = x1 * c[i] - x2 * s[i];
                    op[base + half + i] = x2 * c[i] + x1 * s[i];
                }
            }
        }
}

}  // namespace

void rope_forward(const Tensor& x, const Tensor& pos, const Tensor& inv_freq, Tensor& out) {
    rope_rotate(x, pos, inv_freq, out, 1.0f);
}

// a rotation's transpose is the rotation by -angle
void rope_backward(const Tensor& dout, const Tensor& pos, const Tensor& inv_freq, Tensor& dx) {
    rope_rotate(dout, pos, inv_freq, dx, -1.0f);
}

// ---- SwiGLU --------------------------------------------------------------------------------------------

void swiglu_forward(const Tensor& gate, const Tensor& up, Tensor& out) {
    const float* g = gate.ptr<float>();
    const float* u = up.ptr<float>();
    float* o = out.ptr<float>();
    const int64_t n = out.numel();
    for (int64_t i = 0; i < n; i++) o[i] = g[i] / (1.0f + exp_f32(-g[i])) * u[i];
}

// silu'(g) = sig(g) (1 + g (1 - sig(g))). dgate/dup are overwritten and may alias gate/up: each element
// reads its inputs before writing.
void swiglu_backward(const Tensor& dout, const Tensor& gate, const Tensor& up, Tensor& dgate, Tensor& dup) {
    const float* d = dout.ptr<float>();
    const float* g = gate.ptr<float>();
    const float* u = up.ptr<float>();
    float* dg = dgate.ptr<float>();
    float* du = dup.ptr<float>();
    const int64_t n = gate.numel();
    for (int64_t i = 0; i < n; i++) {
        float gi = g[i], ui = u[i], di = d[i];
        float sig = 1.0f / (1.0f + exp_f32(-gi));
        dg[i] = di * ui * sig * (1.0f + gi * (1.0f - sig));
        du[i] = di * gi * sig;
    }
}

// ---- fused softmax + cross-entropy --------------------------------------------------------------------

// Per row: loss = logsumexp(z) - z_target, with the max subtracted first so exp never overflows;
// d loss / d z = softmax(z) - onehot(target). dlogits may alias logits (the (N, V) logits are the largest
// activation; this saves a copy): a row's max and z_target are read before exp(z - max) overwrites it,
// and the row's gradient is then that exp times grad_scale / sum.
double cross_entropy_forward_backward(const Tensor& logits, const Tensor& targets, Tensor& dlogits,
                                      float grad_scale, int32_t ignore_index, Tensor& losses) {
    const int64_t N = logits.size(0), V = logits.size(1);
    const float* z = logits.ptr<float>();  // (N, V)
    const int32_t* tg = targets.ptr<int32_t>();  // (N)
    float* dz = dlogits.defined() ? dlogits.ptr<float>() : nullptr;  // (N, V)
    float* lp = losses.defined() ? losses.ptr<float>() : nullptr;    // (N)
    std::vector<float> scratch(dz ? 0 : V);  // exp(z - max) of one row when no gradient is asked for
    double total = 0;
    for (int64_t n = 0; n < N; n++) {
        const float* zr = z + n * V;
        const int32_t t = tg[n];
        if (t == ignore_index) {
            if (dz) std::memset(dz + n * V, 0, V * sizeof(float));
            if (lp) lp[n] = 0.0f;
            continue;
        }
        CHECK(t >= 0 && t < V, "cross_entropy: target %d of row %ld is outside [0, %ld) and is not ignore_index %d",
              t, (long)n, (long)V, ignore_index);
        const float mx = max_f32(zr, V);
        const float zt = zr[t];
        float* e = dz ? dz + n * V : scratch.data();  // (V)
        for (int64_t v = 0; v < V; v++) e[v] = exp_f32(zr[v] - mx);
        const double sum = sum_f64(V, [&](int64_t v) { return (double)e[v]; });
        const double loss = std::log(sum) + mx - zt;
        total += loss;
        if (lp) lp[n] = (float)loss;
        if (dz) {
            const float k = (float)(grad_scale / sum);
            for (int64_t v = 0; v < V; v++) e[v] *= k;
            e[t] -= grad_scale;
        }
    }
    return total;
}

// ---- optimizer and reductions ---------------------------------------------------------------------

// PyTorch's AdamW, term for term: decoupled decay first, then the bias-corrected Adam update with
// denom = sqrt(v) / sqrt(1 - beta2^t) + eps, so results match torch.optim.AdamW to float rounding.
// F is float or a SIMD vector of floats: the same expression serves the vector loop and its scalar tail.
template <class F>
void adamw_update(F& p, F& m, F& v, F g, float b1, float b2, float decay, float step_size, float bc2_sqrt,
                  float eps) {
    using std::sqrt;  // the float one; the vector one (stdx::sqrt) is found through its argument type
    // EXERCISE 01.2 begin: AdamW's update of one element: the moments, then the bias-corrected step with decoupled weight decay
    m = b1 * m + (1.0f - b1) * g;
    v = b2 * v + (1.0f - b2) * g * g;
    p = p * decay - step_size * m / (sqrt(v) / bc2_sqrt + eps);
    // EXERCISE 01.2 end
}

// The loop is written with explicit vectors (std::experimental::simd) because a plain loop stays scalar:
// std::sqrt must branch to set errno for a negative input, and that branch stops the compiler from
// vectorising. The vector square root is the same correctly rounded operation, here 8 at a time (the
// loop is memory-bound by then; GCC 12's 16-wide version trips a false warning in its own headers).
void adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWConfig& cfg, int step,
                float grad_scale) {
    namespace stdx = std::experimental;
    using Vec = stdx::simd<float, stdx::simd_abi::deduce_t<float, 8>>;
    constexpr int64_t kW = (int64_t)Vec::size();
    float* p = param.ptr<float>();
    const float* g = grad.ptr<float>();
    float* mp = m.ptr<float>();
    float* vp = v.ptr<float>();
    const auto [decay, step_size, bc2_sqrt] = adamw_scalars(cfg, step);
    const float b1 = cfg.beta1, b2 = cfg.beta2, eps = cfg.eps;
    const int64_t n = param.numel();
    int64_t i = 0;
    for (; i + kW <= n; i += kW) {
        Vec pi(p + i, stdx::element_aligned), mi(mp + i, stdx::element_aligned), vi(vp + i, stdx::element_aligned);
        const Vec gi = Vec(g + i, stdx::element_aligned) * grad_scale;
        adamw_update(pi, mi, vi, gi, b1, b2, decay, step_size, bc2_sqrt, eps);
        pi.copy_to(p + i, stdx::element_aligned);
        mi.copy_to(mp + i, stdx::element_aligned);
        vi.copy_to(vp + i, stdx::element_aligned);
    }
    for (; i < n; i++) adamw_update(p[i], mp[i], vp[i], g[i] * grad_scale, b1, b2, decay, step_size, bc2_sqrt, eps);
}

double sum_squares(const Tensor& x) {
    const float* p = x.ptr<float>();
    return sum_f64(x.numel(), [&](int64_t i) { return (double)p[i] * p[i]; });
}

double sum_squares(const std::vector<Tensor>& xs) {
    double sum = 0;
    for (const Tensor& x : xs) sum += cpu::sum_squares(x);
    return sum;
}

// ---- elementwise ------------------------------------------------------------------------------------

void add(const Tensor& a, const Tensor& b, Tensor& out) {
    const float* pa = a.ptr<float>();
    const float* pb = b.ptr<float>();
    float* po = out.ptr<float>();
    const int64_t n = out.numel();
    for (int64_t i = 0; i < n; i++) po[i] = pa[i] + pb[i];
}

void add_inplace(Tensor& dst, const Tensor& src, float alpha) {
    float* d = dst.ptr<float>();
    const float* s = src.ptr<float>();
    const int64_t n = dst.numel();
    for (int64_t i = 0; i < n; i++) d[i] += alpha * s[i];
}

void scale_inplace(Tensor& x, float s) {
    float* p = x.ptr<float>();
    const int64_t n = x.numel();
    for (int64_t i = 0; i < n; i++) p[i] *= s;
}

// ---- fill and dtype conversion ----------------------------------------------------------------------

namespace {

template <class T>
void fill_bits(const Tensor& x, T bits) {
    T* p = (T*)x.data();
    std::fill(p, p + x.numel(), bits);
}

}  // namespace

void fill(Tensor& x, float value) {
    switch (x.dtype) {
        case DType::i32: fill_bits<int32_t>(x, (int32_t)value); return;
        case DType::f32: fill_bits<float>(x, value); return;
        case DType::bf16: case DType::f16: {
            uint16_t bits;
            f32_to_dtype(&value, &bits, x.dtype, 1);
            fill_bits<uint16_t>(x, bits);
            return;
        }
        case DType::e4m3: case DType::e5m2: {
            uint8_t bits;
            f32_to_dtype(&value, &bits, x.dtype, 1);
            fill_bits<uint8_t>(x, bits);
            return;
        }
    }
}

void convert(Tensor& dst, const Tensor& src) {
    if (src.dtype == DType::f32)
        f32_to_dtype(src.ptr<float>(), dst.data(), dst.dtype, dst.numel());
    else
        dtype_to_f32(src.data(), src.dtype, dst.ptr<float>(), dst.numel());
}

// ---- initialisation ---------------------------------------------------------------------------------

// The value of an element depends only on its index in the FULL tensor, so a TP or ZeRO shard that
// passes its (row0, col0) offsets gets exactly its slice of what one rank would have drawn (ARCHITECTURE.md §6).
void init_normal(Tensor& x, uint64_t seed, uint64_t stream, float std, int64_t row0, int64_t col0,
                 int64_t full_cols) {
    const int64_t C = x.dim() == 0 ? 1 : x.size(-1);
    const int64_t R = C == 0 ? 0 : x.numel() / C;
    const int64_t ld = full_cols < 0 ? C : full_cols;
    CHECK(col0 + C <= ld, "init_normal: columns [%ld, %ld) exceed full_cols %ld", (long)col0, (long)(col0 + C),
          (long)ld);
    float* p = x.ptr<float>();
    for (int64_t r = 0; r < R; r++)
        for (int64_t c = 0; c < C; c++)
            p[r * C + c] = std * rng_normal(seed, stream, (uint64_t)((row0 + r) * ld + col0 + c));
}

void device_synchronize() {}

}  // namespace penta::cpu
