// attention_tc.cu — flash attention on tensor cores for bf16 and fp16 (q, k, v, out and their gradients in
// that dtype; the softmax statistics, lse and every sum in f32), forward and backward.
//
// Playbook: "Flash attention" and "Mixed precision training": the same online-softmax algorithm as the
// f32 kernels of attention_flash.cu (the reference path), with its two matrix products per tile on the
// tensor cores through WMMA (16 x 16 x 16 bf16/fp16 products accumulated in f32). WMMA hides how an
// accumulator's elements sit in the threads' registers, so whatever needs rows — the row max, the
// exp, the rescale of the running output — reads tiles that the warp has stored to shared memory:
//   forward   block = 64 queries of one head (4 warps x 16 rows); per key tile: S = Q K^T (tensor cores)
//             -> shared; two lanes per row take the tile's max, m' = max(m, tile max), P = exp(S - m')
//             (bf16, shared) and l = l·exp(m - m') + rowsum P; the running O (f32, shared) is scaled
//             by exp(m - m') and O += P V (tensor cores). out = O / l, lse = m + log l.
//   backward  two kernels that recompute P instead of summing partial gradients with atomics
//             (deterministic, as the f32 path): dkdv, block = 64 keys of one kv head, loops over the
//             query tiles of every head of its GQA group: S^T = K Q^T, dP^T = V dO^T, P^T = exp(S^T - lse),
//             dS^T = P^T (dP^T - D), dV += P^T dO, dK += scale · dS^T Q (the accumulators stay in
//             registers); dq, block = 64 queries: S = Q K^T, dP = dO V^T, dQ += scale · dS K. D = rowsum(dO ∘ O).
// Gradients are ACCUMULATED into dq, dk, dv (ops.hpp), in their dtype: each element is read, the f32 sum
// added, rounded once. Head dims 16, 32, 64, 128 (a template each); tiles of 32 keys (or queries) instead
// of 64 at 128 to keep shared memory near 80 KB. Tensors must be 16-byte aligned (16-byte loads).
// Shared-memory rows are padded by 16 bytes, so the warps' 16-byte accesses of one column hit different banks.
// Tested against the f32 CPU reference with bf16/fp16 tolerances by tests/00_common/test_cuda_attention_tc.cpp
// (`build/bin/tests_00 -tc='*cuda*tensor-core*'` on a GPU); benchmarked by `build/bin/bench_ops --device cuda`.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

#include <type_traits>

#include "attention_common.cuh"

