// gemm_wgmma_sm90a.cu — rung 6 of the GPU GEMM ladder, Hopper only (sm_90a): the tensor memory accelerator
// (TMA) copies tiles into shared memory, warpgroup MMA (wgmma) multiplies them there, and the block splits
// into a producer and consumers that meet at mbarriers. bf16 in, f32 accumulation, bf16 out:
// C (M, N) = A (M, K) @ B^T with B stored (N, K), as the mma rung.
//
// Playbook: "Diving into the GPUs" — Hopper's answer to "keep the tensor cores fed":
//   - TMA: one thread describes a 2-D box (a tensor map made on the host) and the copy engine moves it,
//     swizzled, into shared memory, counting the bytes into an mbarrier ("transaction count"); no registers,
//     no address arithmetic in the other threads; boxes hanging over the matrix's edge are filled with zeros;
//   - wgmma.m64n256k16: four warps (a warpgroup) multiply a 64 x 16 tile of A by a 16 x 256 tile of B, both
//     read by the tensor cores from shared memory through descriptors, into 128 f32 registers per thread;
//     asynchronous: issued, committed as a group, waited for later;
//   - warp specialisation: warpgroup 0 is the producer (one thread issues TMA; setmaxnreg gives its registers
//     away), warpgroups 1 and 2 are consumers, 64 rows of the 128 x 256 block tile each (setmaxnreg takes
//     232 registers each); a ring of 4 stages of 128 x 64 + 256 x 64 bf16 (48 KB each): full[s] says a stage
//     has landed (TMA completes it), empty[s] that the consumers are done with it (all 256 consumer threads
//     arrive). A consumer keeps one wgmma group in flight: it releases stage s-1 once group s-1 has completed.
// Shared-memory layout (PTX ISA, "matrix descriptor", 128-byte swizzle, K-major): each tile row is 64 bf16 =
// 128 bytes, 8 rows form a 1024-byte swizzle atom (16-byte chunk c of row r stored at chunk c ^ (r % 8)),
// atoms follow each other every 1024 bytes (the descriptor's stride byte offset); a k16 step within the row
// moves the descriptor's start by 32 bytes. TMA writes exactly this layout with CU_TENSOR_MAP_SWIZZLE_128B.
// Shapes: M, N >= 1; K and N multiples of 8 (TMA wants 16-byte row strides).
//   build/bin/10_kernels --part gpu-gemm --rungs wgmma         (compiled for sm_90a alone: see the Makefile)
#include <cuda.h>
#include <cudaTypedefs.h>

#include "gpu_kernels.hpp"
#include "lab_cuda.cuh"

namespace penta::lab {

using cuda::bf16;

namespace {

constexpr int BM = 128, BN = 256, BK = 64, STAGES = 4, CONSUMERS = 2, THREADS = 128 * (CONSUMERS + 1);
constexpr int A_STAGE = BM * BK, B_STAGE = BN * BK;  // elements
constexpr int STAGE_BYTES = (A_STAGE + B_STAGE) * 2;
constexpr int SMEM_BYTES = STAGES * STAGE_BYTES + 2 * STAGES * 8 + 1024;  // + barriers + room to align to 1024

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ __forceinline__ uint32_t sa(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void mbar_init(uint64_t* bar, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(sa(bar)), "r"(count));
}
__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, int bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(sa(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(sa(bar)) : "memory");
}
// spin until the phase of parity `parity` has completed (a fresh barrier counts its phase "-1", parity 1, as done)
__device__ __forceinline__ void mbar_wait(uint64_t* bar, int parity) {
    asm volatile(
        "{\n .reg .pred done;\n"
        "LAB_WAIT_%=:\n"
        " mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        " @!done bra LAB_WAIT_%=;\n}\n" ::"r"(sa(bar)),
        "r"(parity)
        : "memory");
}
__device__ __forceinline__ void tma_load_2d(void* dst, const CUtensorMap* map, int c0, int c1, uint64_t* bar) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
            sa(dst)),
        "l"(map), "r"(c0), "r"(c1), "r"(sa(bar))
        : "memory");
}

