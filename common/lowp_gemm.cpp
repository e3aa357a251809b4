// lowp_gemm.cpp — see lowp_gemm.hpp: the linear layers' GEMMs in bf16 / f16 / fp8, emulated on the CPU, and the
// dispatch of cuda tensors to common/cuda/lowp_gemm.cu.
// Playbook: "Mixed precision training" (FP8 after DeepSeek-V3). Test: `make test CH=11`.
#include "lowp_gemm.hpp"

#include <cblas.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

namespace penta {

namespace {
DType g_format = DType::f32;  // one thread launches every op of a rank
}
GemmScope::GemmScope(DType format) : previous_(g_format) { g_format = format; }
GemmScope::~GemmScope() { g_format = previous_; }
DType GemmScope::format() { return g_format; }

float round_to(float x, DType format) {
    switch (format) {
        case DType::f32: return x;
        case DType::bf16: return bf16_to_f32(f32_to_bf16(x));
        case DType::f16: return f16_to_f32(f32_to_f16(x));
        case DType::e4m3: return e4m3_to_f32(f32_to_e4m3(x, true));
        case DType::e5m2: return e5m2_to_f32(f32_to_e5m2(x, true));
        default: FAIL("round_to: %s is not a float format", dtype_name(format));
    }
}

float max_finite(DType format) {
    switch (format) {
        case DType::f32: return FLT_MAX;
        case DType::bf16: return bf16_to_f32(0x7F7F);
        case DType::f16: return f16_to_f32(0x7BFF);
        case DType::e4m3: return e4m3_to_f32(0x7E);
        case DType::e5m2: return e5m2_to_f32(0x7B);
        default: FAIL("max_finite: %s is not a float format", dtype_name(format));
    }
}

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

void linear_gemm(const Tensor& A, const Tensor& B, Tensor& C, bool transA, bool transB, float beta, Operand a_role,
                 Operand b_role) {
    count_linear_flops(C.size(-2), C.size(-1), transA ? A.size(-2) : A.size(-1));  // the op-level FLOP counter
    const DType f = GemmScope::format();
    if (f == DType::f32) return matmul(A, B, C, transA, transB, 1.0f, beta);
    CHECK(A.dim() == 2 && B.dim() == 2 && C.dim() == 2 && A.dtype == DType::f32 && B.dtype == DType::f32 &&
              C.dtype == DType::f32,
          "linear_gemm: the linear layers' GEMMs are 2-D f32 (got A %s, B %s)", shape_str(A.shape).c_str(),
          shape_str(B.shape).c_str());
    const int64_t M = C.size(0), N = C.size(1), K = transA ? A.size(0) : A.size(1);
    CHECK((transA ? A.size(1) : A.size(0)) == M && (transB ? B.size(1) : B.size(0)) == K &&
              (transB ? B.size(0) : B.size(1)) == N,
          "linear_gemm: shapes A %s%s, B %s%s, C %s do not fit", shape_str(A.shape).c_str(), transA ? "^T" : "",
          shape_str(B.shape).c_str(), transB ? "^T" : "", shape_str(C.shape).c_str());
    CHECK(A.device() == B.device() && B.device() == C.device(), "linear_gemm: A, B and C must be on one device");
    CHECK(f == DType::bf16 || f == DType::f16 || f == DType::e4m3,
          "GemmScope %s: the GEMM formats are f32, bf16, f16 and e4m3 (fp8)", dtype_name(f));
    CHECK(a_role != Operand::weight, "linear_gemm: the left operand is a weight; fp8 tiles it 1x128 (activations, "
          "gradients) and only the right operand by 128x128 blocks");
    const DType a_format = fp8_format(a_role), b_format = fp8_format(b_role);
    const int64_t b_tile_rows = b_role == Operand::weight ? kTile : 1;
    if (A.device() == Device::cuda) {
#if defined(PENTA_CUDA)
        if (f == DType::e4m3) return cuda::fp8_gemm(A, B, C, transA, transB, beta, a_format, b_format, b_tile_rows);
        return cuda::half_gemm(A, B, C, transA, transB, beta, f);
#else
        FAIL("--precision %s on a cuda tensor, but this build has no CUDA (make CUDA=1)",
             f == DType::e4m3 ? "fp8" : dtype_name(f));
#endif
    }
    if (f == DType::bf16 || f == DType::f16) {
        // what a bf16/f16 tensor core reads: each input rounded once; products summed in f32
        Tensor a = Tensor::empty(A.shape, DType::f32, Device::cpu, Tag::workspace);
        Tensor b = Tensor::empty(B.shape, DType::f32, Device::cpu, Tag::workspace);
        const float *as = A.ptr<float>(), *bs = B.ptr<float>();
        float *ad = a.ptr<float>(), *bd = b.ptr<float>();
        for (int64_t i = 0, n = A.numel(); i < n; i++) ad[i] = round_to(as[i], f);
        for (int64_t i = 0, n = B.numel(); i < n; i++) bd[i] = round_to(bs[i], f);
        return matmul(a, b, C, transA, transB, 1.0f, beta);
    }
    const std::vector<float> a = k_contiguous(A, transA, M, K);   // op(A): (M, K)
    const std::vector<float> bt = k_contiguous(B, !transB, N, K);  // op(B)^T: (N, K)
    fp8_gemm(a.data(), bt.data(), C.ptr<float>(), M, N, K, beta, a_format, b_format, b_tile_rows);
}

}  // namespace penta
