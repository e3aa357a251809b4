// gpu_fill.cu — random benchmark inputs made on the device (gpu_kernels.hpp fill_normal, fill_uniform_int),
// from the same counter RNG as the host (core.hpp's Philox), so a value depends only on (seed, index).
//   build/bin/10_kernels --part fused      (its inputs)
#include "gpu_kernels.hpp"
#include "lab_cuda.cuh"

namespace penta::lab {

namespace {

__global__ void fill_normal_kernel(void* p, int64_t n, bool bf16, uint64_t seed, float std) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const float x = std * rng_normal(seed, 0x10ab, (uint64_t)i);
        if (bf16) ((cuda::bf16*)p)[i] = __float2bfloat16_rn(x);
        else ((float*)p)[i] = x;
    }
}

__global__ void fill_int_kernel(int32_t* p, int64_t n, int32_t bound, uint64_t seed) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        p[i] = (int32_t)(rng_uniform(seed, 77, (uint64_t)i) * (float)bound) % bound;
}

}  // namespace

void fill_normal(void* p, int64_t n, bool bf16, uint64_t seed, float std, cudaStream_t stream) {
    fill_normal_kernel<<<132 * 8, 256, 0, stream>>>(p, n, bf16, seed, std);
    LAB_LAUNCH_CHECK();
}

void fill_uniform_int(int32_t* p, int64_t n, int32_t bound, uint64_t seed, cudaStream_t stream) {
    CHECK(bound >= 1, "fill_uniform_int: bound %d", bound);
    fill_int_kernel<<<132 * 8, 256, 0, stream>>>(p, n, bound, seed);
    LAB_LAUNCH_CHECK();
}

}  // namespace penta::lab