// a shared-memory matrix descriptor: start >> 4 (bits 0-13), leading byte offset >> 4 (16-29; unused by a
// K-major swizzled operand whose k16 slice lies within one 128-byte row: 1), stride byte offset >> 4 (32-45:
// 1024, one swizzle atom), swizzle mode 1 = 128 bytes (62-63)
__device__ __forceinline__ uint64_t smem_desc(const bf16* p) {
    return (uint64_t)((sa(p) & 0x3FFFF) >> 4) | (uint64_t)1 << 16 | (uint64_t)(1024 >> 4) << 32 | (uint64_t)1 << 62;
}

// d (64 x 256 per warpgroup, 128 f32 per thread) += A (64 x 16) @ B (16 x 256), both from shared memory
__device__ __forceinline__ void wgmma_m64n256k16(float* d, uint64_t da, uint64_t db) {
#define LAB_D8(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])
    asm volatile(
        "{\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
        "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
        "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
        "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
        "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, "
        "%128, %129, 1, 1, 1, 0, 0;\n"  // scale-d 1 (accumulate), scale A and B by 1, neither transposed
        "}\n"
        : LAB_D8(0), LAB_D8(8), LAB_D8(16), LAB_D8(24), LAB_D8(32), LAB_D8(40), LAB_D8(48), LAB_D8(56), LAB_D8(64),
          LAB_D8(72), LAB_D8(80), LAB_D8(88), LAB_D8(96), LAB_D8(104), LAB_D8(112), LAB_D8(120)
        : "l"(da), "l"(db));
#undef LAB_D8
}
#endif

__global__ void __launch_bounds__(THREADS, 1) gemm_wgmma_kernel(int M, int N, int K, const __grid_constant__ CUtensorMap tmA,
                                                                const __grid_constant__ CUtensorMap tmB, bf16* __restrict__ C) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ uint8_t smem_raw[];
    // 128-byte swizzle atoms must start on 1024-byte boundaries
    uint8_t* base = (uint8_t*)(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);
    bf16* sA = (bf16*)base;
    bf16* sB = sA + STAGES * A_STAGE;
    uint64_t* full = (uint64_t*)(sB + STAGES * B_STAGE);
    uint64_t* empty = full + STAGES;
    const int wg = threadIdx.x / 128, t = threadIdx.x % 128;
    // blocks in groups of 8 block-rows (as the mma rung): neighbours share tiles in L2
    const int m_tiles = (M + BM - 1) / BM, n_tiles = (N + BN - 1) / BN, pid = blockIdx.x;
    const int group = pid / (8 * n_tiles), first = group * 8, size = min(m_tiles - first, 8);
    const int m0 = (first + (pid % (8 * n_tiles)) % size) * BM, n0 = ((pid % (8 * n_tiles)) / size) * BN;
    const int k_tiles = (K + BK - 1) / BK;

    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; s++) {
            mbar_init(&full[s], 1);                    // the producer's arrive.expect_tx; TMA's bytes complete it
            mbar_init(&empty[s], CONSUMERS * 128);     // every consumer thread, once done reading the stage
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");  // visible to the async proxy (TMA)
    }
    __syncthreads();

    if (wg == 0) {  // producer
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
        if (t == 0) {
            for (int kt = 0; kt < k_tiles; kt++) {
                const int s = kt % STAGES;
                mbar_wait(&empty[s], ((kt / STAGES) & 1) ^ 1);  // the consumers released this stage's last use
                mbar_expect_tx(&full[s], STAGE_BYTES);
                tma_load_2d(sA + s * A_STAGE, &tmA, kt * BK, m0, &full[s]);  // coordinates: (k, row)
                tma_load_2d(sB + s * B_STAGE, &tmB, kt * BK, n0, &full[s]);
            }
        }
        return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
    const int cw = wg - 1;  // this consumer's 64 rows of the block tile
    float d[128];
#pragma unroll
    for (int i = 0; i < 128; i++) d[i] = 0.0f;
    for (int kt = 0; kt < k_tiles; kt++) {
        const int s = kt % STAGES;
        mbar_wait(&full[s], (kt / STAGES) & 1);
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
        const bf16* a = sA + s * A_STAGE + cw * 64 * BK;
        const bf16* b = sB + s * B_STAGE;
#pragma unroll
        for (int k16 = 0; k16 < BK / 16; k16++) wgmma_m64n256k16(d, smem_desc(a + k16 * 16), smem_desc(b + k16 * 16));
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");  // the previous group has finished ...
        if (kt > 0) mbar_arrive(&empty[(kt - 1) % STAGES]);                // ... so its stage can be refilled
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    // accumulator layout (PTX ISA, wgmma .m64nNk16 D fragments): warp w of the warpgroup holds rows 16w..16w+15;
    // d[4j + e] is row 16w + lane/4 + 8·(e / 2), column 8j + 2·(lane % 4) + e % 2
    const int lane = t % 32, row0 = m0 + cw * 64 + (t / 32) * 16 + lane / 4;
#pragma unroll
    for (int j = 0; j < BN / 8; j++) {
        const int col = n0 + 8 * j + 2 * (lane % 4);
        if (col >= N) continue;
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int row = row0 + 8 * h;
            if (row < M) {
                const __nv_bfloat162 v = __floats2bfloat162_rn(d[4 * j + 2 * h], d[4 * j + 2 * h + 1]);
                *reinterpret_cast<__nv_bfloat162*>(C + (int64_t)row * N + col) = v;
            }
        }
    }
#endif
}

