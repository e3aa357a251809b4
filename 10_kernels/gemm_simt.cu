// gemm_simt.cu — the first four rungs of the GPU GEMM ladder, on the ordinary (SIMT) cores, for f32 and bf16
// inputs (f32 accumulation, output in the input type): C (M, N) = A (M, K) @ B (K, N), all row-major.
//
// Playbook: "Diving into the GPUs" — the four core ideas of kernel optimisation in order:
//   naive      one thread per output, threadIdx.x walking DOWN a column of C: the 32 lanes of a warp read 32
//              rows of A (K elements apart: 32 separate memory transactions per load) and write 32 rows of C
//   coalesced  the same arithmetic with threadIdx.x walking ALONG a row of C: lanes read consecutive elements of
//              B (one 128-byte transaction) and share one element of A (a broadcast) — memory coalescing
//   smem       32 x 32 tiles of A and B staged in shared memory: each element fetched from DRAM once per tile
//              and read 32 times from on-chip memory — tiling; arithmetic intensity 32x the naive one's
//   regtile    a 128 x 128 tile per block, 8 x 8 outputs per thread held in registers (thread coarsening):
//              per k step a thread reads 8 + 8 values from shared memory for 64 multiply-adds, and fetches
//              A and B from DRAM in 16-byte vectors
// Shapes: any M, N >= 1; K and N multiples of 8 (16-byte loads); edges are masked.
//   build/bin/10_kernels --part gpu-gemm --rungs naive,coalesced,smem,regtile
#include "gpu_kernels.hpp"
#include "lab_cuda.cuh"

