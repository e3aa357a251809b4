// flash_fwd.cu — flash attention forward on tensor cores (mma.sync, sm_80+): causal, GQA, bf16 q/k/v/out,
// f32 softmax statistics, head dims 64 and 128. out (B, T, H, D) and lse (B, H, T) (natural log, for backward).
//
// Playbook: "Flash attention" — the (T, T) scores never reach device memory. One block takes 128 queries of
// one head (8 warps, 16 query rows each) and walks the key/value tiles of 64 keys up to the diagonal:
//   S = Q K^T            mma.sync with Q (from shared memory, ldmatrix) and K (K-major, ldmatrix)
//   online softmax       per row: m' = max(m, max_j s_j), l' = l·2^(m-m') + sum_j 2^(s_j-m'), O *= 2^(m-m')
//                        (scores pre-multiplied by scale·log2(e), so exp is one exp2)
//   O += P V             P stays in registers: the accumulator layout of S, rounded to bf16 pairs, IS the A
//                        fragment layout (mma_sm80.cuh); V read with ldmatrix.trans
// while cp.async brings the next K/V tile into the other half of a double buffer. Tiles past the diagonal are
// never visited; the two tiles on it are masked element by element. Blocks start with the last (longest)
// query blocks so the short ones fill the tail. Shared-memory rows are padded by 16 bytes (conflict-free
// ldmatrix). GQA: head h reads kv head h / (H / Hkv).
//   build/bin/10_kernels --part attention
#include "gpu_kernels.hpp"
#include "lab_cuda.cuh"
#include "mma_sm80.cuh"

namespace penta::lab {

using cuda::bf16;

namespace {

using namespace cuda;

constexpr int BM = 128, BN = 64, WARPS = 8, THREADS = WARPS * 32;

template <int D>
struct FwdSmem {
    static constexpr int LD = D + 8;  // padded row, elements
    static constexpr int Q = BM * LD, KV = BN * LD;
    static constexpr int BYTES = (Q + 4 * KV) * 2;  // Q, then K and V twice (double buffer)
};

// `rows` rows of one head of a (T, heads, D) slab starting at `g` -> a shared tile (rows of D + 8)
template <int D>
__device__ __forceinline__ void load_tile(bf16* s, const bf16* g, int64_t row_stride, int rows, int tid) {
    load_rows_async<D>(s, D + 8, g, row_stride, rows, tid, THREADS);
}

template <int D>
__global__ void __launch_bounds__(THREADS) flash_fwd_kernel(const bf16* __restrict__ q, const bf16* __restrict__ k,
                                                            const bf16* __restrict__ v, bf16* __restrict__ out,
                                                            float* __restrict__ lse, int T, int H, int Hkv, float scale_log2) {
    using S = FwdSmem<D>;
    constexpr int LD = S::LD;
    extern __shared__ __align__(128) bf16 smem[];
    bf16* sQ = smem;
    bf16* sK = smem + S::Q;           // two buffers of K, then two of V
    bf16* sV = sK + 2 * S::KV;
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int qb = gridDim.x - 1 - blockIdx.x;  // longest query blocks first
    const int h = blockIdx.y, b = blockIdx.z, kvh = h / (H / Hkv);
    const int64_t q_stride = (int64_t)H * D, kv_stride = (int64_t)Hkv * D;
    const bf16* qg = q + ((int64_t)b * T + qb * BM) * q_stride + (int64_t)h * D;
    const bf16* kg = k + (int64_t)b * T * kv_stride + (int64_t)kvh * D;
    const bf16* vg = v + (int64_t)b * T * kv_stride + (int64_t)kvh * D;

    const int q0 = qb * BM + warp * 16;        // this warp's first query row
    const int n_tiles = (qb + 1) * BM / BN;    // key tiles up to the diagonal
    load_tile<D>(sQ, qg, q_stride, BM, tid);
    load_tile<D>(sK, kg, kv_stride, BN, tid);
    load_tile<D>(sV, vg, kv_stride, BN, tid);
    cp_async_commit();

    float o[D / 8][4] = {};                    // O: 16 rows x D per warp
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0, 0};  // rows g and g + 8 of the warp's 16
    const int g = lane / 4, c2 = (lane % 4) * 2;
    for (int j = 0; j < n_tiles; j++) {
        const int buf = j & 1;
        if (j + 1 < n_tiles) {  // the next tile into the other buffer (free: everyone passed the last barrier)
            load_tile<D>(sK + (buf ^ 1) * S::KV, kg + (int64_t)(j + 1) * BN * kv_stride, kv_stride, BN, tid);
            load_tile<D>(sV + (buf ^ 1) * S::KV, vg + (int64_t)(j + 1) * BN * kv_stride, kv_stride, BN, tid);
        }
        cp_async_commit();
        cp_async_wait<1>();  // tile j (and Q) landed
        __syncthreads();
        const bf16* Kt = sK + buf * S::KV;
        const bf16* Vt = sV + buf * S::KV;
        float s[BN / 8][4] = {};  // S = Q K^T: 16 x 64 per warp
#pragma unroll
        for (int kk = 0; kk < D; kk += 16) {
            uint32_t a[4];
            ldmatrix_x4(a, a_frag_addr(sQ, LD, warp * 16, kk, lane));
#pragma unroll
            for (int p = 0; p < BN / 16; p++) {
                uint32_t r[4];
                ldmatrix_x4(r, b_frag_addr_nk(Kt, LD, p * 16, kk, lane));
                mma_bf16_16816(s[2 * p], a, r);
                mma_bf16_16816(s[2 * p + 1], a, r + 2);
            }
        }
        const int k0 = j * BN;
        const bool diagonal = k0 + BN - 1 > q0;  // some key of the tile lies after some query of the warp
#pragma unroll
        for (int t = 0; t < BN / 8; t++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                s[t][e] *= scale_log2;
                if (diagonal && k0 + t * 8 + c2 + (e & 1) > q0 + g + (e >> 1) * 8) s[t][e] = -INFINITY;
            }
        // online softmax, rows g (e = 0, 1) and g + 8 (e = 2, 3); a row's 64 values sit in the 4 lanes of a quad
#pragma unroll
        for (int r = 0; r < 2; r++) {
            float mx = m[r];
#pragma unroll
            for (int t = 0; t < BN / 8; t++) mx = fmaxf(mx, fmaxf(s[t][2 * r], s[t][2 * r + 1]));
            mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, 2));
            const float base = mx == -INFINITY ? 0.0f : mx;  // a row that has seen no key yet keeps l = 0, O = 0
            const float alpha = exp2f(m[r] - base);
            float sum = 0;
#pragma unroll
            for (int t = 0; t < BN / 8; t++) {
                s[t][2 * r] = exp2f(s[t][2 * r] - base);
                s[t][2 * r + 1] = exp2f(s[t][2 * r + 1] - base);
                sum += s[t][2 * r] + s[t][2 * r + 1];
            }
            l[r] = l[r] * alpha + sum;  // this lane's part of the row sum; the quad is summed at the end
            m[r] = mx;
#pragma unroll
            for (int t = 0; t < D / 8; t++) o[t][2 * r] *= alpha, o[t][2 * r + 1] *= alpha;
        }
        // O += P V: P's accumulator tiles 2kk, 2kk+1 are the A fragment of keys 16kk .. 16kk + 15
#pragma unroll
        for (int kk = 0; kk < BN / 16; kk++) {
            const uint32_t a[4] = {pack_bf16(s[2 * kk][0], s[2 * kk][1]), pack_bf16(s[2 * kk][2], s[2 * kk][3]),
                                   pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]), pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
            for (int p = 0; p < D / 16; p++) {
                uint32_t r[4];
                ldmatrix_x4_trans(r, b_frag_addr_kn(Vt, LD, kk * 16, p * 16, lane));
                mma_bf16_16816(o[2 * p], a, r);
                mma_bf16_16816(o[2 * p + 1], a, r + 2);
            }
        }
        __syncthreads();  // everyone is done with buffer `buf` before the next iteration refills it
    }
    // normalise and write: the quad's 4 partial sums make the row sum
