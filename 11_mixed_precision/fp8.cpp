// fp8.cpp — see fp8.hpp: tile quantisation and the FP8 GEMM, emulated on the CPU, and the dispatch of cuda tensors
// to cuda/fp8_gemm.cu; installed as the linear layers' e4m3 GEMM by install_fp8_gemm.
// Playbook: "Mixed precision training" (FP8 after DeepSeek-V3). Test: `make test CH=11`.
#include "fp8.hpp"

#include <cblas.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

namespace penta {

float tile_scale(float amax, DType format) {
    // EXERCISE 11.2 begin: the tile's scale: its largest magnitude onto the format's largest value
    if (!(amax > 0)) return amax == 0 ? 1.0f : amax;  // all zeros: any scale; NaN: let it propagate
    // a tile of tiny values must not get a scale that underflows (x / 0); below FLT_MIN the scale stays
    // FLT_MIN and such a tile keeps fewer bits — values 2^-126 * 448 and smaller, far under any gradient
    return std::max(amax / max_finite(format), FLT_MIN);
    // EXERCISE 11.2 end
}

std::vector<float> TileQuant::dequantise() const {
    std::vector<float> x(q.size());
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) x[r * cols + c] = q[r * cols + c] * scale_of(r, c);
    return x;
}

TileQuant quantise_tiles(const float* x, int64_t rows, int64_t cols, int64_t tile_rows, int64_t tile_cols,
                         DType format) {
    CHECK(tile_rows > 0 && tile_cols > 0, "quantise_tiles: tile %lld x %lld must be positive", (long long)tile_rows,
          (long long)tile_cols);
    TileQuant t;
    t.rows = rows, t.cols = cols, t.tile_rows = tile_rows, t.tile_cols = tile_cols, t.format = format;
    t.q.resize(rows * cols);
    const int64_t down = (rows + tile_rows - 1) / tile_rows, across = t.tiles_across();
    t.scale.assign(down * across, 0.0f);
    for (int64_t r = 0; r < rows; r++)  // amax per tile
        for (int64_t c = 0; c < cols; c++) {
            float& m = t.scale[(r / tile_rows) * across + c / tile_cols];
            const float a = std::fabs(x[r * cols + c]);
            m = std::isnan(a) ? a : std::max(m, a);  // std::max would drop a NaN
        }
    for (float& s : t.scale) s = tile_scale(s, format);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) t.q[r * cols + c] = round_to(x[r * cols + c] / t.scale_of(r, c), format);
    return t;
}

TileQuant quantise_tiles(const Tensor& x, int64_t tile_rows, DType format) {
    CHECK(x.dim() == 2 && x.dtype == DType::f32, "quantise_tiles: x must be 2-D f32, got %s %s", dtype_name(x.dtype),
          shape_str(x.shape).c_str());
    if (x.device() == Device::cpu)
        return quantise_tiles(x.ptr<float>(), x.size(0), x.size(1), tile_rows, kTile, format);
#if defined(PENTA_CUDA)
    return cuda::quantise_tiles(x, tile_rows, format);
#else
    FAIL("quantise_tiles on a cuda tensor, but this build has no CUDA (make CUDA=1)");
#endif
}

void fp8_gemm(const float* A, const float* Bt, float* C, int64_t M, int64_t N, int64_t K, float beta, DType a_format,
              DType b_format, int64_t b_tile_rows) {
    const TileQuant a = quantise_tiles(A, M, K, 1, kTile, a_format);              // activations / gradients: 1 x 128
    const TileQuant b = quantise_tiles(Bt, N, K, b_tile_rows, kTile, b_format);  // weights 128 x 128, the rest 1 x 128
    for (int64_t i = 0; i < M * N; i++) C[i] = beta == 0.0f ? 0.0f : beta * C[i];
    std::vector<float> partial(M * N);  // (M, N): one K block's sum, before its scales
    for (int64_t k0 = 0, kb = 0; k0 < K; k0 += kTile, kb++) {
        const int64_t kw = std::min(kTile, K - k0);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)M, (int)N, (int)kw, 1.0f, a.q.data() + k0, (int)K,
                    b.q.data() + k0, (int)K, 0.0f, partial.data(), (int)N);
        // the promotion: this block's partial sum, dequantised by its two tiles' scales, joins the f32 total
        for (int64_t m = 0; m < M; m++) {
            const float sa = a.scale[m * a.tiles_across() + kb];
            for (int64_t n = 0; n < N; n++)
                C[m * N + n] += partial[m * N + n] * (sa * b.scale[(n / b_tile_rows) * b.tiles_across() + kb]);
        }
    }
}