namespace penta::lab {

using cuda::bf16;
using cuda::from_f32;
using cuda::to_f32;

namespace {

template <class T>
__global__ void gemm_naive(int M, int N, int K, const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ C) {
    const int row = blockIdx.x * 32 + threadIdx.x;  // threadIdx.x -> rows: the uncoalesced mapping
    const int col = blockIdx.y * 32 + threadIdx.y;
    if (row >= M || col >= N) return;
    float acc = 0;
    for (int k = 0; k < K; k++) acc += to_f32(A[(int64_t)row * K + k]) * to_f32(B[(int64_t)k * N + col]);
    C[(int64_t)row * N + col] = from_f32<T>(acc);
}

template <class T>
__global__ void gemm_coalesced(int M, int N, int K, const T* __restrict__ A, const T* __restrict__ B,
                               T* __restrict__ C) {
    const int col = blockIdx.x * 32 + threadIdx.x;  // threadIdx.x -> columns: neighbours read neighbours
    const int row = blockIdx.y * 32 + threadIdx.y;
    if (row >= M || col >= N) return;
    float acc = 0;
    for (int k = 0; k < K; k++) acc += to_f32(A[(int64_t)row * K + k]) * to_f32(B[(int64_t)k * N + col]);
    C[(int64_t)row * N + col] = from_f32<T>(acc);
}

template <class T>
__global__ void gemm_smem(int M, int N, int K, const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ C) {
    constexpr int S = 32;
    __shared__ float As[S][S + 1];  // +1: threads of a warp reading a column of As hit 32 different banks
    __shared__ float Bs[S][S];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int col = blockIdx.x * S + tx, row = blockIdx.y * S + ty;
    float acc = 0;
    for (int k0 = 0; k0 < K; k0 += S) {
        // each thread stages one element of each tile (coalesced along tx); outside the matrix: zeros
        As[ty][tx] = row < M && k0 + tx < K ? to_f32(A[(int64_t)row * K + k0 + tx]) : 0.0f;
        Bs[ty][tx] = k0 + ty < K && col < N ? to_f32(B[(int64_t)(k0 + ty) * N + col]) : 0.0f;
        __syncthreads();
#pragma unroll
        for (int k = 0; k < S; k++) acc += As[ty][k] * Bs[k][tx];  // As[ty][k]: a broadcast within the warp
        __syncthreads();  // before the next tile overwrites what slower warps still read
    }
    if (row < M && col < N) C[(int64_t)row * N + col] = from_f32<T>(acc);
}

// 256 threads as 16 x 16; thread (ty, tx) owns rows {4ty..4ty+3, 64+4ty..} and columns {4tx.., 64+4tx..}
// of the 128 x 128 tile: the two groups of 4, 64 apart, make a warp's shared-memory reads of a k row of Bs
// 16 consecutive float4s (no bank conflicts) and of As 2 float4s (broadcasts).
template <class T>
__global__ void __launch_bounds__(256) gemm_regtile(int M, int N, int K, const T* __restrict__ A,
                                                    const T* __restrict__ B, T* __restrict__ C) {
    constexpr int BM = 128, BN = 128, V = cuda::Vec16<T>::n, BK = 2 * V;  // BK: f32 8, bf16 16
    __shared__ __align__(16) float As[BK][BM];  // A's tile TRANSPOSED: a thread's 8 rows are contiguous
    __shared__ __align__(16) float Bs[BK][BN];
    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    // the 16-byte pieces each thread loads per tile: A (128 x BK) = 128·BK/V = 256 pieces, B (BK x 128) likewise
    const int a_row = tid / 2, a_col = (tid % 2) * V;
    const int b_row = tid / (BN / V), b_col = (tid % (BN / V)) * V;
    float acc[8][8] = {};
    for (int k0 = 0; k0 < K; k0 += BK) {
        float a[V], b[V];
        const bool a_in = m0 + a_row < M && k0 + a_col < K, b_in = k0 + b_row < K && n0 + b_col < N;
        if (a_in) cuda::load16(A + (int64_t)(m0 + a_row) * K + k0 + a_col, a);
        if (b_in) cuda::load16(B + (int64_t)(k0 + b_row) * N + n0 + b_col, b);
#pragma unroll
        for (int i = 0; i < V; i++) {
            As[a_col + i][a_row] = a_in ? a[i] : 0.0f;
            Bs[b_row][b_col + i] = b_in ? b[i] : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < BK; k++) {
            float ra[8], rb[8];
            *reinterpret_cast<float4*>(ra) = *reinterpret_cast<const float4*>(&As[k][4 * ty]);
            *reinterpret_cast<float4*>(ra + 4) = *reinterpret_cast<const float4*>(&As[k][64 + 4 * ty]);
            *reinterpret_cast<float4*>(rb) = *reinterpret_cast<const float4*>(&Bs[k][4 * tx]);
            *reinterpret_cast<float4*>(rb + 4) = *reinterpret_cast<const float4*>(&Bs[k][64 + 4 * tx]);
#pragma unroll
            for (int i = 0; i < 8; i++)
#pragma unroll
                for (int j = 0; j < 8; j++) acc[i][j] += ra[i] * rb[j];
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const int row = m0 + (i < 4 ? 4 * ty + i : 64 + 4 * ty + i - 4);
        if (row >= M) continue;
#pragma unroll
        for (int half = 0; half < 2; half++) {
            const int col = n0 + half * 64 + 4 * tx;  // 4 consecutive outputs; N % 8 == 0 keeps them in or out together
            if (col >= N) continue;
            T* c = C + (int64_t)row * N + col;
#pragma unroll
            for (int j = 0; j < 4; j++) c[j] = from_f32<T>(acc[i][half * 4 + j]);
        }
    }
}

template <class T>
void launch(GpuRung r, int M, int N, int K, const T* A, const T* B, T* C, cudaStream_t s) {
    const dim3 block32(32, 32);
    switch (r) {
        case GpuRung::naive:
            gemm_naive<T><<<dim3(cuda::ceil_div(M, 32), cuda::ceil_div(N, 32)), block32, 0, s>>>(M, N, K, A, B, C);
            break;
        case GpuRung::coalesced:
            gemm_coalesced<T><<<dim3(cuda::ceil_div(N, 32), cuda::ceil_div(M, 32)), block32, 0, s>>>(M, N, K, A, B, C);
            break;
        case GpuRung::smem:
            gemm_smem<T><<<dim3(cuda::ceil_div(N, 32), cuda::ceil_div(M, 32)), block32, 0, s>>>(M, N, K, A, B, C);
            break;
        case GpuRung::regtile:
            gemm_regtile<T><<<dim3(cuda::ceil_div(N, 128), cuda::ceil_div(M, 128)), 256, 0, s>>>(M, N, K, A, B, C);
            break;
        default: FAIL("gemm_simt: rung %s is not a SIMT rung", gpu_rung_info(r).name);
    }
    LAB_LAUNCH_CHECK();
}

}  // namespace

void gemm_simt(GpuRung r, GemmType t, int64_t M, int64_t N, int64_t K, const void* A, const void* B, void* C,
               cudaStream_t stream) {
    CHECK(M <= (1 << 30) && N <= (1 << 30) && K <= (1 << 30), "gemm_simt: M %ld, N %ld, K %ld must fit 32-bit indices",
          (long)M, (long)N, (long)K);
    if (t == GemmType::f32)
        launch<float>(r, (int)M, (int)N, (int)K, (const float*)A, (const float*)B, (float*)C, stream);
    else
        launch<bf16>(r, (int)M, (int)N, (int)K, (const bf16*)A, (const bf16*)B, (bf16*)C, stream);
}

}  // namespace penta::lab
