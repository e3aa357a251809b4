// fused_swiglu_ce.cu — fused kernels of the kernels lab: SwiGLU forward and backward, and softmax +
// cross-entropy + its gradient without materialising the probabilities. bf16 in and out, f32 inside.
//
// Playbook: "Diving into the GPUs — fused kernels", and the same idea as flash attention's online softmax:
//   swiglu        out = silu(g)·u in one pass (unfused: sigmoid, multiply, multiply: three round trips);
//                 backward: dg and du from one read of dout, g, u
//   cross_entropy one block per row of logits: pass 1 keeps a running (max, sum of exp) per thread and merges
//                 them (m = max(m1, m2), s = s1·e^(m1-m) + s2·e^(m2-m)); pass 2 re-reads the row and writes
//                 dlogits = (e^(x - lse) - onehot)·scale straight away. The (N, V) probabilities never exist
//                 (at V = 128256 they would be 0.5 MB per row in f32); the unfused sequence writes them.
//   build/bin/10_kernels --part fused
#include "gpu_kernels.hpp"
#include "lab_cuda.cuh"

namespace penta::lab {

using cuda::bf16;

namespace {

__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + __expf(-x)); }

__global__ void swiglu_fwd_kernel(const bf16* __restrict__ g, const bf16* __restrict__ u, bf16* __restrict__ out, int64_t n8) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n8; i += (int64_t)gridDim.x * blockDim.x) {
        float gv[8], uv[8], o[8];
        cuda::load16(g + i * 8, gv);
        cuda::load16(u + i * 8, uv);
#pragma unroll
        for (int j = 0; j < 8; j++) o[j] = gv[j] * sigmoid(gv[j]) * uv[j];
        cuda::store16(out + i * 8, o);
    }
}

__global__ void swiglu_bwd_kernel(const bf16* __restrict__ dout, const bf16* __restrict__ g, const bf16* __restrict__ u,
                                  bf16* __restrict__ dg, bf16* __restrict__ du, int64_t n8) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n8; i += (int64_t)gridDim.x * blockDim.x) {
        float dv[8], gv[8], uv[8], a[8], b[8];
        cuda::load16(dout + i * 8, dv);
        cuda::load16(g + i * 8, gv);
        cuda::load16(u + i * 8, uv);
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const float s = sigmoid(gv[j]);  // silu'(g) = s·(1 + g·(1 - s))
            b[j] = dv[j] * gv[j] * s;
            a[j] = dv[j] * uv[j] * s * (1.0f + gv[j] * (1.0f - s));
        }
        cuda::store16(dg + i * 8, a);
        cuda::store16(du + i * 8, b);
    }
}

// (max, sum of exp relative to max) pairs merged over the block; every thread gets the row's lse
__device__ float block_lse(float m, float s) {
    __shared__ float sm[32], ss[32];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float m2 = __shfl_xor_sync(cuda::kFullMask, m, o), s2 = __shfl_xor_sync(cuda::kFullMask, s, o);
        const float mm = fmaxf(m, m2);
        s = (m == -INFINITY ? 0.0f : s * __expf(m - mm)) + (m2 == -INFINITY ? 0.0f : s2 * __expf(m2 - mm));
        m = mm;
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    if (lane == 0) sm[warp] = m, ss[warp] = s;
    __syncthreads();
    m = lane < warps ? sm[lane] : -INFINITY;
    s = lane < warps ? ss[lane] : 0.0f;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float m2 = __shfl_xor_sync(cuda::kFullMask, m, o), s2 = __shfl_xor_sync(cuda::kFullMask, s, o);
        const float mm = fmaxf(m, m2);
        s = (m == -INFINITY ? 0.0f : s * __expf(m - mm)) + (m2 == -INFINITY ? 0.0f : s2 * __expf(m2 - mm));
        m = mm;
    }
    return m + __logf(s);
}