PFN_cuTensorMapEncodeTiled_v12000 encode_fn() {
    static PFN_cuTensorMapEncodeTiled_v12000 fn = nullptr;
    if (!fn) {
        void* p = nullptr;
        cudaDriverEntryPointQueryResult q;
        CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q));
        CHECK(q == cudaDriverEntryPointSuccess && p, "the driver has no cuTensorMapEncodeTiled (TMA needs CUDA 12+)");
        fn = (PFN_cuTensorMapEncodeTiled_v12000)p;
    }
    return fn;
}

// a row-major (rows, K) bf16 matrix as TMA boxes of box_rows x 64, 128-byte swizzled, zero fill outside
CUtensorMap tensor_map(const void* ptr, int64_t rows, int64_t K, int box_rows) {
    CUtensorMap m;
    const cuuint64_t dims[2] = {(cuuint64_t)K, (cuuint64_t)rows};
    const cuuint64_t strides[1] = {(cuuint64_t)K * 2};  // bytes between rows (dimension 1)
    const cuuint32_t box[2] = {BK, (cuuint32_t)box_rows};
    const cuuint32_t elem_strides[2] = {1, 1};
    const CUresult r = encode_fn()(&m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(ptr), dims, strides, box,
                                   elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                   CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    CHECK(r == CUDA_SUCCESS, "cuTensorMapEncodeTiled failed (%d) for a %ld x %ld bf16 matrix at %p", (int)r,
          (long)rows, (long)K, ptr);
    return m;
}

}  // namespace

void gemm_wgmma_bf16(int64_t M, int64_t N, int64_t K, const uint16_t* A, const uint16_t* Bt, uint16_t* C,
                     cudaStream_t stream) {
    CHECK(device_capability() == 90, "the wgmma rung needs an sm_90 GPU (Hopper); this one is sm_%d", device_capability());
    CHECK(M <= (1 << 30) && N <= (1 << 30) && K <= (1 << 30), "gemm_wgmma: M %ld, N %ld, K %ld must fit 32-bit indices",
          (long)M, (long)N, (long)K);
    CHECK((uintptr_t)A % 16 == 0 && (uintptr_t)Bt % 16 == 0, "gemm_wgmma: TMA needs 16-byte aligned A and B");
    static bool configured = false;
    if (!configured) {
        CUDA_CHECK(cudaFuncSetAttribute(gemm_wgmma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM_BYTES));
        configured = true;
    }
    const CUtensorMap ta = tensor_map(A, M, K, BM), tb = tensor_map(Bt, N, K, BN);
    const int64_t blocks = cuda::ceil_div(M, BM) * cuda::ceil_div(N, BN);
    gemm_wgmma_kernel<<<(unsigned)blocks, THREADS, SMEM_BYTES, stream>>>((int)M, (int)N, (int)K, ta, tb, (bf16*)C);
    LAB_LAUNCH_CHECK();
}

}  // namespace penta::lab
