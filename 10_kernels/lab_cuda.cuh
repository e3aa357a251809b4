// lab_cuda.cuh — what the kernels lab's CUDA files share: bf16 <-> f32 in registers, 16-byte vector loads,
// warp and block reductions, and the launch check. Internal to 10_kernels/ (the trainer's own helpers are in
// common/cuda/, which the lab does not touch).
//
// Playbook: "Diving into the GPUs" — memory traffic is counted in 16-byte transactions per thread: a warp
// whose 32 lanes read 32 consecutive 16-byte pieces moves one 512-byte run, the best case for DRAM.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "../common/core.hpp"

#define LAB_LAUNCH_CHECK() CUDA_CHECK(cudaGetLastError())

namespace penta::lab::cuda {

using bf16 = __nv_bfloat16;
constexpr unsigned kFullMask = 0xffffffffu;

// A register type and its element count per 16 bytes: 4 floats or 8 bf16.
template <class T>
struct Vec16;
template <>
struct Vec16<float> {
    static constexpr int n = 4;
};
template <>
struct Vec16<bf16> {
    static constexpr int n = 8;
};

__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(bf16 x) { return __bfloat162float(x); }
template <class T>
__device__ __forceinline__ T from_f32(float x);
template <>
__device__ __forceinline__ float from_f32<float>(float x) { return x; }
template <>
__device__ __forceinline__ bf16 from_f32<bf16>(float x) { return __float2bfloat16_rn(x); }

// 16 bytes at p (16-byte aligned) as Vec16<T>::n floats
template <class T>
__device__ __forceinline__ void load16(const T* p, float* out) {
    const uint4 raw = *reinterpret_cast<const uint4*>(p);
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int i = 0; i < Vec16<T>::n; i++) out[i] = to_f32(e[i]);
}
// Vec16<T>::n floats rounded to T, stored as one 16-byte write
template <class T>
__device__ __forceinline__ void store16(T* p, const float* in) {
    uint4 raw;
    T* e = reinterpret_cast<T*>(&raw);
#pragma unroll
    for (int i = 0; i < Vec16<T>::n; i++) e[i] = from_f32<T>(in[i]);
    *reinterpret_cast<uint4*>(p) = raw;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, o));
    return v;
}

// Sum over the block, returned to every thread; blockDim.x a multiple of 32, called by every thread.
// `scratch` holds 32 floats of shared memory, reused by consecutive calls (the first barrier protects it).
__device__ __forceinline__ float block_sum(float v, float* scratch) {
    v = warp_sum(v);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    return warp_sum(lane < warps ? scratch[lane] : 0.0f);
}

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace penta::lab::cuda
