// gemm_mma.cu — rung 5 of the GPU GEMM ladder: tensor cores through mma.sync (sm_80 and later), bf16 in,
// f32 accumulation, bf16 out: C (M, N) = A (M, K) @ B^T with B stored (N, K) — both operands K-major, the
// layout tensor cores read best and the one a linear layer's weight (out, in) already has.
//
// Playbook: "Diving into the GPUs" — the SIMT rungs spend most instructions moving data; a tensor core does a
// 16 x 8 x 16 multiply-accumulate per warp instruction, so the kernel becomes a data pipeline:
//   - cp.async copies the next tiles global -> shared without passing through registers, STAGES = 4 deep
//     (a ring: while the tensor cores work on stage s, stages s+1..s+3 are in flight — double buffering, deeper);
//   - ldmatrix loads 8x8 blocks from shared memory straight into the fragment layout mma wants (mma_sm80.cuh);
//   - a 128 x 128 block tile over 8 warps (2 x 4), each warp 64 x 32: per k16 step 4 + 2 ldmatrix.x4 feed
//     16 mma instructions; rows padded to 40 elements (80 bytes) so ldmatrix's 8 rows hit 8 bank groups;
//   - blocks are rasterised in groups of 8 block-rows, so blocks running together share A and B tiles in L2.
// On Hopper this rung stays well below the wgmma rung: mma.sync is the compatibility path of its tensor cores.
// Shapes: M, N >= 1, N and K multiples of 8 (16-byte pieces; edges zero-filled by cp.async, stores masked).
//   build/bin/10_kernels --part gpu-gemm --rungs mma
#include "gpu_kernels.hpp"
#include "lab_cuda.cuh"
#include "mma_sm80.cuh"

