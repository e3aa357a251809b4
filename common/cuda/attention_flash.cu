// attention_flash.cu — tiled attention with online softmax (flash attention), forward and backward.
//
// Playbook: "Flash attention". The naive version writes the (Tq, Tk) scores and probabilities to device
// memory and reads them back; here a block keeps its queries' running state in shared memory and streams
// K and V through in tiles, so nothing of size T^2 ever leaves the chip. Per query row it keeps m (max of
// the scores seen), l (sum of exp(s - m)) and acc (sum of exp(s - m) · v); when a tile raises the max to
// m', the old l and acc are rescaled by exp(m - m'). At the end out = acc / l and lse = m + log l, the
// statistic backward (and context parallelism's merge of partial results) needs.
//
// Kernels (thread per row — the simple mapping, and the f32 reference path; bf16 / f16 tensors go to the
// tensor-core kernels of attention_tc.cu):
// - forward: block = (64 queries, head, batch); thread t owns query t of the tile.
// - backward, as two kernels that recompute P instead of exchanging partial sums with atomics
//   (deterministic; FA2 instead accumulates dQ with atomicAdd from its key-tile blocks):
//     dkdv: block = (32 keys, kv head, batch); thread owns key j and sums over every query of every head
//           of its GQA group:  dV_j += p dO_i,  dK_j += scale · ds q_i
//     dq:   block = (64 queries, head, batch); thread owns query i:  dQ_i += scale · sum_j ds k_j
//   with p = exp(scale · q·k - lse_i), ds = p (dO_i·v_j - D_i), D = rowsum(dO ∘ O) (attention_common.cuh).
// Causal blocks skip whole tiles that their rows cannot see. Shared-memory arrays a thread reads at its
// own index are stored transposed (d-major) with one column of padding, so a warp's accesses hit 32
// different banks; tile arrays every thread reads at the same index are broadcasts.
// Tested by tests/00_common/test_cuda.cpp (`build/bin/tests_00 -tc='*cuda*attention*'` on a machine with a GPU).
#include "attention_common.cuh"