namespace penta::cuda {

namespace {

using namespace nvcuda;

constexpr int kWarpsTC = 4, kThreadsTC = 32 * kWarpsTC;
// Forward and dq: two blocks per SM is what the shared memory allows at the larger head dims anyway;
// saying so lets ptxas give a thread up to 255 registers (left to itself it capped the fp16 kernels near
// 64 and spilled). dkdv keeps ptxas's own choice: with the bound it spilled at head dim 128.
constexpr int kMinBlocksTC = 2;
constexpr int kBlockRows = 16 * kWarpsTC;  // queries (forward, dq) or keys (dkdv) a block owns
constexpr float kLog2e = 1.4426950408889634f, kLn2 = 0.6931471805599453f;

template <class T>
struct Num;
template <>
struct Num<__nv_bfloat16> {
    static __device__ __forceinline__ float to(__nv_bfloat16 x) { return __bfloat162float(x); }
    static __device__ __forceinline__ __nv_bfloat16 from(float x) { return __float2bfloat16_rn(x); }
    static __device__ __forceinline__ float of_bits(uint32_t b) { return to(__ushort_as_bfloat16((unsigned short)b)); }
    static __device__ __forceinline__ uint32_t bits(float x) { return __bfloat16_as_ushort(from(x)); }
};
template <>
struct Num<__half> {
    static __device__ __forceinline__ float to(__half x) { return __half2float(x); }
    static __device__ __forceinline__ __half from(float x) { return __float2half_rn(x); }
    static __device__ __forceinline__ float of_bits(uint32_t b) { return to(__ushort_as_half((unsigned short)b)); }
    static __device__ __forceinline__ uint32_t bits(float x) { return __half_as_ushort(from(x)); }
};

template <class T>
using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major>;
template <class T>
using FragBRow = wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major>;
template <class T>
using FragBCol = wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major>;
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

// the streamed tile: 64 rows, or 32 at head dim 128
template <int D>
__host__ __device__ constexpr int tile_rows() {
    return D <= 64 ? 64 : 32;
}

__host__ __device__ constexpr size_t align128(size_t n) { return (n + 127) / 128 * 128; }

// Leading dimensions (elements) of the shared tiles: 16-bit (rows, D) tiles, f32 (rows, cols) score
// tiles, 16-bit (rows, cols) probability tiles, f32 (rows, D) accumulators. WMMA wants multiples of 8
// (16-bit) and 4 (f32); the +8 / +4 are the 16-byte padding.
template <int D>
__host__ __device__ constexpr int ld_h() { return D + 8; }
__host__ __device__ constexpr int ld_s(int cols) { return cols + 4; }
__host__ __device__ constexpr int ld_p(int cols) { return cols + 8; }
template <int D>
__host__ __device__ constexpr int ld_o() { return D + 4; }

// Shared memory of the forward and dq kernels: the block's 64 query rows (Q, and dO for dq), a tile of K
// and V, the block's score tiles S (and dP), its 16-bit P (or dS), the f32 output accumulator O, per-row
// scalars. `out` (forward: O; dq: the f32 staging of dQ at the end) may overlap the key tiles in dq.
template <class T, int D, bool kDq>
struct QuerySmem {
    static constexpr int kK = tile_rows<D>();
    static constexpr size_t q = 0;
    static constexpr size_t dout = align128(q + (size_t)kBlockRows * ld_h<D>() * sizeof(T));
    static constexpr size_t k = align128(dout + (kDq ? (size_t)kBlockRows * ld_h<D>() * sizeof(T) : 0));
    static constexpr size_t v = align128(k + (size_t)kK * ld_h<D>() * sizeof(T));
    static constexpr size_t s = align128(v + (size_t)kK * ld_h<D>() * sizeof(T));
    static constexpr size_t dp = align128(s + (size_t)kBlockRows * ld_s(kK) * sizeof(float));
    static constexpr size_t p = align128(dp + (kDq ? (size_t)kBlockRows * ld_s(kK) * sizeof(float) : 0));
    static constexpr size_t rows = align128(p + (size_t)kBlockRows * ld_p(kK) * sizeof(T));  // 2 x 64 f32
    static constexpr size_t o_forward = align128(rows + 2 * kBlockRows * sizeof(float));
    // dq stages its result over K, V, S and dP, which are free by then; the forward keeps O apart
    static constexpr size_t o = kDq ? k : o_forward;
    static constexpr size_t end_o = o + (size_t)kBlockRows * ld_o<D>() * sizeof(float);
    static constexpr size_t bytes = align128(end_o > o_forward ? end_o : o_forward);
};

// Shared memory of the dkdv kernel: the block's 64 keys (K, V), a tile of queries (Q, dO), the
// transposed score tiles S^T and dP^T (f32), P^T and dS^T (16-bit), the tile's lse and D. At the end dK
// and dV are staged (f32) over the query tiles, free by then.
template <class T, int D>
struct KeySmem {
    static constexpr int kQ = tile_rows<D>();
    static constexpr size_t k = 0;
    static constexpr size_t v = align128(k + (size_t)kBlockRows * ld_h<D>() * sizeof(T));
    static constexpr size_t q = align128(v + (size_t)kBlockRows * ld_h<D>() * sizeof(T));
    static constexpr size_t dout = align128(q + (size_t)kQ * ld_h<D>() * sizeof(T));
    static constexpr size_t s = align128(dout + (size_t)kQ * ld_h<D>() * sizeof(T));
    static constexpr size_t dp = align128(s + (size_t)kBlockRows * ld_s(kQ) * sizeof(float));
    static constexpr size_t p = align128(dp + (size_t)kBlockRows * ld_s(kQ) * sizeof(float));
    static constexpr size_t ds = align128(p + (size_t)kBlockRows * ld_p(kQ) * sizeof(T));
    static constexpr size_t rows = align128(ds + (size_t)kBlockRows * ld_p(kQ) * sizeof(T));  // 2 x kQ f32
    static constexpr size_t end_rows = rows + 2 * kQ * sizeof(float);
    static constexpr size_t o = q;
    static constexpr size_t end_o = o + (size_t)kBlockRows * ld_o<D>() * sizeof(float);
    static constexpr size_t bytes = align128(end_o > end_rows ? end_o : end_rows);
};

// element offset of row t of head `head` in a (B, T, heads, D) tensor
template <int D>
__device__ __forceinline__ int64_t row_at(int64_t b, int64_t t, int64_t T, int64_t head, int64_t heads) {
    return ((b * T + t) * heads + head) * D;
}

// rows [r0, r0 + nrows) of one head of a (B, T, heads, D) tensor into shared (nrows, ld), 16 bytes per
// access; rows past T are zeros (their scores are masked, and 0 · anything stays finite)
template <class T, int D>
__device__ void load_tile(T* dst, const T* src, int64_t b, int64_t r0, int nrows, int64_t Tlen, int64_t head,
                          int64_t heads) {
    constexpr int kChunks = D / 8;  // 16-byte chunks per row
    for (int c = threadIdx.x; c < nrows * kChunks; c += blockDim.x) {
        const int r = c / kChunks, d0 = (c % kChunks) * 8;
        uint4 val = make_uint4(0, 0, 0, 0);
        if (r0 + r < Tlen) val = *(const uint4*)(src + row_at<D>(b, r0 + r, Tlen, head, heads) + d0);
        *(uint4*)(dst + r * ld_h<D>() + d0) = val;
    }
}

// one warp: 16 rows of shared f32 (16, ld) times row_scale (or 1) into rows [r0, r0 + 16) of one head of
// a (B, T, heads, D) tensor, overwritten or accumulated (read, add in f32, round once); rows past T skipped
template <class T, int D>
__device__ void store_rows(T* dst, const float* src, int ld, const float* row_scale, int64_t b, int64_t r0,
                           int64_t Tlen, int64_t head, int64_t heads, bool accumulate) {
    constexpr int kChunks = D / 8;
    const int lane = threadIdx.x & 31;
    for (int c = lane; c < 16 * kChunks; c += 32) {
        const int r = c / kChunks, d0 = (c % kChunks) * 8;
        if (r0 + r >= Tlen) continue;
        T* g = dst + row_at<D>(b, r0 + r, Tlen, head, heads) + d0;
        const uint4 old = accumulate ? *(const uint4*)g : make_uint4(0, 0, 0, 0);
        const float scale = row_scale ? row_scale[r] : 1.0f;
        const float* x = src + r * ld + d0;
        // two elements per 32-bit word, element 2w in the low half (little-endian), kept in registers
        auto word = [&](uint32_t was, int e) {
            float lo = x[e] * scale, hi = x[e + 1] * scale;
            if (accumulate) {
                lo += Num<T>::of_bits(was & 0xffffu);
                hi += Num<T>::of_bits(was >> 16);
            }
            return Num<T>::bits(lo) | (Num<T>::bits(hi) << 16);
        };
        *(uint4*)g = make_uint4(word(old.x, 0), word(old.y, 2), word(old.z, 4), word(old.w, 6));
    }
}

// C (16 x 16 tile n of the warp's 16 rows) = A_rows (16 x D, row-major at a, ld) times B^T where B is
// stored (16 rows, D) row-major at b: the "scores" product, Q K^T or V dO^T; stored to c (f32, ldc)
template <class T, int D>
__device__ __forceinline__ void rows_times_rows_t(const T* a, const T* b, float* c, int ldc) {
    FragC acc;
    wmma::fill_fragment(acc, 0.0f);
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
        FragA<T> fa;
        FragBCol<T> fb;  // B^T (D x 16) in column-major order is B's rows
        wmma::load_matrix_sync(fa, a + kk * 16, ld_h<D>());
        wmma::load_matrix_sync(fb, b + kk * 16, ld_h<D>());
        wmma::mma_sync(acc, fa, fb, acc);
    }
    wmma::store_matrix_sync(c, acc, ldc, wmma::mem_row_major);
}

// acc (16 x 16 tile n of a (16, D) result) += P (16 x cols, row-major at p, ldp) times V's columns
// [16n, 16n + 16) (cols x D row-major at v): the "values" product, P V, dS K, P^T dO, dS^T Q
template <class T, int D, int kCols>
__device__ __forceinline__ void probs_times_rows(FragC& acc, const T* p, int ldp, const T* v, int n) {
#pragma unroll
    for (int kk = 0; kk < kCols / 16; kk++) {
        FragA<T> fa;
        FragBRow<T> fb;
        wmma::load_matrix_sync(fa, p + kk * 16, ldp);
        wmma::load_matrix_sync(fb, v + (size_t)kk * 16 * ld_h<D>() + n * 16, ld_h<D>());
        wmma::mma_sync(acc, fa, fb, acc);
    }
}

__device__ __forceinline__ int64_t lmin(int64_t x, int64_t y) { return x < y ? x : y; }
__device__ __forceinline__ int64_t lmax(int64_t x, int64_t y) { return x > y ? x : y; }

// Keys [0, end) can be visible to some query of [i0, i0 + kBlockRows): a causal row sees up to its position.
__device__ __forceinline__ int64_t visible_keys(const AttnDims& a, int64_t i0) {
    if (!a.causal) return a.Tk;
    const int64_t i_last = lmin(i0 + kBlockRows, a.Tq) - 1;
    return lmax(0, lmin(a.Tk, a.q_offset + i_last - a.k_offset + 1));
}

template <class T, int D>
__global__ void __launch_bounds__(kThreadsTC, kMinBlocksTC) tc_forward_kernel(const T* __restrict__ q, const T* __restrict__ k,
                                                                 const T* __restrict__ v, T* __restrict__ out,
                                                                 float* __restrict__ lse, AttnDims a) {
    using L = QuerySmem<T, D, false>;
    constexpr int kK = L::kK;
    extern __shared__ __align__(128) unsigned char smem[];
    T* sQ = (T*)(smem + L::q);
    T* sK = (T*)(smem + L::k);
    T* sV = (T*)(smem + L::v);
    float* sS = (float*)(smem + L::s);      // (64, kK) scores, then scaled to log2 units
    T* sP = (T*)(smem + L::p);              // (64, kK)
    float* sRow = (float*)(smem + L::rows);  // (64) per-row factor: the rescale, then 1 / l
    float* sO = (float*)(smem + L::o);      // (64, D) running output
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t b = blockIdx.z, h = blockIdx.y, g = h / a.group, i0 = (int64_t)blockIdx.x * kBlockRows;
    load_tile<T, D>(sQ, q, b, i0, kBlockRows, a.Tq, h, a.nh);
    for (int e = threadIdx.x; e < kBlockRows * ld_o<D>(); e += blockDim.x) sO[e] = 0.0f;
    __syncthreads();
    FragA<T> qf[D / 16];  // this warp's 16 query rows, kept in registers for every key tile
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) wmma::load_matrix_sync(qf[kk], sQ + warp * 16 * ld_h<D>() + kk * 16, ld_h<D>());
    // two lanes per row: lane 2r and 2r + 1 hold row r's statistics, each its half of a tile's columns
    const int r = lane >> 1, c0 = (lane & 1) * (kK / 2), row = warp * 16 + r;
    const int64_t i = i0 + row;
    const float scale_log2 = a.scale * kLog2e;
    float m = -INFINITY, l = 0.0f;  // running max (log2 units) and sum of 2^(x - m)
    const int64_t j_end = visible_keys(a, i0);
    for (int64_t j0 = 0; j0 < j_end; j0 += kK) {
        __syncthreads();  // every warp is done with the previous tile
        load_tile<T, D>(sK, k, b, j0, kK, a.Tk, g, a.nkv);
        load_tile<T, D>(sV, v, b, j0, kK, a.Tk, g, a.nkv);
        __syncthreads();
        float* sSw = sS + warp * 16 * ld_s(kK);
#pragma unroll
        for (int n = 0; n < kK / 16; n++) {  // S_w (16, kK) = Q_w K^T
            FragC acc;
            wmma::fill_fragment(acc, 0.0f);
#pragma unroll
            for (int kk = 0; kk < D / 16; kk++) {
                FragBCol<T> kf;
                wmma::load_matrix_sync(kf, sK + n * 16 * ld_h<D>() + kk * 16, ld_h<D>());
                wmma::mma_sync(acc, qf[kk], kf, acc);
            }
            wmma::store_matrix_sync(sSw + n * 16, acc, ld_s(kK), wmma::mem_row_major);
        }
        __syncwarp();
        float* s_row = sS + row * ld_s(kK);
        T* p_row = sP + row * ld_p(kK);
        float m_tile = -INFINITY;
        for (int c = c0; c < c0 + kK / 2; c++) {
            const int64_t j = j0 + c;
            const float x = i < a.Tq && j < a.Tk && key_visible(a, i, j) ? s_row[c] * scale_log2 : -INFINITY;
            s_row[c] = x;
            m_tile = fmaxf(m_tile, x);
        }
        m_tile = fmaxf(m_tile, __shfl_xor_sync(kFullMask, m_tile, 1));
        const float m_new = fmaxf(m, m_tile);
        float rescale = 1.0f, p_sum = 0.0f;
        if (m_new == -INFINITY) {  // nothing visible so far: P = 0, O stays 0
            for (int c = c0; c < c0 + kK / 2; c++) p_row[c] = Num<T>::from(0.0f);
        } else {
            rescale = exp2f(m - m_new);  // 0 on the first visible tile (m = -inf)
            for (int c = c0; c < c0 + kK / 2; c++) {
                const float p = exp2f(s_row[c] - m_new);  // masked: 2^-inf = 0
                p_row[c] = Num<T>::from(p);
                p_sum += p;
            }
        }
        p_sum += __shfl_xor_sync(kFullMask, p_sum, 1);
        l = l * rescale + p_sum;
        m = m_new;
        if ((lane & 1) == 0) sRow[row] = rescale;
        __syncwarp();
        float* sOw = sO + warp * 16 * ld_o<D>();
        for (int e = lane; e < 16 * D; e += 32) sOw[(e / D) * ld_o<D>() + e % D] *= sRow[warp * 16 + e / D];
        __syncwarp();
        const T* sPw = sP + warp * 16 * ld_p(kK);
#pragma unroll
        for (int n = 0; n < D / 16; n++) {  // O_w (16, D) += P_w V
            FragC acc;
            wmma::load_matrix_sync(acc, sOw + n * 16, ld_o<D>(), wmma::mem_row_major);
            probs_times_rows<T, D, kK>(acc, sPw, ld_p(kK), sV, n);
            wmma::store_matrix_sync(sOw + n * 16, acc, ld_o<D>(), wmma::mem_row_major);
        }
        __syncwarp();
    }
    // a query that saw no key: out = 0, lse = -inf
    if ((lane & 1) == 0) {
        sRow[row] = l > 0.0f ? 1.0f / l : 0.0f;
        if (i < a.Tq) lse[(b * a.nh + h) * a.Tq + i] = l > 0.0f ? m * kLn2 + logf(l) : -INFINITY;
    }
    __syncwarp();
    store_rows<T, D>(out, sO + warp * 16 * ld_o<D>(), ld_o<D>(), sRow + warp * 16, b, i0 + warp * 16, a.Tq, h, a.nh,
                     false);
}

