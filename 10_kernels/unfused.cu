// unfused.cu — the fused kernels' functions written the way a framework without fusion runs them: one small
// kernel per operation (square, row mean, rsqrt, multiply, ...), every intermediate written to device memory in
// f32 and read back by the next. The yardstick the fused kernels are timed against (same results).
//
// Playbook: "Diving into the GPUs — fused kernels": count the round trips. RMSNorm forward is 5 kernels and
// 2 full-size f32 intermediates; cross-entropy materialises the (N, V) probabilities. Two generic kernels do
// all of it: `each` runs a functor per element (grid-stride), `rows` reduces each row (sum or max) into one value.
//   build/bin/10_kernels --part fused
#include <cmath>

#include "gpu_kernels.hpp"
#include "lab_cuda.cuh"

namespace penta::lab {

using cuda::bf16;

namespace {

template <class F>
__global__ void each_kernel(int64_t n, F f) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) f(i);
}
template <class F>
void each(int64_t n, F f, cudaStream_t s) {
    each_kernel<<<(unsigned)std::min<int64_t>(cuda::ceil_div(n, 256), 132 * 16), 256, 0, s>>>(n, f);
    LAB_LAUNCH_CHECK();
}

// out[r] = reduce over c of in[r * cols + c], one block per row (max: is_max)
__global__ void rows_kernel(const float* __restrict__ in, float* __restrict__ out, int64_t cols, bool is_max) {
    __shared__ float scratch[32];
    const float* x = in + (int64_t)blockIdx.x * cols;
    float acc = is_max ? -INFINITY : 0.0f;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) acc = is_max ? fmaxf(acc, x[c]) : acc + x[c];
    if (is_max) {
        acc = cuda::warp_max(acc);
        if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = acc;
        __syncthreads();
        acc = cuda::warp_max(threadIdx.x < (blockDim.x >> 5) ? scratch[threadIdx.x] : -INFINITY);
    } else {
        acc = cuda::block_sum(acc, scratch);
    }
    if (threadIdx.x == 0) out[blockIdx.x] = acc;
}
void rows(const float* in, float* out, int64_t R, int64_t cols, bool is_max, cudaStream_t s) {
    rows_kernel<<<(unsigned)R, 256, 0, s>>>(in, out, cols, is_max);
    LAB_LAUNCH_CHECK();
}

__device__ __forceinline__ float ld(const bf16* p, int64_t i) { return __bfloat162float(p[i]); }
__device__ __forceinline__ float sig(float x) { return 1.0f / (1.0f + __expf(-x)); }

// the functors: each one operation of a sequence, reading its inputs from and writing its output to memory
struct Square { const bf16* x; float* o; __device__ void operator()(int64_t i) const { o[i] = ld(x, i) * ld(x, i); } };
struct RstdOf { float* ms; int64_t h; float eps; __device__ void operator()(int64_t r) const { ms[r] = rsqrtf(ms[r] / (float)h + eps); } };
struct MulRow { const bf16* x; const float* r; int64_t h; float* o; __device__ void operator()(int64_t i) const { o[i] = ld(x, i) * r[i / h]; } };
struct MulColBf16 { const float* a; const bf16* w; int64_t h; bf16* o; __device__ void operator()(int64_t i) const { o[i] = __float2bfloat16_rn(a[i] * ld(w, i % h)); } };
struct MulColF32 { const bf16* a; const bf16* w; int64_t h; float* o; __device__ void operator()(int64_t i) const { o[i] = ld(a, i) * ld(w, i % h); } };
struct MulF32Bf16 { const float* a; const bf16* b; float* o; __device__ void operator()(int64_t i) const { o[i] = a[i] * ld(b, i); } };
struct NormScale { const float* dot; const float* rstd; int64_t h; float* o; __device__ void operator()(int64_t r) const { o[r] = dot[r] / (float)h * rstd[r] * rstd[r] * rstd[r]; } };
struct NormDx { const float* t; const bf16* x; const float* rstd; const float* c; int64_t h; bf16* o;
    __device__ void operator()(int64_t i) const { o[i] = __float2bfloat16_rn(t[i] * rstd[i / h] - ld(x, i) * c[i / h]); } };
struct NormDwTerm { const bf16* dy; const bf16* x; const float* rstd; int64_t h; float* o;
    __device__ void operator()(int64_t i) const { o[i] = ld(dy, i) * ld(x, i) * rstd[i / h]; } };
struct ColSum { const float* in; int64_t R, h; float* o;
    __device__ void operator()(int64_t c) const { float s = 0; for (int64_t r = 0; r < R; r++) s += in[r * h + c]; o[c] = s; } };
struct RopeTable { const int32_t* pos; int64_t D; float log2_theta, sign; float* cs; float* sn;
    __device__ void operator()(int64_t i) const {  // (T, D): row t, column d uses frequency d mod D/2
        const int64_t t = i / D, d = i % D, f = d % (D / 2);
        float s, c;
        sincosf((float)pos[t] * exp2f(-2.0f * (float)f / (float)D * log2_theta), &s, &c);
        cs[i] = c, sn[i] = s * sign;
    } };
