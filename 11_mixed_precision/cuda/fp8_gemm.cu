// fp8_gemm.cu — chapter 11's FP8 GEMM on the GPU (fp8.hpp): our quantisation kernel cuts each operand into
// tiles and scales them, cuBLASLt's block-scaled FP8 GEMM on Hopper multiplies them and writes f32.
//
// Playbook: "Mixed precision training", FP8 after DeepSeek-V3: one f32 scale per 1x128 tile of activations and
// gradients and per 128x128 block of weights, and the partial sums of every 128 elements of K promoted to f32,
// because the FP8 tensor core's own accumulator keeps about 14 bits. cuBLASLt (CUDA 12.9+) takes such scales
// directly on sm_90: CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F (1x128) and BLK128x128_32F (128x128), with fast
// accumulation off (CUBLASLT_MATMUL_DESC_FAST_ACCUM 0, the default): it promotes the partial sums itself.
// What is ours: the quantisation kernel (one block per tile: the tile's amax, its scale by tile_scale's rule,
// each element divided by it and rounded to e4m3 / e5m2 with saturation, as dtype.cpp does on the host),
// the scale layouts cuBLASLt reads, and zero padding of every dimension to a multiple of 128 (FP8 GEMMs want
// 16-byte aligned dimensions; whole tiles keep the layouts simple; zeros change no sum and no amax).
// Tested by tests/11_mixed_precision/test_cuda.cpp against the CPU emulation (`build/bin/tests_11 -tc='*cuda*'`
// on a machine with a GPU; scripts/gpu_check.sh runs it).
#include <cuda_fp8.h>

#include <cfloat>

#include "../../common/cuda/cuda_util.cuh"
#include "../../common/cuda/lt_matmul.cuh"
#include "../fp8.hpp"

namespace penta::cuda {

namespace {

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// ---- FP8 ---------------------------------------------------------------------------------------------------
// One operand as cuBLASLt's FP8 GEMM reads it: q (rows_p, k_p) fp8 codes, K contiguous, zero padded to multiples
// of 128; one f32 scale per tile_rows x 128 tile, the scale of tile (tr, tk) at tr * s_row + tk * s_k:
//   1 x 128 (VEC128_32F): "outer-dim-major", the rows' scales of one K block side by side: r + tk * rows_p;
//   128 x 128 (BLK128x128_32F): the K blocks of one row block side by side, each row of blocks padded to a
//   multiple of 4 scales (16 bytes): tr * round_up(k_p / 128, 4) + tk.
struct Fp8Operand {
    Tensor q, scale;
    int64_t rows_p = 0, k_p = 0, tile_rows = 1, s_row = 0, s_k = 0;
    int32_t mode() const {
#if PENTA_LT_BLOCK_SCALES
        return tile_rows == 1 ? CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F : CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
#else
        return -1;  // fp8_gemm refuses before asking
#endif
    }
};

// max that keeps a NaN (fmaxf would drop it, and a NaN must reach the result as on the CPU)
struct MaxKeepNan {
    __device__ float operator()(float a, float b) const { return isnan(a) || a > b ? a : b; }
};

// One block per tile (tr, tk) = (blockIdx.x, blockIdx.y): element (r, k) of the (rows, K) matrix being
// quantised is x[r * rs + k * ks] (rs, ks: its strides, so a transposed operand is read in place). Past rows
// or K the tile holds zeros: they count as 0 in the amax and are written as code 0.
__global__ void quantise_tiles_kernel(const float* x, int64_t rows, int64_t K, int64_t rs, int64_t ks, int tile_rows,
                                      __nv_fp8_interpretation_t format, float max_finite, uint8_t* q, int64_t k_p,
                                      float* scale, int64_t s_row, int64_t s_k) {
    const int64_t r0 = (int64_t)blockIdx.x * tile_rows, k0 = (int64_t)blockIdx.y * kTile;
    const int n = tile_rows * (int)kTile;
    float amax = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const int64_t r = r0 + i / kTile, k = k0 + i % kTile;
        if (r < rows && k < K) amax = MaxKeepNan{}(amax, fabsf(x[r * rs + k * ks]));
    }
    amax = block_reduce(amax, MaxKeepNan{}, 0.0f);
    // tile_scale's rule (fp8.cpp), in the same f32 arithmetic: the amax onto the format's largest value,
    // never below FLT_MIN; 1 for an all-zero tile; a NaN propagates
    const float s = amax > 0.0f ? fmaxf(amax / max_finite, FLT_MIN) : (amax == 0.0f ? 1.0f : amax);
    if (threadIdx.x == 0) scale[blockIdx.x * s_row + blockIdx.y * s_k] = s;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const int64_t r = r0 + i / kTile, k = k0 + i % kTile;
        const float v = r < rows && k < K ? x[r * rs + k * ks] / s : 0.0f;  // IEEE division, as on the host
        q[r * k_p + k] = __nv_cvt_float_to_fp8(v, __NV_SATFINITE, format);   // nearest even, saturating
    }
}