namespace {

// x rounded to `bits` mantissa bits, to nearest even (bits < 23)
float round_mantissa(float x, int bits) {
    uint32_t u;
    std::memcpy(&u, &x, 4);
    if ((u & 0x7F800000u) == 0x7F800000u) return x;  // inf, NaN
    const int drop = 23 - bits;
    const uint32_t half = 1u << (drop - 1), rest = u & ((1u << drop) - 1);
    u &= ~((1u << drop) - 1);
    if (rest > half || (rest == half && (u >> drop) & 1)) u += 1u << drop;  // a carry moves the exponent up
    std::memcpy(&x, &u, 4);
    return x;
}

// (rows, cols) of `src`, transposed when `trans` (src is then (cols, rows)): a K-contiguous row-major copy
std::vector<float> k_contiguous(const Tensor& t, bool trans, int64_t rows, int64_t cols) {
    const float* s = t.ptr<float>();
    std::vector<float> out(rows * cols);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) out[r * cols + c] = trans ? s[c * rows + r] : s[r * cols + c];
    return out;
}

DType fp8_format(Operand role) { return role == Operand::gradient ? DType::e5m2 : DType::e4m3; }

}  // namespace

float dot_limited(const float* a, const float* b, int64_t n, int mantissa_bits, int64_t promote_every) {
    float acc = 0.0f, total = 0.0f;  // the tensor core's accumulator; the f32 registers it is promoted into
    for (int64_t i = 0; i < n; i++) {
        acc = round_mantissa(acc + a[i] * b[i], mantissa_bits);
        if (promote_every > 0 && (i + 1) % promote_every == 0) total += acc, acc = 0.0f;
    }
    return total + acc;
}

namespace {

// the linear layers' e4m3 GEMM (linear_gemm.hpp checked the shapes): gradients read in e5m2, the rest in
// e4m3; the right operand by 128x128 blocks when it is a weight, by 1x128 tiles otherwise
void fp8_linear_gemm(const Tensor& A, const Tensor& B, Tensor& C, bool transA, bool transB, float beta, DType,
                     Operand a_role, Operand b_role) {
    const DType a_format = fp8_format(a_role), b_format = fp8_format(b_role);
    const int64_t b_tile_rows = b_role == Operand::weight ? kTile : 1;
    if (A.device() == Device::cuda) {
#if defined(PENTA_CUDA)
        return cuda::fp8_gemm(A, B, C, transA, transB, beta, a_format, b_format, b_tile_rows);
#else
        FAIL("--precision fp8 on a cuda tensor, but this build has no CUDA (make CUDA=1)");
#endif
    }
    const int64_t M = C.size(0), N = C.size(1), K = transA ? A.size(0) : A.size(1);
    const std::vector<float> a = k_contiguous(A, transA, M, K);   // op(A): (M, K)
    const std::vector<float> bt = k_contiguous(B, !transB, N, K);  // op(B)^T: (N, K)
    fp8_gemm(a.data(), bt.data(), C.ptr<float>(), M, N, K, beta, a_format, b_format, b_tile_rows);
}

}  // namespace

void install_fp8_gemm() { install_linear_gemm(DType::e4m3, fp8_linear_gemm); }

}  // namespace penta