namespace penta::lab {

using cuda::bf16;

namespace {

using namespace cuda;

constexpr int BM = 128, BN = 128, BK = 32, STAGES = 4, THREADS = 256;
constexpr int LDS = BK + 8;  // padded row of a shared tile, in elements
constexpr int STAGE_ELEMS = (BM + BN) * LDS;
constexpr int SMEM_BYTES = STAGES * STAGE_ELEMS * 2;

// block index -> (block row, block column), in groups of GROUP block-rows (L2 reuse between neighbours)
__device__ __forceinline__ void raster(int pid, int m_tiles, int n_tiles, int& tm, int& tn) {
    constexpr int GROUP = 8;
    const int group = pid / (GROUP * n_tiles), first = group * GROUP;
    const int size = min(m_tiles - first, GROUP);
    tm = first + (pid % (GROUP * n_tiles)) % size;
    tn = (pid % (GROUP * n_tiles)) / size;
}

__global__ void __launch_bounds__(THREADS) gemm_mma_kernel(int M, int N, int K, const bf16* __restrict__ A,
                                                           const bf16* __restrict__ B, bf16* __restrict__ C) {
    extern __shared__ __align__(128) bf16 smem[];
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int wm = (warp / 4) * 64, wn = (warp % 4) * 32;  // this warp's 64 x 32 of the block tile
    int tm, tn;
    raster(blockIdx.x, (M + BM - 1) / BM, (N + BN - 1) / BN, tm, tn);
    const int m0 = tm * BM, n0 = tn * BN;
    const int k_tiles = (K + BK - 1) / BK;

    // stage `s` <- k tile `kt`: A (128 x 32) and B (128 x 32), 512 pieces of 16 bytes each, 2 + 2 per thread
    auto load_stage = [&](int s, int kt) {
        bf16* As = smem + s * STAGE_ELEMS;
        bf16* Bs = As + BM * LDS;
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const int c = tid + i * THREADS, row = c / 4, col = (c % 4) * 8, k = kt * BK + col;
            const bool a_in = m0 + row < M && k < K, b_in = n0 + row < N && k < K;
            cp_async16(As + row * LDS + col, a_in ? A + (int64_t)(m0 + row) * K + k : A, a_in ? 16 : 0);
            cp_async16(Bs + row * LDS + col, b_in ? B + (int64_t)(n0 + row) * K + k : B, b_in ? 16 : 0);
        }
    };
    float acc[4][4][4] = {};  // [m16 tile][n8 tile][fragment]
#pragma unroll
    for (int s = 0; s < STAGES - 1; s++) {
        if (s < k_tiles) load_stage(s, s);
        cp_async_commit();  // commit even when empty: the group count stays uniform for wait_group
    }
    for (int kt = 0; kt < k_tiles; kt++) {
        cp_async_wait<STAGES - 2>();  // k tile kt has landed (at most STAGES-2 younger groups in flight)
        __syncthreads();              // ... for every thread, and everyone is done with the stage reused next
        if (kt + STAGES - 1 < k_tiles) load_stage((kt + STAGES - 1) % STAGES, kt + STAGES - 1);
        cp_async_commit();
        const bf16* As = smem + (kt % STAGES) * STAGE_ELEMS;
        const bf16* Bs = As + BM * LDS;
#pragma unroll
        for (int kk = 0; kk < BK; kk += 16) {
            uint32_t a[4][4], b[4][2];
#pragma unroll
            for (int mi = 0; mi < 4; mi++) ldmatrix_x4(a[mi], a_frag_addr(As, LDS, wm + mi * 16, kk, lane));
#pragma unroll
            for (int p = 0; p < 2; p++) {
                uint32_t r[4];
                ldmatrix_x4(r, b_frag_addr_nk(Bs, LDS, wn + p * 16, kk, lane));
                b[2 * p][0] = r[0], b[2 * p][1] = r[1], b[2 * p + 1][0] = r[2], b[2 * p + 1][1] = r[3];
            }
#pragma unroll
            for (int mi = 0; mi < 4; mi++)
#pragma unroll
                for (int nj = 0; nj < 4; nj++) mma_bf16_16816(acc[mi][nj], a[mi], b[nj]);
        }
    }
    cp_async_wait<0>();
    const int g = lane / 4, c2 = (lane % 4) * 2;
#pragma unroll
    for (int mi = 0; mi < 4; mi++)
#pragma unroll
        for (int nj = 0; nj < 4; nj++) {
            const int col = n0 + wn + nj * 8 + c2;
            if (col >= N) continue;
#pragma unroll
            for (int h = 0; h < 2; h++) {  // rows g and g + 8 of the m16 tile
                const int row = m0 + wm + mi * 16 + g + h * 8;
                if (row < M)
                    *reinterpret_cast<uint32_t*>(C + (int64_t)row * N + col) = pack_bf16(acc[mi][nj][2 * h], acc[mi][nj][2 * h + 1]);
            }
        }
}

}  // namespace

void gemm_mma_bf16(int64_t M, int64_t N, int64_t K, const uint16_t* A, const uint16_t* Bt, uint16_t* C,
                   cudaStream_t stream) {
    CHECK(M <= (1 << 30) && N <= (1 << 30) && K <= (1 << 30), "gemm_mma: M %ld, N %ld, K %ld must fit 32-bit indices",
          (long)M, (long)N, (long)K);
    static bool configured = false;
    if (!configured) {
        CUDA_CHECK(cudaFuncSetAttribute(gemm_mma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM_BYTES));
        configured = true;
    }
    const int64_t blocks = cuda::ceil_div(M, BM) * cuda::ceil_div(N, BN);
    CHECK(blocks < (1ll << 31), "gemm_mma: %ld blocks exceed the grid", (long)blocks);
    gemm_mma_kernel<<<(unsigned)blocks, THREADS, SMEM_BYTES, stream>>>((int)M, (int)N, (int)K, (const bf16*)A,
                                                                      (const bf16*)Bt, (bf16*)C);
    LAB_LAUNCH_CHECK();
}

}  // namespace penta::lab