// D (B, nh, Tq) = rowsum(dO ∘ O) in f32: one warp per (b, i, h) row of D elements
template <class T>
__global__ void tc_delta_kernel(const T* dout, const T* out, float* Dl, AttnDims a, int64_t rows) {
    const int64_t w = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / 32;
    const int lane = threadIdx.x & 31;
    if (w >= rows) return;  // whole warps leave together
    float acc = 0;
    for (int64_t d = lane; d < a.hd; d += 32) acc += Num<T>::to(dout[w * a.hd + d]) * Num<T>::to(out[w * a.hd + d]);
    acc = warp_reduce(acc, SumOp{});
    if (lane == 0) {
        const int64_t h = w % a.nh, i = (w / a.nh) % a.Tq, b = w / (a.nh * a.Tq);
        Dl[(b * a.nh + h) * a.Tq + i] = acc;
    }
}

template <class T, int D>
__global__ void __launch_bounds__(kThreadsTC) tc_dkdv_kernel(const T* __restrict__ q, const T* __restrict__ k,
                                                              const T* __restrict__ v, const T* __restrict__ dout,
                                                              const float* __restrict__ lse,
                                                              const float* __restrict__ Dl, T* __restrict__ dk,
                                                              T* __restrict__ dv, AttnDims a) {
    using L = KeySmem<T, D>;
    constexpr int kQ = L::kQ;
    extern __shared__ __align__(128) unsigned char smem[];
    T* sK = (T*)(smem + L::k);
    T* sV = (T*)(smem + L::v);
    T* sQ = (T*)(smem + L::q);
    T* sdO = (T*)(smem + L::dout);
    float* sS = (float*)(smem + L::s);    // (64 keys, kQ queries): S^T
    float* sdP = (float*)(smem + L::dp);  // (64, kQ): dP^T
    T* sP = (T*)(smem + L::p);            // (64, kQ): P^T
    T* sdS = (T*)(smem + L::ds);          // (64, kQ): scale · dS^T
    float* sLse = (float*)(smem + L::rows);  // (kQ) the tile's lse, in log2 units
    float* sD = sLse + kQ;                    // (kQ)
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t b = blockIdx.z, g = blockIdx.y, j0 = (int64_t)blockIdx.x * kBlockRows;
    load_tile<T, D>(sK, k, b, j0, kBlockRows, a.Tk, g, a.nkv);
    load_tile<T, D>(sV, v, b, j0, kBlockRows, a.Tk, g, a.nkv);
    FragC dKacc[D / 16], dVacc[D / 16];  // this warp's 16 keys
#pragma unroll
    for (int n = 0; n < D / 16; n++) {
        wmma::fill_fragment(dKacc[n], 0.0f);
        wmma::fill_fragment(dVacc[n], 0.0f);
    }
    const int jr = lane >> 1, c0 = (lane & 1) * (kQ / 2), key_row = warp * 16 + jr;  // two lanes per key row
    const int64_t j = j0 + key_row;
    const float scale_log2 = a.scale * kLog2e;
    // causal: queries before the first that can see key j0 contribute nothing to this block
    const int64_t i_start = a.causal ? lmax(0, a.k_offset + j0 - a.q_offset) : 0;
    const T* sKw = sK + warp * 16 * ld_h<D>();
    const T* sVw = sV + warp * 16 * ld_h<D>();
    for (int64_t h = g * a.group; h < (g + 1) * a.group; h++) {
        for (int64_t i0 = i_start; i0 < a.Tq; i0 += kQ) {
            __syncthreads();  // every warp is done with the previous query tile (first pass: K, V loaded)
            load_tile<T, D>(sQ, q, b, i0, kQ, a.Tq, h, a.nh);
            load_tile<T, D>(sdO, dout, b, i0, kQ, a.Tq, h, a.nh);
            for (int t = threadIdx.x; t < kQ; t += blockDim.x) {
                const bool in = i0 + t < a.Tq;
                sLse[t] = in ? lse[(b * a.nh + h) * a.Tq + i0 + t] * kLog2e : -INFINITY;
                sD[t] = in ? Dl[(b * a.nh + h) * a.Tq + i0 + t] : 0.0f;
            }
            __syncthreads();
            float* sSw = sS + warp * 16 * ld_s(kQ);
            float* sdPw = sdP + warp * 16 * ld_s(kQ);
#pragma unroll
            for (int n = 0; n < kQ / 16; n++) {
                rows_times_rows_t<T, D>(sKw, sQ + n * 16 * ld_h<D>(), sSw + n * 16, ld_s(kQ));    // S^T = K_w Q^T
                rows_times_rows_t<T, D>(sVw, sdO + n * 16 * ld_h<D>(), sdPw + n * 16, ld_s(kQ));  // dP^T = V_w dO^T
            }
            __syncwarp();
            const float* s_row = sS + key_row * ld_s(kQ);
            const float* dp_row = sdP + key_row * ld_s(kQ);
            T* p_row = sP + key_row * ld_p(kQ);
            T* ds_row = sdS + key_row * ld_p(kQ);
            for (int c = c0; c < c0 + kQ / 2; c++) {
                const int64_t i = i0 + c;
                const bool visible = i < a.Tq && j < a.Tk && key_visible(a, i, j) && sLse[c] != -INFINITY;
                const float p = visible ? exp2f(s_row[c] * scale_log2 - sLse[c]) : 0.0f;
                p_row[c] = Num<T>::from(p);
                ds_row[c] = Num<T>::from(p * (dp_row[c] - sD[c]) * a.scale);
            }
            __syncwarp();
            const T* sPw = sP + warp * 16 * ld_p(kQ);
            const T* sdSw = sdS + warp * 16 * ld_p(kQ);
#pragma unroll
            for (int n = 0; n < D / 16; n++) {
                probs_times_rows<T, D, kQ>(dVacc[n], sPw, ld_p(kQ), sdO, n);  // dV_w += P^T dO
                probs_times_rows<T, D, kQ>(dKacc[n], sdSw, ld_p(kQ), sQ, n);  // dK_w += scale · dS^T Q
            }
        }
    }
    __syncthreads();  // the query tiles are free: stage dK, then dV, over them
    float* sOw = (float*)(smem + L::o) + warp * 16 * ld_o<D>();
#pragma unroll
    for (int n = 0; n < D / 16; n++) wmma::store_matrix_sync(sOw + n * 16, dKacc[n], ld_o<D>(), wmma::mem_row_major);
    __syncwarp();
    store_rows<T, D>(dk, sOw, ld_o<D>(), nullptr, b, j0 + warp * 16, a.Tk, g, a.nkv, true);
    __syncwarp();
#pragma unroll
    for (int n = 0; n < D / 16; n++) wmma::store_matrix_sync(sOw + n * 16, dVacc[n], ld_o<D>(), wmma::mem_row_major);
    __syncwarp();
    store_rows<T, D>(dv, sOw, ld_o<D>(), nullptr, b, j0 + warp * 16, a.Tk, g, a.nkv, true);
}