__global__ void __launch_bounds__(512) cross_entropy_kernel(const bf16* __restrict__ logits, const int32_t* __restrict__ targets,
                                                            float* __restrict__ loss, bf16* __restrict__ dlogits, int64_t V,
                                                            float scale) {
    const int64_t row = blockIdx.x;
    const bf16* x = logits + row * V;
    bf16* dx = dlogits + row * V;
    const int32_t t = targets[row];
    const int64_t pieces = V / 8;
    if (t < 0 || t >= V) {  // an ignored row: no loss, no gradient; a target past the vocabulary: loss NaN
        const float z[8] = {};
        for (int64_t i = threadIdx.x; i < pieces; i += blockDim.x) cuda::store16(dx + i * 8, z);
        if (threadIdx.x == 0) loss[row] = t < 0 ? 0.0f : NAN;
        return;
    }
    float m = -INFINITY, s = 0.0f;  // pass 1: this thread's running max and sum of e^(x - max)
    for (int64_t i = threadIdx.x; i < pieces; i += blockDim.x) {
        float v[8];
        cuda::load16(x + i * 8, v);
        float pm = v[0];
#pragma unroll
        for (int j = 1; j < 8; j++) pm = fmaxf(pm, v[j]);
        const float mm = fmaxf(m, pm);
        s = (m == -INFINITY ? 0.0f : s * __expf(m - mm));
#pragma unroll
        for (int j = 0; j < 8; j++) s += __expf(v[j] - mm);
        m = mm;
    }
    const float lse = block_lse(m, s);
    for (int64_t i = threadIdx.x; i < pieces; i += blockDim.x) {  // pass 2: the gradient, written at once
        float v[8];
        cuda::load16(x + i * 8, v);
#pragma unroll
        for (int j = 0; j < 8; j++) v[j] = (__expf(v[j] - lse) - (i * 8 + j == t ? 1.0f : 0.0f)) * scale;
        cuda::store16(dx + i * 8, v);
    }
    if (threadIdx.x == 0) loss[row] = lse - __bfloat162float(x[t]);
}

unsigned grid_for(int64_t n8) { return (unsigned)std::min<int64_t>(cuda::ceil_div(n8, 256), 132 * 16); }

}  // namespace

void swiglu_fwd(const uint16_t* g, const uint16_t* u, uint16_t* out, int64_t n, cudaStream_t stream) {
    CHECK(n >= 8 && n % 8 == 0, "swiglu_fwd: n %ld must be a positive multiple of 8", (long)n);
    swiglu_fwd_kernel<<<grid_for(n / 8), 256, 0, stream>>>((const bf16*)g, (const bf16*)u, (bf16*)out, n / 8);
    LAB_LAUNCH_CHECK();
}

void swiglu_bwd(const uint16_t* dout, const uint16_t* g, const uint16_t* u, uint16_t* dg, uint16_t* du, int64_t n,
                cudaStream_t stream) {
    CHECK(n >= 8 && n % 8 == 0, "swiglu_bwd: n %ld must be a positive multiple of 8", (long)n);
    swiglu_bwd_kernel<<<grid_for(n / 8), 256, 0, stream>>>((const bf16*)dout, (const bf16*)g, (const bf16*)u, (bf16*)dg,
                                                          (bf16*)du, n / 8);
    LAB_LAUNCH_CHECK();
}

void cross_entropy(const uint16_t* logits, const int32_t* targets, float* loss, uint16_t* dlogits, int64_t N,
                   int64_t V, float scale, cudaStream_t stream) {
    CHECK(N >= 1 && N < (1ll << 31) && V >= 8 && V % 8 == 0, "cross_entropy: N %ld >= 1, V %ld a multiple of 8",
          (long)N, (long)V);
    cross_entropy_kernel<<<(unsigned)N, 512, 0, stream>>>((const bf16*)logits, targets, loss, (bf16*)dlogits, V, scale);
    LAB_LAUNCH_CHECK();
}

}  // namespace penta::lab
