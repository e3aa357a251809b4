// fused_norm_rope.cu — fused kernels of the kernels lab: RMSNorm forward and backward, RoPE on q and k in one
// launch. bf16 activations, f32 arithmetic inside, every tensor read once and written once.
//
// Playbook: "Diving into the GPUs — fused kernels": a chain of pointwise and row-wise operations is bound by
// memory, not arithmetic, so the cost is the bytes moved; one kernel that keeps the intermediates in
// registers moves each input and output once. The unfused sequences these are timed against: unfused.cu.
//   rmsnorm_fwd  one block per row, one 16-byte piece (8 values) per thread kept in registers between the
//                sum of squares (a block reduction) and the scaling; rstd saved for backward
//   rmsnorm_bwd  16 rows per block: dx row by row (one block reduction each), and the block's share of dw
//                (sum over its rows of dy·x·rstd) kept in registers and written once; a second small kernel
//                adds the shares in a fixed order (deterministic, no atomics)
//   rope         one thread per (token, 8 frequency pairs): cos and sin computed once, applied to every
//                head of q and k (rotate_half convention: element i pairs with i + D/2)
//   build/bin/10_kernels --part fused
#include "gpu_kernels.hpp"
#include "lab_cuda.cuh"

namespace penta::lab {

using cuda::bf16;

namespace {

constexpr int kNormRowsPerBlock = 16;

int norm_threads(int64_t h) { return (int)((h / 8 + 31) / 32 * 32); }

__global__ void rmsnorm_fwd_kernel(const bf16* __restrict__ x, const bf16* __restrict__ w, bf16* __restrict__ y,
                                   float* __restrict__ rstd, int h, float eps) {
    __shared__ float scratch[32];
    const int64_t row = blockIdx.x;
    const int c = threadIdx.x * 8;  // this thread's 8 columns
    const bool in = c < h;
    float xv[8] = {}, wv[8] = {};
    if (in) {
        cuda::load16(x + row * h + c, xv);
        cuda::load16(w + c, wv);
    }
    float ss = 0;
#pragma unroll
    for (int i = 0; i < 8; i++) ss += xv[i] * xv[i];
    const float r = rsqrtf(cuda::block_sum(ss, scratch) / (float)h + eps);
    if (in) {
        float out[8];
#pragma unroll
        for (int i = 0; i < 8; i++) out[i] = xv[i] * r * wv[i];
        cuda::store16(y + row * h + c, out);
    }
    if (threadIdx.x == 0) rstd[row] = r;
}

// dx = rstd·(w∘dy) - x·rstd^3·mean(w∘dy∘x); partial[block][col] = sum over the block's rows of dy·x·rstd
__global__ void rmsnorm_bwd_kernel(const bf16* __restrict__ dy, const bf16* __restrict__ x, const bf16* __restrict__ w,
                                   const float* __restrict__ rstd, bf16* __restrict__ dx, float* __restrict__ partial,
                                   int64_t N, int h) {
    __shared__ float scratch[32];
    const int c = threadIdx.x * 8;
    const bool in = c < h;
    float wv[8] = {}, dw[8] = {};
    if (in) cuda::load16(w + c, wv);
    const int64_t r0 = (int64_t)blockIdx.x * kNormRowsPerBlock;
    for (int64_t row = r0; row < min(N, r0 + kNormRowsPerBlock); row++) {
        float dyv[8] = {}, xv[8] = {};
        if (in) {
            cuda::load16(dy + row * h + c, dyv);
            cuda::load16(x + row * h + c, xv);
        }
        float dot = 0;
#pragma unroll
        for (int i = 0; i < 8; i++) dot += wv[i] * dyv[i] * xv[i];
        dot = cuda::block_sum(dot, scratch);
        const float r = rstd[row], k = dot / (float)h * r * r * r;
        if (in) {
            float out[8];
#pragma unroll
            for (int i = 0; i < 8; i++) {
                out[i] = r * wv[i] * dyv[i] - xv[i] * k;
                dw[i] += dyv[i] * xv[i] * r;
            }
            cuda::store16(dx + row * h + c, out);
        }
    }
    if (in)
#pragma unroll
        for (int i = 0; i < 8; i++) partial[(int64_t)blockIdx.x * h + c + i] = dw[i];
}

// dw[col] = sum over blocks of partial[block][col], in block order
__global__ void sum_partials_kernel(const float* __restrict__ partial, float* __restrict__ dw, int64_t blocks, int h) {
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (col >= h) return;
    float s = 0;
    for (int64_t b = 0; b < blocks; b++) s += partial[b * h + col];
    dw[col] = s;
}

// one thread per (batch·token, group of 8 pairs): pairs i = 8p .. 8p+7 of every head of q, then of k
__global__ void rope_kernel(bf16* __restrict__ q, bf16* __restrict__ k, const int32_t* __restrict__ pos, int64_t BT,
                            int T, int H, int Hkv, int D, float log2_theta, float sign) {
    const int groups = D / 16;
    const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= BT * groups) return;
    const int64_t bt = idx / groups;
    const int i0 = (int)(idx % groups) * 8, half = D / 2;
    const float p = (float)pos[bt % T];
    float cs[8], sn[8];
#pragma unroll
    for (int i = 0; i < 8; i++) {
        // inv_freq_i = theta^(-2i/D) and the angle in f32, as Hugging Face computes them
        const float inv_freq = exp2f(-2.0f * (float)(i0 + i) / (float)D * log2_theta);
        sincosf(p * inv_freq, &sn[i], &cs[i]);
        sn[i] *= sign;  // the backward rotates by minus the angle
    }
    auto rotate = [&](bf16* row) {
        float x1[8], x2[8], o1[8], o2[8];
        cuda::load16(row + i0, x1);
        cuda::load16(row + half + i0, x2);
#pragma unroll
        for (int i = 0; i < 8; i++) {
            o1[i] = x1[i] * cs[i] - x2[i] * sn[i];
            o2[i] = x2[i] * cs[i] + x1[i] * sn[i];
        }
        cuda::store16(row + i0, o1);
        cuda::store16(row + half + i0, o2);
    };
    for (int hh = 0; hh < H; hh++) rotate(q + (bt * H + hh) * D);
    for (int hh = 0; hh < Hkv; hh++) rotate(k + (bt * Hkv + hh) * D);
}

}  // namespace

