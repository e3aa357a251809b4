// flash_bwd.cu — flash attention backward on tensor cores (mma.sync, sm_80+): causal, GQA, bf16, head dims
// 64 and 128. From q, k, v, out, lse, dout: dq, dk, dv, with the probabilities recomputed tile by tile.
//
// Playbook: "Flash attention" (backward) — FlashAttention-2's split:
//   1. prep:  D_i = rowsum(dO_i ∘ O_i) (f32), and the f32 dq accumulator zeroed;
//   2. main:  one block per (batch, kv head, 128 keys) owns dK and dV of those keys in registers and walks
//             every query block of 64 (from the diagonal on) of every query head of its group (GQA: the
//             group's heads add into the same dK/dV, so no atomics for them). Per query block, 8 warps:
//               S = Q K^T, dP = dO V^T          (warp tile 16 queries x 64 keys)
//               P = 2^(S·scale·log2e - lse·log2e), dS = P ∘ (dP - D_i); both to shared memory as bf16
//               dQ += dS K                       (16 queries x D/2 per warp, added to the f32 accumulator
//                                                 with atomics: several key blocks contribute to a query)
//               dV += P^T dO, dK += dS^T Q       (16 keys x D per warp; P^T and dS^T read with ldmatrix.trans)
//             with the next query block's Q, dO, lse, D arriving by cp.async in a double buffer;
//   3. post:  dq = scale · accumulator, rounded to bf16.
// Recomputing P costs one more Q K^T; storing it would cost (T, T) memory per head.
//   build/bin/10_kernels --part attention
#include <cstdio>
#include <string>
#include <type_traits>

#include "gpu_kernels.hpp"
#include "lab_cuda.cuh"
#include "mma_sm80.cuh"

namespace penta::lab {

using cuda::bf16;

namespace {

using namespace cuda;

constexpr int BM = 64, BN = 128, WARPS = 8, THREADS = WARPS * 32;
constexpr float kLog2e = 1.4426950408889634f;

template <int D>
struct BwdSmem {
    static constexpr int LD = D + 8, LDP = BN + 8;
    static constexpr int KV = BN * LD, QO = BM * LD, P = BM * LDP;
    // K, V; two buffers of (Q, dO); P, dS; two buffers of (lse, D) in f32
    static constexpr int BYTES = (2 * KV + 4 * QO + 2 * P) * 2 + 2 * 2 * BM * 4;
};

__global__ void flash_bwd_prep(const bf16* __restrict__ out, const bf16* __restrict__ dout, float* __restrict__ Drow,
                               float* __restrict__ dq_acc, int T, int H, int D) {
    // one warp per (b, t, h) row: D_i = dO·O; and this row of the dq accumulator zeroed
    const int64_t row = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    const int lane = threadIdx.x % 32;
    const int64_t rows = (int64_t)gridDim.y * T * H;  // gridDim.y = B
    const int64_t r = row + (int64_t)blockIdx.y * T * H;
    if (row >= (int64_t)T * H || r >= rows) return;
    float acc = 0;
    for (int d = lane * 2; d < D; d += 64) {
        const float2 o = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(out + r * D + d));
        const float2 g = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(dout + r * D + d));
        acc += o.x * g.x + o.y * g.y;
        *reinterpret_cast<float2*>(dq_acc + r * D + d) = make_float2(0.0f, 0.0f);
    }
    acc = warp_sum(acc);
    const int64_t b = blockIdx.y, t = row / H, h = row % H;
    if (lane == 0) Drow[(b * H + h) * T + t] = acc;
}

__global__ void flash_bwd_post(const float* __restrict__ dq_acc, bf16* __restrict__ dq, int64_t n, float scale) {
    for (int64_t i = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * 2; i < n; i += (int64_t)gridDim.x * blockDim.x * 2)
        *reinterpret_cast<uint32_t*>(dq + i) = pack_bf16(dq_acc[i] * scale, dq_acc[i + 1] * scale);
}