template <class T, int D>
__global__ void __launch_bounds__(kThreadsTC, kMinBlocksTC) tc_dq_kernel(const T* __restrict__ q, const T* __restrict__ k,
                                                            const T* __restrict__ v, const T* __restrict__ dout,
                                                            const float* __restrict__ lse,
                                                            const float* __restrict__ Dl, T* __restrict__ dq,
                                                            AttnDims a) {
    using L = QuerySmem<T, D, true>;
    constexpr int kK = L::kK;
    extern __shared__ __align__(128) unsigned char smem[];
    T* sQ = (T*)(smem + L::q);
    T* sdO = (T*)(smem + L::dout);
    T* sK = (T*)(smem + L::k);
    T* sV = (T*)(smem + L::v);
    float* sS = (float*)(smem + L::s);    // (64, kK) S
    float* sdP = (float*)(smem + L::dp);  // (64, kK) dP
    T* sdS = (T*)(smem + L::p);           // (64, kK) scale · dS
    float* sLse = (float*)(smem + L::rows);  // (64) lse in log2 units
    float* sD = sLse + kBlockRows;            // (64)
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t b = blockIdx.z, h = blockIdx.y, g = h / a.group, i0 = (int64_t)blockIdx.x * kBlockRows;
    load_tile<T, D>(sQ, q, b, i0, kBlockRows, a.Tq, h, a.nh);
    load_tile<T, D>(sdO, dout, b, i0, kBlockRows, a.Tq, h, a.nh);
    for (int t = threadIdx.x; t < kBlockRows; t += blockDim.x) {
        const bool in = i0 + t < a.Tq;
        sLse[t] = in ? lse[(b * a.nh + h) * a.Tq + i0 + t] * kLog2e : -INFINITY;
        sD[t] = in ? Dl[(b * a.nh + h) * a.Tq + i0 + t] : 0.0f;
    }
    FragC dQacc[D / 16];
#pragma unroll
    for (int n = 0; n < D / 16; n++) wmma::fill_fragment(dQacc[n], 0.0f);
    const int r = lane >> 1, c0 = (lane & 1) * (kK / 2), row = warp * 16 + r;
    const int64_t i = i0 + row;
    const float scale_log2 = a.scale * kLog2e;
    const T* sQw = sQ + warp * 16 * ld_h<D>();
    const T* sdOw = sdO + warp * 16 * ld_h<D>();
    const int64_t j_end = visible_keys(a, i0);
    for (int64_t j0 = 0; j0 < j_end; j0 += kK) {
        __syncthreads();  // every warp is done with the previous key tile (first pass: Q, dO, lse, D loaded)
        load_tile<T, D>(sK, k, b, j0, kK, a.Tk, g, a.nkv);
        load_tile<T, D>(sV, v, b, j0, kK, a.Tk, g, a.nkv);
        __syncthreads();
        float* sSw = sS + warp * 16 * ld_s(kK);
        float* sdPw = sdP + warp * 16 * ld_s(kK);
#pragma unroll
        for (int n = 0; n < kK / 16; n++) {
            rows_times_rows_t<T, D>(sQw, sK + n * 16 * ld_h<D>(), sSw + n * 16, ld_s(kK));    // S = Q_w K^T
            rows_times_rows_t<T, D>(sdOw, sV + n * 16 * ld_h<D>(), sdPw + n * 16, ld_s(kK));  // dP = dO_w V^T
        }
        __syncwarp();
        const float* s_row = sS + row * ld_s(kK);
        const float* dp_row = sdP + row * ld_s(kK);
        T* ds_row = sdS + row * ld_p(kK);
        const float lse_i = sLse[row], D_i = sD[row];
        for (int c = c0; c < c0 + kK / 2; c++) {
            const int64_t j = j0 + c;
            const bool visible = i < a.Tq && j < a.Tk && key_visible(a, i, j) && lse_i != -INFINITY;
            const float p = visible ? exp2f(s_row[c] * scale_log2 - lse_i) : 0.0f;
            ds_row[c] = Num<T>::from(p * (dp_row[c] - D_i) * a.scale);
        }
        __syncwarp();
        const T* sdSw = sdS + warp * 16 * ld_p(kK);
#pragma unroll
        for (int n = 0; n < D / 16; n++) probs_times_rows<T, D, kK>(dQacc[n], sdSw, ld_p(kK), sK, n);  // dQ_w += dS K
    }
    __syncthreads();  // K, V, S, dP are free: stage dQ over them
    float* sOw = (float*)(smem + L::o) + warp * 16 * ld_o<D>();
#pragma unroll
    for (int n = 0; n < D / 16; n++) wmma::store_matrix_sync(sOw + n * 16, dQacc[n], ld_o<D>(), wmma::mem_row_major);
    __syncwarp();
    store_rows<T, D>(dq, sOw, ld_o<D>(), nullptr, b, i0 + warp * 16, a.Tq, h, a.nh, true);
}