struct MulTable { const bf16* x; const float* tab; int64_t TD, HD, D; float* o;  // x (B, T, H, D) · tab (T, D)
    __device__ void operator()(int64_t i) const { o[i] = ld(x, i) * tab[(i / HD) % (TD / D) * D + i % D]; } };
struct RotateHalf { const bf16* x; int64_t D; float* o;  // (-x2, x1)
    __device__ void operator()(int64_t i) const { const int64_t d = i % D, h = D / 2; o[i] = d < h ? -ld(x, i + h) : ld(x, i - h); } };
struct MulTableF32 { const float* x; const float* tab; int64_t TD, HD, D; float* o;
    __device__ void operator()(int64_t i) const { o[i] = x[i] * tab[(i / HD) % (TD / D) * D + i % D]; } };
struct AddToBf16 { const float* a; const float* b; bf16* o; __device__ void operator()(int64_t i) const { o[i] = __float2bfloat16_rn(a[i] + b[i]); } };
struct Sigmoid { const bf16* g; float* o; __device__ void operator()(int64_t i) const { o[i] = sig(ld(g, i)); } };
struct MulBf16F32 { const bf16* a; const float* b; float* o; __device__ void operator()(int64_t i) const { o[i] = ld(a, i) * b[i]; } };
struct MulToBf16 { const float* a; const bf16* b; bf16* o; __device__ void operator()(int64_t i) const { o[i] = __float2bfloat16_rn(a[i] * ld(b, i)); } };
struct SwigluDu { const bf16* d; const bf16* g; const float* s; bf16* o; __device__ void operator()(int64_t i) const { o[i] = __float2bfloat16_rn(ld(d, i) * ld(g, i) * s[i]); } };
struct SwigluDg { const float* t; const bf16* g; const float* s; bf16* o;
    __device__ void operator()(int64_t i) const { o[i] = __float2bfloat16_rn(t[i] * (1.0f + ld(g, i) * (1.0f - s[i]))); } };
struct ExpShift { const bf16* x; const float* m; int64_t V; float* o; __device__ void operator()(int64_t i) const { o[i] = __expf(ld(x, i) - m[i / V]); } };
struct ToF32 { const bf16* x; float* o; __device__ void operator()(int64_t i) const { o[i] = ld(x, i); } };
struct DivRow { float* e; const float* s; int64_t V; __device__ void operator()(int64_t i) const { e[i] /= s[i / V]; } };
struct NllOf { const float* p; const int32_t* t; int64_t V; float* loss;
    __device__ void operator()(int64_t r) const { loss[r] = t[r] < 0 ? 0.0f : -__logf(p[r * V + t[r]]); } };
struct GradOf { const float* p; const int32_t* t; int64_t V; float scale; bf16* o;
    __device__ void operator()(int64_t i) const {
        const int64_t r = i / V;
        o[i] = __float2bfloat16_rn(t[r] < 0 ? 0.0f : (p[i] - (i % V == t[r] ? 1.0f : 0.0f)) * scale);
    } };
struct AdamM { float* m; const float* g; float b1; __device__ void operator()(int64_t i) const { m[i] = b1 * m[i] + (1.0f - b1) * g[i]; } };
struct AdamV { float* v; const float* g; float b2; __device__ void operator()(int64_t i) const { v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i]; } };
struct AdamP { float* p; const float* m; const float* v; float decay, step_size, bc2_sqrt, eps;
    __device__ void operator()(int64_t i) const { p[i] = p[i] * decay - step_size * m[i] / (sqrtf(v[i]) / bc2_sqrt + eps); } };

}  // namespace

int64_t unfused_scratch_floats(FusedOp op, int64_t rows, int64_t cols) {
    switch (op) {
        case FusedOp::rmsnorm_fwd: return 2 * rows * cols + rows;
        case FusedOp::rmsnorm_bwd: return 3 * rows * cols + 2 * rows;
        case FusedOp::rope: return 5 * rows * cols;  // rows = B·T·H, cols = D: 3 intermediates + cos, sin (T, D)
        case FusedOp::swiglu_fwd: return 2 * rows * cols;
        case FusedOp::swiglu_bwd: return 2 * rows * cols;
        case FusedOp::cross_entropy: return rows * cols + 2 * rows;
        case FusedOp::adamw: return 0;
    }
    return 0;
}

void rmsnorm_fwd_unfused(const uint16_t* x16, const uint16_t* w16, uint16_t* y, float* rstd, int64_t N, int64_t h,
                         float eps, float* scratch, cudaStream_t s) {
    const bf16 *x = (const bf16*)x16, *w = (const bf16*)w16;
    float *sq = scratch, *xn = scratch + N * h;
    each(N * h, Square{x, sq}, s);                        // x^2
    rows(sq, rstd, N, h, false, s);                       // row sums
    each(N, RstdOf{rstd, h, eps}, s);                     // 1/sqrt(mean + eps)
    each(N * h, MulRow{x, rstd, h, xn}, s);               // x·rstd
    each(N * h, MulColBf16{xn, w, h, (bf16*)y}, s);       // ·w
}