namespace penta::cuda {

namespace {

constexpr int kRows = 64;  // queries per block (forward, dq); threads per block of those kernels
constexpr int kTile = 32;  // keys per streamed tile; keys per block and queries per tile in dkdv

__device__ __forceinline__ int64_t imin(int64_t x, int64_t y) { return x < y ? x : y; }
__device__ __forceinline__ int64_t imax(int64_t x, int64_t y) { return x > y ? x : y; }

// row t of a (T, heads, hd) tensor's head `head` in batch b
__device__ __forceinline__ int64_t row_offset(int64_t b, int64_t t, int64_t head, int64_t T, int64_t heads,
                                              int64_t hd) {
    return ((b * T + t) * heads + head) * hd;
}

// rows [r0, r0 + nrows) of a token-major tensor into shared (hd, pitch), transposed; rows past T are zero
__device__ void load_rows_transposed(float* dst, int pitch, const float* src, int64_t b, int64_t r0, int nrows,
                                     int64_t T, int64_t head, int64_t heads, int64_t hd) {
    for (int64_t e = threadIdx.x; e < nrows * hd; e += blockDim.x) {
        const int r = (int)(e / hd), d = (int)(e % hd);
        dst[d * pitch + r] = r0 + r < T ? src[row_offset(b, r0 + r, head, T, heads, hd) + d] : 0.0f;
    }
}

// the same rows into shared (nrows, hd), row-major (read as broadcasts)
__device__ void load_rows(float* dst, const float* src, int64_t b, int64_t r0, int nrows, int64_t T, int64_t head,
                          int64_t heads, int64_t hd) {
    for (int64_t e = threadIdx.x; e < nrows * hd; e += blockDim.x) {
        const int r = (int)(e / hd);
        dst[e] = r0 + r < T ? src[row_offset(b, r0 + r, head, T, heads, hd) + e % hd] : 0.0f;
    }
}

// dst rows (+)= shared (hd, pitch) transposed; coalesced in dst. accumulate: += (gradients), else =
__device__ void store_rows_transposed(float* dst, const float* src, int pitch, int64_t b, int64_t r0, int nrows,
                                      int64_t T, int64_t head, int64_t heads, int64_t hd, bool accumulate) {
    for (int64_t e = threadIdx.x; e < nrows * hd; e += blockDim.x) {
        const int r = (int)(e / hd), d = (int)(e % hd);
        if (r0 + r >= T) continue;
        float& o = dst[row_offset(b, r0 + r, head, T, heads, hd) + d];
        o = accumulate ? o + src[d * pitch + r] : src[d * pitch + r];
    }
}

// Keys [0, end) can be visible to some query of [i0, i0 + kRows): causal rows see up to their position.
__device__ int64_t visible_key_end(const AttnDims& a, int64_t i0) {
    if (!a.causal) return a.Tk;
    const int64_t i_last = imin(i0 + kRows, a.Tq) - 1;
    return imax(0, imin(a.Tk, a.q_offset + i_last - a.k_offset + 1));
}

__global__ void flash_forward_kernel(const float* q, const float* k, const float* v, float* out, float* lse,
                                     AttnDims a) {
    extern __shared__ float smem[];
    const int hd = (int)a.hd, t = threadIdx.x, pitch = kRows + 1;
    float* sQ = smem;               // (hd, kRows+1): this block's queries, transposed
    float* sO = sQ + hd * pitch;    // (hd, kRows+1): acc, then the output
    float* sK = sO + hd * pitch;    // (kTile, hd)
    float* sV = sK + kTile * hd;    // (kTile, hd)
    const int64_t b = blockIdx.z, h = blockIdx.y, g = h / a.group, i0 = (int64_t)blockIdx.x * kRows, i = i0 + t;
    const bool active = i < a.Tq;
    load_rows_transposed(sQ, pitch, q, b, i0, kRows, a.Tq, h, a.nh, a.hd);
    for (int d = 0; d < hd; d++) sO[d * pitch + t] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    const int64_t j_end = visible_key_end(a, i0);
    for (int64_t j0 = 0; j0 < j_end; j0 += kTile) {
        __syncthreads();  // the previous tile is consumed (first pass: sQ is loaded)
        load_rows(sK, k, b, j0, kTile, a.Tk, g, a.nkv, a.hd);
        load_rows(sV, v, b, j0, kTile, a.Tk, g, a.nkv, a.hd);
        __syncthreads();
        if (!active) continue;
        float s[kTile];  // this tile's scores of query i; then exp(s - m_new)
#pragma unroll
        for (int jj = 0; jj < kTile; jj++) s[jj] = 0.0f;
        for (int d = 0; d < hd; d++) {
            const float qd = sQ[d * pitch + t];
#pragma unroll
            for (int jj = 0; jj < kTile; jj++) s[jj] += qd * sK[jj * hd + d];
        }
        float m_tile = -INFINITY;
#pragma unroll
        for (int jj = 0; jj < kTile; jj++) {
            const int64_t j = j0 + jj;
            s[jj] = j < a.Tk && key_visible(a, i, j) ? s[jj] * a.scale : -INFINITY;
            m_tile = fmaxf(m_tile, s[jj]);
        }
        const float m_new = fmaxf(m, m_tile);
        if (m_new == -INFINITY) continue;  // no visible key so far: nothing to add
        const float rescale = expf(m - m_new);  // 0 on the first visible tile (m = -inf)
        float p_sum = 0.0f;
#pragma unroll
        for (int jj = 0; jj < kTile; jj++) {
            s[jj] = expf(s[jj] - m_new);  // masked: exp(-inf) = 0
            p_sum += s[jj];
        }
        l = l * rescale + p_sum;
        m = m_new;
        for (int d = 0; d < hd; d++) {
            float o = sO[d * pitch + t] * rescale;
#pragma unroll
            for (int jj = 0; jj < kTile; jj++) o += s[jj] * sV[jj * hd + d];
            sO[d * pitch + t] = o;
        }
    }
    // a query that saw no key: out = 0, lse = -inf
    const float inv_l = l > 0.0f ? 1.0f / l : 0.0f;
    for (int d = 0; d < hd; d++) sO[d * pitch + t] *= inv_l;
    if (active) lse[(b * a.nh + h) * a.Tq + i] = l > 0.0f ? m + logf(l) : -INFINITY;
    __syncthreads();
    store_rows_transposed(out, sO, pitch, b, i0, kRows, a.Tq, h, a.nh, a.hd, false);
}

__global__ void flash_backward_dkdv_kernel(const float* q, const float* k, const float* v, const float* dout,
                                           const float* lse, const float* D, float* dk, float* dv, AttnDims a) {
    extern __shared__ float smem[];
    const int hd = (int)a.hd, t = threadIdx.x, pitch = kTile + 1;
    float* sK = smem;                 // (hd, kTile+1): this block's keys, transposed
    float* sV = sK + hd * pitch;      // (hd, kTile+1)
    float* sdK = sV + hd * pitch;     // (hd, kTile+1)
    float* sdV = sdK + hd * pitch;    // (hd, kTile+1)
    float* sQ = sdV + hd * pitch;     // (kTile, hd): a tile of queries
    float* sdO = sQ + kTile * hd;     // (kTile, hd)
    float* sLse = sdO + kTile * hd;   // (kTile)
    float* sD = sLse + kTile;         // (kTile)
    const int64_t b = blockIdx.z, g = blockIdx.y, j0 = (int64_t)blockIdx.x * kTile, j = j0 + t;
    const bool active = j < a.Tk;
    load_rows_transposed(sK, pitch, k, b, j0, kTile, a.Tk, g, a.nkv, a.hd);
    load_rows_transposed(sV, pitch, v, b, j0, kTile, a.Tk, g, a.nkv, a.hd);
    for (int d = 0; d < hd; d++) sdK[d * pitch + t] = sdV[d * pitch + t] = 0.0f;
    // causal: queries before the first visible one (for key j0) contribute nothing to this block
    const int64_t i_start = a.causal ? imax(0, a.k_offset + j0 - a.q_offset) : 0;
    for (int64_t h = g * a.group; h < (g + 1) * a.group; h++) {
        for (int64_t i0 = i_start; i0 < a.Tq; i0 += kTile) {
            __syncthreads();  // the previous query tile is consumed (first pass: keys are loaded)
            load_rows(sQ, q, b, i0, kTile, a.Tq, h, a.nh, a.hd);
            load_rows(sdO, dout, b, i0, kTile, a.Tq, h, a.nh, a.hd);
            if (i0 + t < a.Tq) {  // one thread per query of the tile
                sLse[t] = lse[(b * a.nh + h) * a.Tq + i0 + t];
                sD[t] = D[(b * a.nh + h) * a.Tq + i0 + t];
            }
            __syncthreads();
            if (!active) continue;
            const int rows = (int)imin(kTile, a.Tq - i0);
            for (int ii = 0; ii < rows; ii++) {
                float s = 0.0f, dp = 0.0f;
                for (int d = 0; d < hd; d++) {
                    s += sQ[ii * hd + d] * sK[d * pitch + t];
                    dp += sdO[ii * hd + d] * sV[d * pitch + t];
                }
                const float p = attn_prob(s * a.scale, sLse[ii], key_visible(a, i0 + ii, j));
                if (p == 0.0f) continue;
                const float ds = p * (dp - sD[ii]) * a.scale;
                for (int d = 0; d < hd; d++) {
                    sdV[d * pitch + t] += p * sdO[ii * hd + d];
                    sdK[d * pitch + t] += ds * sQ[ii * hd + d];
                }
            }
        }
    }
    __syncthreads();
    store_rows_transposed(dk, sdK, pitch, b, j0, kTile, a.Tk, g, a.nkv, a.hd, true);
    store_rows_transposed(dv, sdV, pitch, b, j0, kTile, a.Tk, g, a.nkv, a.hd, true);
}

__global__ void flash_backward_dq_kernel(const float* q, const float* k, const float* v, const float* dout,
                                         const float* lse, const float* D, float* dq, AttnDims a) {
    extern __shared__ float smem[];
    const int hd = (int)a.hd, t = threadIdx.x, pitch = kRows + 1;
    float* sQ = smem;               // (hd, kRows+1): this block's queries, transposed
    float* sdO = sQ + hd * pitch;   // (hd, kRows+1)
    float* sdQ = sdO + hd * pitch;  // (hd, kRows+1)
    float* sK = sdQ + hd * pitch;   // (kTile, hd)
    float* sV = sK + kTile * hd;    // (kTile, hd)
    const int64_t b = blockIdx.z, h = blockIdx.y, g = h / a.group, i0 = (int64_t)blockIdx.x * kRows, i = i0 + t;
    const bool active = i < a.Tq;
    load_rows_transposed(sQ, pitch, q, b, i0, kRows, a.Tq, h, a.nh, a.hd);
    load_rows_transposed(sdO, pitch, dout, b, i0, kRows, a.Tq, h, a.nh, a.hd);
    for (int d = 0; d < hd; d++) sdQ[d * pitch + t] = 0.0f;
    const float lse_i = active ? lse[(b * a.nh + h) * a.Tq + i] : -INFINITY;
    const float D_i = active ? D[(b * a.nh + h) * a.Tq + i] : 0.0f;
    const int64_t j_end = visible_key_end(a, i0);
    for (int64_t j0 = 0; j0 < j_end; j0 += kTile) {
        __syncthreads();
        load_rows(sK, k, b, j0, kTile, a.Tk, g, a.nkv, a.hd);
        load_rows(sV, v, b, j0, kTile, a.Tk, g, a.nkv, a.hd);
        __syncthreads();
        if (!active || lse_i == -INFINITY) continue;
        float s[kTile], dp[kTile];
#pragma unroll
        for (int jj = 0; jj < kTile; jj++) s[jj] = dp[jj] = 0.0f;
        for (int d = 0; d < hd; d++) {
            const float qd = sQ[d * pitch + t], od = sdO[d * pitch + t];
#pragma unroll
            for (int jj = 0; jj < kTile; jj++) {
                s[jj] += qd * sK[jj * hd + d];
                dp[jj] += od * sV[jj * hd + d];
            }
        }
#pragma unroll
        for (int jj = 0; jj < kTile; jj++) {  // s becomes scale · ds
            const int64_t j = j0 + jj;
            const float p = attn_prob(s[jj] * a.scale, lse_i, j < a.Tk && key_visible(a, i, j));
            s[jj] = p * (dp[jj] - D_i) * a.scale;
        }
        for (int d = 0; d < hd; d++) {
            float acc = sdQ[d * pitch + t];
#pragma unroll
            for (int jj = 0; jj < kTile; jj++) acc += s[jj] * sK[jj * hd + d];
            sdQ[d * pitch + t] = acc;
        }
    }
    __syncthreads();
    store_rows_transposed(dq, sdQ, pitch, b, i0, kRows, a.Tq, h, a.nh, a.hd, true);
}

// Dynamic shared memory above 48 KB must be requested per kernel; the device caps it (A100 ~163 KB,
// H100 ~227 KB), which bounds the head dim these thread-per-row kernels accept. Asked for only when a call
// needs more than the kernel was last allowed (the device queries are not free, and a step calls often).
template <auto kernel>
void allow_shared_memory(size_t bytes, const AttnDims& a) {
    static size_t allowed = 48 * 1024;
    if (bytes <= allowed) return;
    int dev = 0, limit = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    CHECK(bytes <= (size_t)limit, "attention_tiled: head dim %ld needs %zu bytes of shared memory per block, the GPU "
          "allows %d", (long)a.hd, bytes, limit);
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    allowed = bytes;
}

// one thread per (b, head, t) row: context parallelism's merge of a partial result (ops.hpp)
__global__ void merge_kernel(float* out, float* lse, const float* out_part, const float* lse_part, int64_t B,
                             int64_t T, int64_t nh, int64_t hd) {
    const int64_t li = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;  // (b, h, t) in lse's order
    if (li >= B * nh * T) return;
    const int64_t t = li % T, h = (li / T) % nh, b = li / (T * nh);
    const float l1 = lse[li], l2 = lse_part[li];
    if (l2 == -INFINITY) return;
    const float m = fmaxf(l1, l2), lnew = m + logf(expf(l1 - m) + expf(l2 - m));
    const float w1 = l1 == -INFINITY ? 0.0f : expf(l1 - lnew), w2 = expf(l2 - lnew);
    float* row = out + ((b * T + t) * nh + h) * hd;
    const float* prow = out_part + ((b * T + t) * nh + h) * hd;
    for (int64_t e = 0; e < hd; e++) row[e] = (w1 == 0.0f ? 0.0f : w1 * row[e]) + w2 * prow[e];
    lse[li] = lnew;
}

}  // namespace

void attention_forward_tiled(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out, Tensor& lse,
                             AttnSpan span) {
    if (q.dtype != DType::f32) return attention_forward_tc(q, k, v, out, lse, span);  // bf16 / f16: tensor cores
    const AttnDims a = attn_dims(q, k, span);
    if (a.B * a.nh * a.Tq == 0) return;
    const size_t smem = sizeof(float) * (size_t)a.hd * (2 * (kRows + 1) + 2 * kTile);
    allow_shared_memory<flash_forward_kernel>(smem, a);
    const dim3 grid((unsigned)((a.Tq + kRows - 1) / kRows), (unsigned)a.nh, (unsigned)a.B);
    flash_forward_kernel<<<grid, kRows, smem>>>(q.ptr<float>(), k.ptr<float>(), v.ptr<float>(), out.ptr<float>(),
                                                lse.ptr<float>(), a);
    KERNEL_CHECK();
}

void attention_backward_tiled(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& out, const Tensor& lse, Tensor& dq, Tensor& dk, Tensor& dv,
                              AttnSpan span) {
    if (q.dtype != DType::f32) return attention_backward_tc(dout, q, k, v, out, lse, dq, dk, dv, span);
    const AttnDims a = attn_dims(q, k, span);
    if (a.B * a.nh * a.Tq == 0 || a.Tk == 0) return;
    Tensor ws = workspace(a.B * a.nh * a.Tq * sizeof(float));
    float* D = ws.ptr<float>();  // (B, nh, Tq)
    attention_delta(a, dout.ptr<float>(), out.ptr<float>(), D);

    const size_t smem_kv = sizeof(float) * ((size_t)a.hd * (4 * (kTile + 1) + 2 * kTile) + 2 * kTile);
    allow_shared_memory<flash_backward_dkdv_kernel>(smem_kv, a);
    const dim3 grid_kv((unsigned)((a.Tk + kTile - 1) / kTile), (unsigned)a.nkv, (unsigned)a.B);
    flash_backward_dkdv_kernel<<<grid_kv, kTile, smem_kv>>>(q.ptr<float>(), k.ptr<float>(), v.ptr<float>(),
                                                            dout.ptr<float>(), lse.ptr<float>(), D, dk.ptr<float>(),
                                                            dv.ptr<float>(), a);
    KERNEL_CHECK();

    const size_t smem_q = sizeof(float) * (size_t)a.hd * (3 * (kRows + 1) + 2 * kTile);
    allow_shared_memory<flash_backward_dq_kernel>(smem_q, a);
    const dim3 grid_q((unsigned)((a.Tq + kRows - 1) / kRows), (unsigned)a.nh, (unsigned)a.B);
    flash_backward_dq_kernel<<<grid_q, kRows, smem_q>>>(q.ptr<float>(), k.ptr<float>(), v.ptr<float>(),
                                                        dout.ptr<float>(), lse.ptr<float>(), D, dq.ptr<float>(), a);
    KERNEL_CHECK();
}

void attention_merge(Tensor& out, Tensor& lse, const Tensor& out_part, const Tensor& lse_part) {
    const int64_t B = out.size(0), T = out.size(1), nh = out.size(2), hd = out.size(3), rows = B * nh * T;
    if (rows == 0) return;
    merge_kernel<<<(unsigned)((rows + 255) / 256), 256>>>(out.ptr<float>(), lse.ptr<float>(), out_part.ptr<float>(),
                                                          lse_part.ptr<float>(), B, T, nh, hd);
    KERNEL_CHECK();
}

}  // namespace penta::cuda
