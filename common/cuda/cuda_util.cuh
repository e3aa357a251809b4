// cuda_util.cuh — what every CUDA file of the backend shares: checked launches, launch sizes, block-wide
// reductions, workspace tensors and the row-major GEMM helper (gemm.cu).
//
// Playbook: "GPU kernels" — a kernel is launched as a grid of blocks of threads; threads of a block share
// fast on-chip memory and can synchronise, blocks cannot. The reductions below are the two-level pattern
// every row-wise kernel uses: warp shuffles first, then one value per warp through shared memory.
// Internal to common/cuda/ (not a public header). Tested through tests/00_common/test_cuda.cpp
// (`build/bin/tests_00 -ts='ch00 np1' -tc='*cuda*'` on a machine with a GPU).
#pragma once
#include <cublas_v2.h>

#include <algorithm>

#include "../ops_backend.hpp"

// Kernel launches return nothing; a bad configuration shows up as the runtime's last error.
#define KERNEL_CHECK() CUDA_CHECK(cudaGetLastError())

#define CUBLAS_CHECK(call)                                                                        \
    do {                                                                                          \
        cublasStatus_t st_ = (call);                                                              \
        if (st_ != CUBLAS_STATUS_SUCCESS)                                                         \
            ::penta::fail_at(__FILE__, __LINE__,                                                  \
                             std::string(#call " failed: ") + cublasGetStatusString(st_));        \
    } while (0)

namespace penta::cuda {

constexpr int kThreads = 256;          // default block size: 8 warps, a multiple of 32 (reductions need it)
constexpr unsigned kFullMask = 0xffffffffu;

// Blocks for a grid-stride loop over n elements: enough to fill the GPU, never more than the data needs.
inline int grid_for(int64_t n, int threads = kThreads) {
    return (int)std::max<int64_t>(1, std::min<int64_t>((n + threads - 1) / threads, 65536));
}

// Scratch memory as a counted tensor (Tag::workspace), so the allocator's statistics see it too.
// Viewed as raw bytes by the caller (doubles, ints); cudaMalloc aligns it to 256 bytes.
inline Tensor workspace(size_t bytes) {
    return Tensor::empty({(int64_t)((bytes + 3) / 4)}, DType::f32, Device::cuda, Tag::workspace);
}

// ---- block-wide reductions -----------------------------------------------------------------------
struct SumOp {
    template <class T>
    __device__ T operator()(T a, T b) const { return a + b; }
};
struct MaxOp {
    __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

__device__ __forceinline__ float shfl_xor(float v, int lane_mask) { return __shfl_xor_sync(kFullMask, v, lane_mask); }
__device__ __forceinline__ double shfl_xor(double v, int lane_mask) { return __shfl_xor_sync(kFullMask, v, lane_mask); }

// Butterfly over the 32 lanes: every lane ends with the result, combined in the same fixed order on every
// run, so results are deterministic.
template <class T, class Op>
__device__ T warp_reduce(T v, Op op) {
    for (int o = 16; o > 0; o >>= 1) v = op(v, shfl_xor(v, o));
    return v;
}

// Reduction over the whole block, returned to every thread. blockDim.x must be a multiple of 32; every
// thread of the block must call it (it synchronises). `identity` fills the slots of missing warps.
template <class T, class Op>
__device__ T block_reduce(T v, Op op, T identity) {
    __shared__ T partial[32];
    v = warp_reduce(v, op);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads();  // a previous call may still be reading `partial`
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    return warp_reduce(lane < (int)(blockDim.x >> 5) ? partial[lane] : identity, op);
}

// ---- cuBLAS ---------------------------------------------------------------------------------------
// The per-process handle, created on first use on the device current at that moment (the runtime picks
// the device once at start-up, before any op runs).
cublasHandle_t cublas_handle();

// Row-major strided-batched GEMM: for each batch entry, C = alpha * op(A) @ op(B) + beta * C with op(A)
// (M, K), op(B) (K, N), C (M, N). lda/ldb/ldc are the row strides of the STORED matrices (the stored A is
// (K, M) when transA) and sA/sB/sC the element strides between batch entries (0 shares a matrix).
// tf32: TF32 tensor cores (gemm.cu); false: fp32 FMA.
void gemm_rm(bool transA, bool transB, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
             int64_t lda, int64_t sA, const float* B, int64_t ldb, int64_t sB, float beta, float* C,
             int64_t ldc, int64_t sC, int64_t batch, bool tf32 = false);

// ---- the device pool (memory.cu) ---------------------------------------------------------------------
// The block at `block` (a Buffer's ptr, not a view's) is used on stream s too: when it is freed, the pool
// reuses it only after the work queued on s by then (device_pool.hpp).
void record_stream(void* block, cudaStream_t s);
// s is about to be destroyed with its work done: blocks stop recording it
void forget_stream(cudaStream_t s);

// Sum of n doubles in device memory, added by one block in a fixed order (deterministic), into out[0]
// (device memory), or copied to the host. Defined in optimizer.cu.
void sum_doubles(const double* v, int64_t n, double* out);
double sum_doubles_to_host(const double* v, int64_t n);

}  // namespace penta::cuda