void rmsnorm_bwd_unfused(const uint16_t* dy16, const uint16_t* x16, const uint16_t* w16, const float* rstd, uint16_t* dx,
                         float* dw, int64_t N, int64_t h, float* scratch, cudaStream_t s) {
    const bf16 *dy = (const bf16*)dy16, *x = (const bf16*)x16, *w = (const bf16*)w16;
    float *t = scratch, *u = scratch + N * h, *dwt = scratch + 2 * N * h, *dot = scratch + 3 * N * h, *c = dot + N;
    each(N * h, MulColF32{dy, w, h, t}, s);               // w·dy
    each(N * h, MulF32Bf16{t, x, u}, s);                  // ·x
    rows(u, dot, N, h, false, s);                         // row sums
    each(N, NormScale{dot, rstd, h, c}, s);               // dot/h·rstd^3
    each(N * h, NormDx{t, x, rstd, c, h, (bf16*)dx}, s);  // dx
    each(N * h, NormDwTerm{dy, x, rstd, h, dwt}, s);      // dy·x·rstd
    each(h, ColSum{dwt, N, h, dw}, s);                    // column sums
}

void rope_unfused(uint16_t* x16, const int32_t* pos, int64_t B, int64_t T, int64_t H, int64_t D, float theta,
                  bool inverse, float* scratch, cudaStream_t s) {
    bf16* x = (bf16*)x16;
    const int64_t n = B * T * H * D;
    float *cs = scratch, *sn = cs + T * D, *a = sn + T * D, *r = a + n, *b = r + n;
    each(T * D, RopeTable{pos, D, log2f(theta), inverse ? -1.0f : 1.0f, cs, sn}, s);  // cos, sin tables
    each(n, MulTable{x, cs, T * D, H * D, D, a}, s);                                   // x·cos
    each(n, RotateHalf{x, D, r}, s);                                                   // rotate_half(x)
    each(n, MulTableF32{r, sn, T * D, H * D, D, b}, s);                                // ·sin
    each(n, AddToBf16{a, b, x}, s);                                                    // sum
}

void swiglu_fwd_unfused(const uint16_t* g16, const uint16_t* u16, uint16_t* out, int64_t n, float* scratch,
                        cudaStream_t s) {
    const bf16 *g = (const bf16*)g16, *u = (const bf16*)u16;
    float *sg = scratch, *silu = scratch + n;
    each(n, Sigmoid{g, sg}, s);
    each(n, MulBf16F32{g, sg, silu}, s);
    each(n, MulToBf16{silu, u, (bf16*)out}, s);
}

void swiglu_bwd_unfused(const uint16_t* d16, const uint16_t* g16, const uint16_t* u16, uint16_t* dg, uint16_t* du,
                        int64_t n, float* scratch, cudaStream_t s) {
    const bf16 *d = (const bf16*)d16, *g = (const bf16*)g16, *u = (const bf16*)u16;
    float *sg = scratch, *t = scratch + n;
    each(n, Sigmoid{g, sg}, s);                  // s = sigmoid(g)
    each(n, SwigluDu{d, g, sg, (bf16*)du}, s);   // du = dout·g·s
    each(n, MulBf16F32{d, sg, t}, s);            // dout·s
    each(n, MulF32Bf16{t, u, t}, s);             // ·u
    each(n, SwigluDg{t, g, sg, (bf16*)dg}, s);   // ·(1 + g·(1 - s))
}

void cross_entropy_unfused(const uint16_t* logits16, const int32_t* targets, float* loss, uint16_t* dlogits, int64_t N,
                           int64_t V, float scale, float* scratch, cudaStream_t s) {
    const bf16* x = (const bf16*)logits16;
    float *p = scratch, *m = scratch + N * V, *sum = m + N;
    each(N * V, ToF32{x, p}, s);                          // logits as f32
    rows(p, m, N, V, true, s);                            // row max
    each(N * V, ExpShift{x, m, V, p}, s);                 // e^(x - max)
    rows(p, sum, N, V, false, s);                         // row sums
    each(N * V, DivRow{p, sum, V}, s);                    // the probabilities, materialised
    each(N, NllOf{p, targets, V, loss}, s);               // -log p[target]
    each(N * V, GradOf{p, targets, V, scale, (bf16*)dlogits}, s);
}

void adamw_unfused(const std::vector<AdamWTensor>& ts, const AdamWParams& a, cudaStream_t s) {
    const float decay = (float)(1.0 - (double)a.lr * a.weight_decay);
    const float step_size = (float)(a.lr / (1.0 - std::pow((double)a.beta1, a.step)));
    const float bc2_sqrt = (float)std::sqrt(1.0 - std::pow((double)a.beta2, a.step));
    for (const AdamWTensor& t : ts) {
        each(t.n, AdamM{t.m, t.g, a.beta1}, s);
        each(t.n, AdamV{t.v, t.g, a.beta2}, s);
        each(t.n, AdamP{t.p, t.m, t.v, decay, step_size, bc2_sqrt, a.eps}, s);
    }
}

}  // namespace penta::lab