Fp8Operand quantise(const float* x, int64_t rows, int64_t K, int64_t rs, int64_t ks, int64_t tile_rows, DType format) {
    CHECK(tile_rows == 1 || tile_rows == kTile, "fp8 tiles are 1 x 128 or 128 x 128, not %ld x 128", (long)tile_rows);
    Fp8Operand o;
    o.tile_rows = tile_rows;
    o.rows_p = round_up(std::max<int64_t>(rows, 1), kTile), o.k_p = round_up(std::max<int64_t>(K, 1), kTile);
    const int64_t row_tiles = o.rows_p / tile_rows, k_tiles = o.k_p / kTile;
    if (tile_rows == 1) o.s_row = 1, o.s_k = o.rows_p;
    else o.s_row = round_up(k_tiles, 4), o.s_k = 1;
    o.q = Tensor::empty({o.rows_p, o.k_p}, format, Device::cuda, Tag::workspace);
    o.scale = Tensor::empty({tile_rows == 1 ? o.rows_p * k_tiles : row_tiles * o.s_row}, DType::f32, Device::cuda,
                            Tag::workspace);
    cuda::fill(o.scale, 1.0f);  // the 16-byte padding of 128x128 rows: never read, but never garbage either
    const dim3 grid((unsigned)row_tiles, (unsigned)k_tiles);
    quantise_tiles_kernel<<<grid, tile_rows == 1 ? 128 : kThreads>>>(
        x, rows, K, rs, ks, (int)tile_rows, format == DType::e4m3 ? __NV_E4M3 : __NV_E5M2, max_finite(format),
        (uint8_t*)o.q.data(), o.k_p, o.scale.ptr<float>(), o.s_row, o.s_k);
    KERNEL_CHECK();
    return o;
}

// C (M, N) = D[:M, :N] + beta * C, D (M_p, N_p) row-major; beta 0 reads nothing of C (it may hold anything)
__global__ void add_unpadded_kernel(const float* D, int64_t n_p, float* C, int64_t M, int64_t N, float beta) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < M * N; i += (int64_t)gridDim.x * blockDim.x) {
        const float d = D[(i / N) * n_p + i % N];
        C[i] = beta == 0.0f ? d : d + beta * C[i];
    }
}

// cuBLASLt's 1x128 / 128x128 block scales for FP8 are Hopper's (sm_90) alone; another GPU gets the reason
void check_hopper() {
    static const int cc = [] {
        int dev = 0, major = 0, minor = 0;
        CUDA_CHECK(cudaGetDevice(&dev));
        CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
        CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
        return major * 10 + minor;
    }();
    CHECK(cc == 90, "--precision fp8 on the GPU: cuBLASLt's FP8 GEMM with 1x128 / 128x128 block scales runs on Hopper "
          "(sm_90) only, and this GPU is sm_%d; use --precision bf16 here, or --device cpu for the fp8 emulation", cc);
}

}  // namespace

void fp8_gemm(const Tensor& A, const Tensor& B, Tensor& C, bool transA, bool transB, float beta, DType a_format,
              DType b_format, int64_t b_tile_rows) {
    CHECK(PENTA_LT_BLOCK_SCALES, "--precision fp8 on the GPU: this build's cuBLAS (%d) predates the 1x128 / 128x128 "
          "block scales of its FP8 GEMM (cuBLAS 12.9); build with CUDA 12.9 or later, or use --precision bf16",
          (int)CUBLAS_VERSION);
    check_hopper();
    const int64_t M = C.size(0), N = C.size(1), K = transA ? A.size(0) : A.size(1);
    if (M == 0 || N == 0) return;
    // op(A) (M, K): A stored (M, K), or (K, M) when transA
    const Fp8Operand a = quantise(A.ptr<float>(), M, K, transA ? 1 : K, transA ? M : 1, 1, a_format);
    // op(B)^T (N, K): B stored (K, N), or (N, K) when transB
    const Fp8Operand b = quantise(B.ptr<float>(), N, K, transB ? K : 1, transB ? 1 : N, b_tile_rows, b_format);
    // D^T (N_p, M_p) = op(B)^T (N_p, K_p) @ op(A)^T (K_p, M_p), both stored K-contiguous: cuBLASLt's A is b,
    // transposed, and its B is a, not — the "TN" layout its FP8 kernels require
    Tensor d = Tensor::empty({a.rows_p, b.rows_p}, DType::f32, Device::cuda, Tag::workspace);  // (M_p, N_p)
    const auto type = [](DType f) { return f == DType::e4m3 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2; };
    LtShape s{type(b_format), type(a_format), true, false, b.rows_p, a.rows_p, a.k_p, a.k_p, a.k_p, b.rows_p};
    s.a_scale_mode = b.mode(), s.b_scale_mode = a.mode();
    lt_matmul(s, b.q.data(), b.scale.ptr<float>(), a.q.data(), a.scale.ptr<float>(), 0.0f, d.ptr<float>());
    add_unpadded_kernel<<<grid_for(M * N), kThreads>>>(d.ptr<float>(), b.rows_p, C.ptr<float>(), M, N, beta);
    KERNEL_CHECK();
}

TileQuant quantise_tiles(const Tensor& x, int64_t tile_rows, DType format) {
    const int64_t rows = x.size(0), cols = x.size(1);
    const Fp8Operand o = quantise(x.ptr<float>(), rows, cols, cols, 1, tile_rows, format);
    Tensor codes = Tensor::empty(o.q.shape, DType::f32, Device::cuda, Tag::workspace);
    cuda::convert(codes, o.q);  // every fp8 value is exact in f32
    const std::vector<float> q = codes.to_host(), scale = o.scale.to_host();
    TileQuant t;
    t.rows = rows, t.cols = cols, t.tile_rows = tile_rows, t.tile_cols = kTile, t.format = format;
    t.q.resize(rows * cols);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) t.q[r * cols + c] = q[r * o.k_p + c];
    const int64_t down = (rows + tile_rows - 1) / tile_rows, across = t.tiles_across();
    t.scale.resize(down * across);
    for (int64_t tr = 0; tr < down; tr++)
        for (int64_t tk = 0; tk < across; tk++) t.scale[tr * across + tk] = scale[tr * o.s_row + tk * o.s_k];
    return t;
}

}  // namespace penta::cuda