template <int D>
__global__ void __launch_bounds__(THREADS, 1) flash_bwd_kernel(
    const bf16* __restrict__ q, const bf16* __restrict__ k, const bf16* __restrict__ v, const bf16* __restrict__ dout,
    const float* __restrict__ lse, const float* __restrict__ Drow, float* __restrict__ dq_acc, bf16* __restrict__ dk,
    bf16* __restrict__ dv, int T, int H, int Hkv, float scale) {
    using S = BwdSmem<D>;
    constexpr int LD = S::LD, LDP = S::LDP;
    extern __shared__ __align__(128) bf16 smem[];
    bf16* sK = smem;
    bf16* sV = sK + S::KV;
    bf16* sQ = sV + S::KV;            // [2][QO]
    bf16* sdO = sQ + 2 * S::QO;       // [2][QO]
    bf16* sP = sdO + 2 * S::QO;
    bf16* sdS = sP + S::P;
    float* sL = (float*)(sdS + S::P); // [2][BM] lse, then [2][BM] D
    float* sD = sL + 2 * BM;
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, g = lane / 4, c2 = (lane % 4) * 2;
    const int kb = blockIdx.x, kvh = blockIdx.y, b = blockIdx.z, group = H / Hkv;
    const int64_t q_stride = (int64_t)H * D, kv_stride = (int64_t)Hkv * D;
    const int k0 = kb * BN;
    const bf16* kg = k + ((int64_t)b * T + k0) * kv_stride + (int64_t)kvh * D;
    const bf16* vg = v + ((int64_t)b * T + k0) * kv_stride + (int64_t)kvh * D;
    load_rows_async<D>(sK, LD, kg, kv_stride, BN, tid, THREADS);
    load_rows_async<D>(sV, LD, vg, kv_stride, BN, tid, THREADS);
    // the work list: (head of the group, query block) pairs, query blocks from the diagonal (2kb) on
    const int q_blocks = T / BM, first_qb = k0 / BM, per_head = q_blocks - first_qb, items = group * per_head;
    auto load_item = [&](int it, int buf) {
        const int h = kvh * group + it / per_head, qb = first_qb + it % per_head;
        const bf16* qg = q + ((int64_t)b * T + qb * BM) * q_stride + (int64_t)h * D;
        const bf16* og = dout + ((int64_t)b * T + qb * BM) * q_stride + (int64_t)h * D;
        load_rows_async<D>(sQ + buf * S::QO, LD, qg, q_stride, BM, tid, THREADS);
        load_rows_async<D>(sdO + buf * S::QO, LD, og, q_stride, BM, tid, THREADS);
        if (tid < BM / 4) {  // 64 lse and 64 D values: 16 pieces of 4 floats each
            const int64_t row = ((int64_t)b * H + h) * T + qb * BM + tid * 4;
            cp_async16(sL + buf * BM + tid * 4, lse + row);
            cp_async16(sD + buf * BM + tid * 4, Drow + row);
        }
    };
    load_item(0, 0);
    cp_async_commit();

    float dkacc[D / 8][4] = {}, dvacc[D / 8][4] = {};  // this warp's 16 keys x D
    const int wm = (warp % 4) * 16, wn = (warp / 4) * 64;  // phase 1: 16 queries x 64 keys of the 64 x 128
    const int wk = warp * 16;                              // phase 3: 16 keys of the 128
    for (int it = 0; it < items; it++) {
        const int buf = it & 1;
        if (it + 1 < items) load_item(it + 1, buf ^ 1);
        cp_async_commit();
        cp_async_wait<1>();
        __syncthreads();
        const int h = kvh * group + it / per_head, qb = first_qb + it % per_head, q0 = qb * BM;
        const bf16* Q = sQ + buf * S::QO;
        const bf16* dO = sdO + buf * S::QO;
        // phase 1: S and dP for 16 queries x 64 keys, then P and dS into shared memory
        float s[8][4] = {}, dp[8][4] = {};
#pragma unroll
        for (int kk = 0; kk < D; kk += 16) {
            uint32_t aq[4], ao[4];
            ldmatrix_x4(aq, a_frag_addr(Q, LD, wm, kk, lane));
            ldmatrix_x4(ao, a_frag_addr(dO, LD, wm, kk, lane));
#pragma unroll
            for (int p = 0; p < 4; p++) {
                uint32_t rk[4], rv[4];
                ldmatrix_x4(rk, b_frag_addr_nk(sK, LD, wn + p * 16, kk, lane));
                ldmatrix_x4(rv, b_frag_addr_nk(sV, LD, wn + p * 16, kk, lane));
                mma_bf16_16816(s[2 * p], aq, rk), mma_bf16_16816(s[2 * p + 1], aq, rk + 2);
                mma_bf16_16816(dp[2 * p], ao, rv), mma_bf16_16816(dp[2 * p + 1], ao, rv + 2);
            }
        }
        const float* L = sL + buf * BM;
        const float* Dv = sD + buf * BM;
#pragma unroll
        for (int t = 0; t < 8; t++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int qr = wm + g + (e >> 1) * 8, kc = wn + t * 8 + c2 + (e & 1);
                float p = exp2f((s[t][e] * scale - L[qr]) * kLog2e);  // e^(s·scale - lse)
                if (k0 + kc > q0 + qr) p = 0.0f;  // causal: the key lies after the query
                s[t][e] = p;
                dp[t][e] = p * (dp[t][e] - Dv[qr]);  // dS
            }
#pragma unroll
        for (int t = 0; t < 8; t++)
#pragma unroll
            for (int hh = 0; hh < 2; hh++) {
                const int off = (wm + g + hh * 8) * LDP + wn + t * 8 + c2;
                *reinterpret_cast<uint32_t*>(sP + off) = pack_bf16(s[t][2 * hh], s[t][2 * hh + 1]);
                *reinterpret_cast<uint32_t*>(sdS + off) = pack_bf16(dp[t][2 * hh], dp[t][2 * hh + 1]);
            }
        __syncthreads();
        // phase 2: dQ (64 x D) += dS (64 x 128) K (128 x D); warp: 16 queries x D/2, into the f32 accumulator
        {
            const int dn = (warp / 4) * (D / 2);
            float acc[D / 16][4] = {};
#pragma unroll
            for (int kk = 0; kk < BN; kk += 16) {
                uint32_t a[4];
                ldmatrix_x4(a, a_frag_addr(sdS, LDP, wm, kk, lane));
#pragma unroll
                for (int p = 0; p < D / 32; p++) {
                    uint32_t r[4];
                    ldmatrix_x4_trans(r, b_frag_addr_kn(sK, LD, kk, dn + p * 16, lane));
                    mma_bf16_16816(acc[2 * p], a, r), mma_bf16_16816(acc[2 * p + 1], a, r + 2);
                }
            }
            float* dqg = dq_acc + ((int64_t)b * T + q0 + wm) * q_stride + (int64_t)h * D + dn;
#pragma unroll
            for (int t = 0; t < D / 16; t++)
#pragma unroll
                for (int e = 0; e < 4; e++) atomicAdd(dqg + (int64_t)(g + (e >> 1) * 8) * q_stride + t * 8 + c2 + (e & 1), acc[t][e]);
        }
        // phase 3: dV += P^T dO, dK += dS^T Q for this warp's 16 keys (k over the 64 queries)
#pragma unroll
        for (int kk = 0; kk < BM; kk += 16) {
            uint32_t ap[4], as[4];
            ldmatrix_x4_trans(ap, at_frag_addr_km(sP, LDP, kk, wk, lane));
            ldmatrix_x4_trans(as, at_frag_addr_km(sdS, LDP, kk, wk, lane));
#pragma unroll
            for (int p = 0; p < D / 16; p++) {
                uint32_t ro[4], rq[4];
                ldmatrix_x4_trans(ro, b_frag_addr_kn(dO, LD, kk, p * 16, lane));
                ldmatrix_x4_trans(rq, b_frag_addr_kn(Q, LD, kk, p * 16, lane));
                mma_bf16_16816(dvacc[2 * p], ap, ro), mma_bf16_16816(dvacc[2 * p + 1], ap, ro + 2);
                mma_bf16_16816(dkacc[2 * p], as, rq), mma_bf16_16816(dkacc[2 * p + 1], as, rq + 2);
            }
        }
        __syncthreads();  // P, dS and this buffer are rewritten next iteration
    }
    // dK = scale · dS^T Q and dV, rows k0 + wk + g (+8) of kv head kvh
#pragma unroll
    for (int hh = 0; hh < 2; hh++) {
        const int64_t row = (int64_t)b * T + k0 + wk + g + hh * 8;
        bf16* dkr = dk + row * kv_stride + (int64_t)kvh * D;
        bf16* dvr = dv + row * kv_stride + (int64_t)kvh * D;
#pragma unroll
        for (int t = 0; t < D / 8; t++) {
            *reinterpret_cast<uint32_t*>(dkr + t * 8 + c2) = pack_bf16(dkacc[t][2 * hh] * scale, dkacc[t][2 * hh + 1] * scale);
            *reinterpret_cast<uint32_t*>(dvr + t * 8 + c2) = pack_bf16(dvacc[t][2 * hh], dvacc[t][2 * hh + 1]);
        }
    }
}