// Dynamic shared memory above 48 KB is asked for once per kernel (a template argument, so each
// instantiation has its own flag); the largest here, about 90 KB, fits an A100's 163 KB and an H100's 227 KB.
template <auto kernel>
void allow_smem(size_t bytes) {
    static bool done = false;
    if (done) return;
    int dev = 0, limit = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    CHECK(bytes <= (size_t)limit, "tensor-core attention needs %zu bytes of shared memory per block, the GPU allows %d",
          bytes, limit);
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    done = true;
}

template <class T, int D>
void forward_tc(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out, Tensor& lse, const AttnDims& a) {
    using L = QuerySmem<T, D, false>;
    static_assert(L::bytes <= 100 * 1024, "forward tiles exceed 100 KB of shared memory");
    allow_smem<tc_forward_kernel<T, D>>(L::bytes);
    const dim3 grid((unsigned)((a.Tq + kBlockRows - 1) / kBlockRows), (unsigned)a.nh, (unsigned)a.B);
    tc_forward_kernel<T, D><<<grid, kThreadsTC, L::bytes>>>((const T*)q.data(), (const T*)k.data(), (const T*)v.data(),
                                                           (T*)out.data(), lse.ptr<float>(), a);
    KERNEL_CHECK();
}

template <class T, int D>
void backward_tc(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                 const Tensor& lse, Tensor& dq, Tensor& dk, Tensor& dv, const AttnDims& a) {
    Tensor ws = workspace(a.B * a.nh * a.Tq * sizeof(float));
    float* Dl = ws.ptr<float>();  // (B, nh, Tq)
    const int64_t rows = a.B * a.Tq * a.nh;
    tc_delta_kernel<T><<<(unsigned)((rows * 32 + kThreads - 1) / kThreads), kThreads>>>(
        (const T*)dout.data(), (const T*)out.data(), Dl, a, rows);
    KERNEL_CHECK();
    using LK = KeySmem<T, D>;
    static_assert(LK::bytes <= 100 * 1024, "dkdv tiles exceed 100 KB of shared memory");
    allow_smem<tc_dkdv_kernel<T, D>>(LK::bytes);
    const dim3 grid_kv((unsigned)((a.Tk + kBlockRows - 1) / kBlockRows), (unsigned)a.nkv, (unsigned)a.B);
    tc_dkdv_kernel<T, D><<<grid_kv, kThreadsTC, LK::bytes>>>((const T*)q.data(), (const T*)k.data(),
                                                             (const T*)v.data(), (const T*)dout.data(),
                                                             lse.ptr<float>(), Dl, (T*)dk.data(), (T*)dv.data(), a);
    KERNEL_CHECK();
    using LQ = QuerySmem<T, D, true>;
    static_assert(LQ::bytes <= 100 * 1024, "dq tiles exceed 100 KB of shared memory");
    allow_smem<tc_dq_kernel<T, D>>(LQ::bytes);
    const dim3 grid_q((unsigned)((a.Tq + kBlockRows - 1) / kBlockRows), (unsigned)a.nh, (unsigned)a.B);
    tc_dq_kernel<T, D><<<grid_q, kThreadsTC, LQ::bytes>>>((const T*)q.data(), (const T*)k.data(), (const T*)v.data(),
                                                          (const T*)dout.data(), lse.ptr<float>(), Dl, (T*)dq.data(), a);
    KERNEL_CHECK();
}