#pragma unroll
    for (int r = 0; r < 2; r++) {
        l[r] += __shfl_xor_sync(kFullMask, l[r], 1);
        l[r] += __shfl_xor_sync(kFullMask, l[r], 2);
        const int row = q0 + g + r * 8;
        const float inv = l[r] > 0 ? 1.0f / l[r] : 0.0f;
        bf16* orow = out + ((int64_t)b * T + row) * q_stride + (int64_t)h * D;
#pragma unroll
        for (int t = 0; t < D / 8; t++)
            *reinterpret_cast<uint32_t*>(orow + t * 8 + c2) = pack_bf16(o[t][2 * r] * inv, o[t][2 * r + 1] * inv);
        if ((lane % 4) == 0)  // natural-log lse from the log2-domain statistics
            lse[((int64_t)b * H + h) * T + row] = l[r] > 0 ? (m[r] + log2f(l[r])) * 0.69314718055994531f : -INFINITY;
    }
}

template <int D>
void launch_fwd(const FlashShape& s, const bf16* q, const bf16* k, const bf16* v, bf16* out, float* lse, cudaStream_t st) {
    static bool configured = false;
    if (!configured) {
        CUDA_CHECK(cudaFuncSetAttribute(flash_fwd_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, FwdSmem<D>::BYTES));
        configured = true;
    }
    const dim3 grid((unsigned)(s.T / BM), (unsigned)s.H, (unsigned)s.B);
    const float scale_log2 = 1.4426950408889634f / sqrtf((float)D);  // 1/sqrt(D) · log2(e)
    flash_fwd_kernel<D><<<grid, THREADS, FwdSmem<D>::BYTES, st>>>(q, k, v, out, lse, (int)s.T, (int)s.H, (int)s.Hkv, scale_log2);
    LAB_LAUNCH_CHECK();
}

}  // namespace

void flash_fwd(const uint16_t* q, const uint16_t* k, const uint16_t* v, uint16_t* out, float* lse, const FlashShape& s,
               cudaStream_t stream) {
    CHECK(s.D == 64 || s.D == 128, "flash_fwd: head dim %ld: the kernels are built for 64 and 128", (long)s.D);
    CHECK(s.T >= BM && s.T % BM == 0 && s.T < (1 << 24), "flash_fwd: T %ld must be a multiple of %d", (long)s.T, BM);
    CHECK(s.B >= 1 && s.B <= 65535 && s.H >= 1 && s.H <= 65535 && s.Hkv >= 1 && s.H % s.Hkv == 0,
          "flash_fwd: B %ld, H %ld, Hkv %ld: H must be a multiple of Hkv", (long)s.B, (long)s.H, (long)s.Hkv);
    CHECK(device_capability() >= 80, "flash attention uses mma.sync bf16: sm_80+ (this GPU: sm_%d)", device_capability());
    if (s.D == 64)
        launch_fwd<64>(s, (const bf16*)q, (const bf16*)k, (const bf16*)v, (bf16*)out, lse, stream);
    else
        launch_fwd<128>(s, (const bf16*)q, (const bf16*)k, (const bf16*)v, (bf16*)out, lse, stream);
}

}  // namespace penta::lab