template <int D>
void launch_bwd(const FlashShape& s, const bf16* q, const bf16* k, const bf16* v, const bf16* out, const float* lse,
                const bf16* dout, bf16* dq, bf16* dk, bf16* dv, float* work, cudaStream_t st) {
    static bool configured = false;
    if (!configured) {
        CUDA_CHECK(cudaFuncSetAttribute(flash_bwd_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, BwdSmem<D>::BYTES));
        configured = true;
    }
    float* dq_acc = work;
    float* Drow = work + s.B * s.T * s.H * D;
    const int64_t rows = s.T * s.H;  // per sequence: one warp each, 8 warps per block
    flash_bwd_prep<<<dim3((unsigned)ceil_div(rows, 8), (unsigned)s.B), 256, 0, st>>>(out, dout, Drow, dq_acc, (int)s.T,
                                                                                    (int)s.H, D);
    LAB_LAUNCH_CHECK();
    const float scale = 1.0f / sqrtf((float)D);
    flash_bwd_kernel<D><<<dim3((unsigned)(s.T / BN), (unsigned)s.Hkv, (unsigned)s.B), THREADS, BwdSmem<D>::BYTES, st>>>(
        q, k, v, dout, lse, Drow, dq_acc, dk, dv, (int)s.T, (int)s.H, (int)s.Hkv, scale);
    LAB_LAUNCH_CHECK();
    flash_bwd_post<<<132 * 8, 256, 0, st>>>(dq_acc, dq, s.B * s.T * s.H * D, scale);
    LAB_LAUNCH_CHECK();
}

}  // namespace