void rmsnorm_fwd(const uint16_t* x, const uint16_t* w, uint16_t* y, float* rstd, int64_t N, int64_t h, float eps,
                 cudaStream_t stream) {
    CHECK(N >= 1 && h >= 8 && h % 8 == 0 && h <= 8192, "rmsnorm_fwd: N %ld >= 1, h %ld a multiple of 8 up to 8192",
          (long)N, (long)h);
    rmsnorm_fwd_kernel<<<(unsigned)N, norm_threads(h), 0, stream>>>((const bf16*)x, (const bf16*)w, (bf16*)y, rstd, (int)h, eps);
    LAB_LAUNCH_CHECK();
}

int64_t rmsnorm_bwd_partials(int64_t N, int64_t h) { return cuda::ceil_div(N, kNormRowsPerBlock) * h; }

void rmsnorm_bwd(const uint16_t* dy, const uint16_t* x, const uint16_t* w, const float* rstd, uint16_t* dx, float* dw,
                 float* partial, int64_t N, int64_t h, cudaStream_t stream) {
    CHECK(N >= 1 && h >= 8 && h % 8 == 0 && h <= 8192, "rmsnorm_bwd: N %ld >= 1, h %ld a multiple of 8 up to 8192",
          (long)N, (long)h);
    const int64_t blocks = cuda::ceil_div(N, kNormRowsPerBlock);
    rmsnorm_bwd_kernel<<<(unsigned)blocks, norm_threads(h), 0, stream>>>((const bf16*)dy, (const bf16*)x, (const bf16*)w,
                                                                          rstd, (bf16*)dx, partial, N, (int)h);
    LAB_LAUNCH_CHECK();
    sum_partials_kernel<<<(unsigned)cuda::ceil_div(h, 256), 256, 0, stream>>>(partial, dw, blocks, (int)h);
    LAB_LAUNCH_CHECK();
}

void rope(uint16_t* q, uint16_t* k, const int32_t* pos, int64_t B, int64_t T, int64_t H, int64_t Hkv, int64_t D,
          float theta, bool inverse, cudaStream_t stream) {
    CHECK(D % 16 == 0 && D <= 512 && B >= 1 && T >= 1 && H >= 1 && Hkv >= 0,
          "rope: D %ld must be a multiple of 16 (two halves of 16-byte pieces), up to 512", (long)D);
    const int64_t threads = B * T * (D / 16);
    rope_kernel<<<(unsigned)cuda::ceil_div(threads, 256), 256, 0, stream>>>(
        (bf16*)q, (bf16*)k, pos, B * T, (int)T, (int)H, (int)Hkv, (int)D, log2f(theta), inverse ? -1.0f : 1.0f);
    LAB_LAUNCH_CHECK();
}

}  // namespace penta::lab
