// lowp_gemm.hpp — the linear layers' GEMMs in a low-precision format, emulated exactly on the CPU: bf16 and
// f16 inputs with f32 sums, and FP8 with fine-grained (per-tile) scales and f32 promotion of partial sums.
//
// Playbook: "Mixed precision training" — the matmuls are where low precision pays (tensor cores read bf16,
// f16 or fp8 inputs and accumulate in f32); and its FP8 part after DeepSeek-V3: e4m3 for the forward's
// inputs, e5m2 (more range, less precision) for the gradients, a scale per 1x128 tile of activations and per
// 128x128 block of weights so that one outlier costs only its own tile its precision, and partial sums
// promoted to an f32 accumulator every N_C = 128 elements of K because the tensor core's own accumulator
// keeps about 14 bits.
//
// How the CPU emulates it: every input element is rounded to the format exactly as a GPU kernel would
// convert it (dtype.cpp: round to nearest even; saturation at the format's largest value for scaled fp8),
// then the products of one K block are summed by sgemm in f32 and multiplied by the two tiles' scales into
// the f32 result. The limited in-block accumulator itself is emulated by dot_limited (a reader can see why
// the promotion matters in tests/11_mixed_precision); the training GEMM sums a block in f32.
// Test: `make test CH=11` (build/bin/tests_11 -tc='*tile*').
#pragma once
#include <cstdint>
#include <vector>

#include "ops.hpp"

namespace penta {

// While one is alive, the linear layers' GEMMs read their inputs in `format` (f32: plain sgemm; bf16, f16;
// e4m3: fp8 as above). The model opens one around each pass from its precision policy's gemm.
class GemmScope {
   public:
    explicit GemmScope(DType format);
    ~GemmScope();
    GemmScope(const GemmScope&) = delete;
    GemmScope& operator=(const GemmScope&) = delete;
    static DType format();

   private:
    DType previous_;
};

// What a GEMM operand is: it decides the fp8 format (gradients e5m2, the rest e4m3)
enum class Operand : uint8_t { activation, weight, gradient };

// C = op(A) @ op(B) + beta * C (ops.hpp's matmul), in the current GemmScope's format for operands of the
// given roles. f32 scope: exactly matmul. The linear layers call nothing else.
void linear_gemm(const Tensor& A, const Tensor& B, Tensor& C, bool transA, bool transB, float beta, Operand a_role,
                 Operand b_role);

// The exact value the format keeps of x: bf16 and f16 round to nearest even and overflow to ±inf (f16's
// overflow is what loss scaling watches for); e4m3 / e5m2 saturate at ±max (the scaled fp8 convention).
float round_to(float x, DType format);
float max_finite(DType format);  // 3.39e38 (bf16), 65504, 448 (e4m3), 57344 (e5m2)

// A (rows, cols) row-major f32 matrix quantised per tile of tile_rows x tile_cols (edge tiles smaller):
// scale = amax(tile) / max_finite(format) (1 for an all-zero tile), q = round_to(x / scale). The value
// kept of x is q * scale. Per-tensor scaling is the one tile of rows x cols.
struct TileQuant {
    int64_t rows = 0, cols = 0, tile_rows = 0, tile_cols = 0;
    DType format = DType::e4m3;
    std::vector<float> q;      // (rows, cols): values of the format
    std::vector<float> scale;  // (ceil(rows / tile_rows), ceil(cols / tile_cols))
    int64_t tiles_across() const { return (cols + tile_cols - 1) / tile_cols; }
    float scale_of(int64_t r, int64_t c) const { return scale[(r / tile_rows) * tiles_across() + c / tile_cols]; }
    std::vector<float> dequantise() const;  // (rows, cols)
};
TileQuant quantise_tiles(const float* x, int64_t rows, int64_t cols, int64_t tile_rows, int64_t tile_cols,
                         DType format);
// the scale of one tile: its largest magnitude mapped onto the format's largest value
float tile_scale(float amax, DType format);

// FP8 GEMM: C (M, N) = A (M, K) @ Bt(N, K)^T + beta * C, both row-major with K contiguous. A is quantised per
// 1 x kTile tile in a_format, Bt per kTile x kTile block in b_format; each K block's products are summed in f32
// and promoted into C with the two scales.
constexpr int64_t kTile = 128;
void fp8_gemm(const float* A, const float* Bt, float* C, int64_t M, int64_t N, int64_t K, float beta, DType a_format,
              DType b_format);

// The dot product of a and b (n elements) as an accumulator that keeps `mantissa_bits` bits (the sum is
// rounded to them after every addition), promoted into an f32 total every `promote_every` elements (<= 0:
// never; the limited accumulator sums everything). DeepSeek-V3 measured ~14 bits on H800's FP8 tensor cores.
float dot_limited(const float* a, const float* b, int64_t n, int mantissa_bits, int64_t promote_every);

}  // namespace penta