int64_t flash_bwd_smem_bytes(int64_t D) { return D == 64 ? BwdSmem<64>::BYTES : D == 128 ? BwdSmem<128>::BYTES : 0; }

std::string flash_bwd_unsupported(int64_t D) {
    if (D != 64 && D != 128) return "head dim " + std::to_string(D) + ": the kernels are built for 64 and 128";
    int dev = 0, optin = 0;
    cudaDeviceProp p{};
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    if (flash_bwd_smem_bytes(D) <= optin) return "";
    CUDA_CHECK(cudaGetDeviceProperties(&p, dev));
    char why[640];  // the message below with a device name of up to 256 bytes
    std::snprintf(why, sizeof why,
                  "flash_bwd head dim %ld needs %ld bytes (%ld KB) of shared memory per block; this GPU (%s, sm_%d%d) "
                  "allows %d bytes (%d KB): head dim 128 runs on the H100 and H200 (227 KB) only",
                  (long)D, (long)flash_bwd_smem_bytes(D), (long)flash_bwd_smem_bytes(D) / 1024, p.name, p.major, p.minor,
                  optin, optin / 1024);
    return why;
}

int64_t flash_bwd_workspace_floats(const FlashShape& s) { return s.B * s.T * s.H * s.D + s.B * s.H * s.T; }

void flash_bwd(const uint16_t* q, const uint16_t* k, const uint16_t* v, const uint16_t* out, const float* lse,
               const uint16_t* dout, uint16_t* dq, uint16_t* dk, uint16_t* dv, float* work, const FlashShape& s,
               cudaStream_t stream) {
    CHECK(s.D == 64 || s.D == 128, "flash_bwd: head dim %ld: the kernels are built for 64 and 128", (long)s.D);
    CHECK(s.T >= BN && s.T % BN == 0 && s.T < (1 << 24), "flash_bwd: T %ld must be a multiple of %d", (long)s.T, BN);
    CHECK(s.B >= 1 && s.B <= 65535 && s.Hkv >= 1 && s.Hkv <= 65535 && s.H % s.Hkv == 0,
          "flash_bwd: B %ld, H %ld, Hkv %ld: H must be a multiple of Hkv", (long)s.B, (long)s.H, (long)s.Hkv);
    CHECK(device_capability() >= 80, "flash attention uses mma.sync bf16: sm_80+ (this GPU: sm_%d)", device_capability());
    const std::string no = flash_bwd_unsupported(s.D);
    CHECK(no.empty(), "%s", no.c_str());
    auto go = [&](auto d) {
        launch_bwd<decltype(d)::value>(s, (const bf16*)q, (const bf16*)k, (const bf16*)v, (const bf16*)out, lse,
                                       (const bf16*)dout, (bf16*)dq, (bf16*)dk, (bf16*)dv, work, stream);
    };
    if (s.D == 64)
        go(std::integral_constant<int, 64>{});
    else
        go(std::integral_constant<int, 128>{});
}

}  // namespace penta::lab