// the head dims and alignment the kernels take, checked once per call
void check_tc(const char* op, const AttnDims& a, std::initializer_list<const Tensor*> ts) {
    CHECK(a.hd == 16 || a.hd == 32 || a.hd == 64 || a.hd == 128,
          "%s: tensor-core attention takes head dims 16, 32, 64 or 128, not %ld (f32 attention takes any)", op,
          (long)a.hd);
    for (const Tensor* t : ts)
        CHECK((uintptr_t)t->data() % 16 == 0, "%s: tensor-core attention reads 16-byte chunks; a %s operand starts "
              "at %p, not 16-byte aligned (a view at an odd offset?)", op, dtype_name(t->dtype), t->data());
}

template <class T, class F>
void by_head_dim(int64_t hd, F&& f) {
    switch (hd) {
        case 16: f(std::integral_constant<int, 16>{}); break;
        case 32: f(std::integral_constant<int, 32>{}); break;
        case 64: f(std::integral_constant<int, 64>{}); break;
        default: f(std::integral_constant<int, 128>{}); break;  // check_tc allowed only these
    }
}

}  // namespace

void attention_forward_tc(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out, Tensor& lse, AttnSpan span) {
    const AttnDims a = attn_dims(q, k, span);
    if (a.B * a.nh * a.Tq == 0) return;
    check_tc("attention_tiled", a, {&q, &k, &v, &out});
    auto run = [&](auto t) {
        using T = decltype(t);
        by_head_dim<T>(a.hd, [&](auto d) { forward_tc<T, decltype(d)::value>(q, k, v, out, lse, a); });
    };
    if (q.dtype == DType::bf16) run(__nv_bfloat16{});
    else run(__half{});
}

void attention_backward_tc(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                           const Tensor& lse, Tensor& dq, Tensor& dk, Tensor& dv, AttnSpan span) {
    const AttnDims a = attn_dims(q, k, span);
    if (a.B * a.nh * a.Tq == 0 || a.Tk == 0) return;
    check_tc("attention_backward_tiled", a, {&dout, &q, &k, &v, &out, &dq, &dk, &dv});
    auto run = [&](auto t) {
        using T = decltype(t);
        by_head_dim<T>(a.hd, [&](auto d) {
            backward_tc<T, decltype(d)::value>(dout, q, k, v, out, lse, dq, dk, dv, a);
        });
    };
    if (q.dtype == DType::bf16) run(__nv_bfloat16{});
    else run(__half{});
}

}  // namespace penta::cuda
