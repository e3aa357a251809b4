// fused_adamw.cu — multi-tensor AdamW: one launch updates every tensor of a model (PyTorch's "foreach" /
// apex's multi_tensor_apply idea), against one launch per operation per tensor (unfused.cu).
//
// Playbook: "Diving into the GPUs — fused kernels": the optimizer step is pure bandwidth (read p, g, m, v and
// write p, m, v: 28 bytes per f32 parameter), and a model has hundreds of tensors, many small: launching a
// kernel per tensor (or three) leaves the GPU idle between launches and small grids that cannot fill it.
// Here the tensors are cut into chunks of 64K elements; block b takes chunk b of the concatenation, finding
// its tensor by binary search over a table of (pointers, size, first chunk) copied to the device once per
// step. The update is the trainer's (common/ops.hpp adamw_step): decoupled weight decay, then
// p -= lr/(1-b1^t) · m / (sqrt(v)/sqrt(1-b2^t) + eps), with the step's scalars computed on the host in double.
//   build/bin/10_kernels --part fused
#include <cmath>

#include "gpu_kernels.hpp"
#include "lab_cuda.cuh"

namespace penta::lab {

namespace {

constexpr int64_t kChunk = 65536;

struct TensorEntry {
    float* p;
    const float* g;
    float* m;
    float* v;
    int64_t n, first_chunk;
};

struct Scalars {
    float decay, step_size, bc2_sqrt, beta1, beta2, eps;
};

__device__ __forceinline__ void adam_one(float& p, float g, float& m, float& v, const Scalars& s) {
    m = s.beta1 * m + (1.0f - s.beta1) * g;
    v = s.beta2 * v + (1.0f - s.beta2) * g * g;
    p = p * s.decay - s.step_size * m / (sqrtf(v) / s.bc2_sqrt + s.eps);
}

__global__ void adamw_multi_kernel(const TensorEntry* __restrict__ table, int tensors, Scalars s) {
    int lo = 0, hi = tensors - 1;  // the last tensor whose first chunk is <= this block's chunk
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (table[mid].first_chunk <= blockIdx.x) lo = mid; else hi = mid - 1;
    }
    const TensorEntry e = table[lo];
    const int64_t begin = (blockIdx.x - e.first_chunk) * kChunk, end = min(e.n, begin + kChunk);
    const bool vec = ((uintptr_t)e.p | (uintptr_t)e.g | (uintptr_t)e.m | (uintptr_t)e.v) % 16 == 0;
    int64_t i = begin + threadIdx.x * 4;
    if (vec)
        for (; i + 3 < end; i += blockDim.x * 4) {  // 16-byte loads and stores
            float4 p = *(float4*)(e.p + i), m = *(float4*)(e.m + i), v = *(float4*)(e.v + i);
            const float4 g = *(const float4*)(e.g + i);
            adam_one(p.x, g.x, m.x, v.x, s), adam_one(p.y, g.y, m.y, v.y, s);
            adam_one(p.z, g.z, m.z, v.z, s), adam_one(p.w, g.w, m.w, v.w, s);
            *(float4*)(e.p + i) = p, *(float4*)(e.m + i) = m, *(float4*)(e.v + i) = v;
        }
    // the tail of a tensor whose size is not a multiple of 4, or a whole unaligned one, element by element
    const int64_t tail = vec ? begin + (end - begin) / 4 * 4 : begin;
    for (int64_t j = tail + threadIdx.x; j < end; j += blockDim.x) adam_one(e.p[j], e.g[j], e.m[j], e.v[j], s);
}

}  // namespace

int64_t adamw_table_bytes(const std::vector<AdamWTensor>& t) { return (int64_t)(t.size() * sizeof(TensorEntry)); }

void adamw_multi_tensor(const std::vector<AdamWTensor>& t, const AdamWParams& a, void* table, cudaStream_t stream) {
    CHECK(!t.empty() && t.size() < (1u << 30), "adamw_multi_tensor: %zu tensors", t.size());
    CHECK(a.step >= 1, "adamw_multi_tensor: step %d counts from 1", a.step);
    std::vector<TensorEntry> host;
    int64_t chunks = 0;
    for (const AdamWTensor& x : t) {
        CHECK(x.n >= 1, "adamw_multi_tensor: an empty tensor");
        host.push_back({x.p, x.g, x.m, x.v, x.n, chunks});
        chunks += cuda::ceil_div(x.n, kChunk);
    }
    CHECK(chunks < (1ll << 31), "adamw_multi_tensor: %ld chunks exceed the grid", (long)chunks);
    CUDA_CHECK(cudaMemcpyAsync(table, host.data(), host.size() * sizeof(TensorEntry), cudaMemcpyHostToDevice, stream));
    const Scalars s{(float)(1.0 - (double)a.lr * a.weight_decay), (float)(a.lr / (1.0 - std::pow((double)a.beta1, a.step))),
                    (float)std::sqrt(1.0 - std::pow((double)a.beta2, a.step)), a.beta1, a.beta2, a.eps};
    adamw_multi_kernel<<<(unsigned)chunks, 256, 0, stream>>>((const TensorEntry*)table, (int)t.size(), s);
    LAB_LAUNCH_CHECK();
}

}  // namespace penta::lab
