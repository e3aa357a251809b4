// fp8.hpp — FP8 training's GEMM after DeepSeek-V3: tile quantisation (fine-grained scales) and the GEMM that
// sums each tile's products in f32 and promotes them with the two tiles' scales; emulated exactly on the CPU,
// through cuBLASLt's block-scaled FP8 GEMM on Hopper (cuda/fp8_gemm.cu).
//
// Playbook: "Mixed precision training", FP8: e4m3 for the forward's inputs, e5m2 (more range, less precision)
// for the gradients, a scale per 1x128 tile of activations and gradients and per 128x128 block of weights, so
// that one outlier costs only its own tile its precision, and partial sums promoted to an f32 accumulator every
// N_C = 128 elements of K because the tensor core's own accumulator keeps about 14 bits.
// Tiles run along K, the summed dimension, so that one scale pair multiplies each block's partial sum. The left
// operand (an activation, or the output gradient) is always cut into 1x128 tiles; the right one into 128x128
// blocks when it is a weight and into 1x128 tiles when it is an activation: the weight-gradient GEMM
// dW = dy^T x sums over the tokens, so x is tiled 128 tokens x 1 feature there, as DeepSeek-V3 re-tiles its
// activations for that GEMM (a 128x128 block would let one outlier token set the scale of 128 features).
//
// How the CPU emulates it: every input element is rounded to the format exactly as a GPU kernel would
// convert it (dtype.cpp: round to nearest even; saturation at the format's largest value for scaled fp8),
// then the products of one K block are summed by sgemm in f32 and multiplied by the two tiles' scales into
// the f32 result. So training sums each 128-block of K in full f32: the ~14-bit accumulator inside a block,
// and why promotion every 128 rescues it, is shown by dot_limited in tests/11_mixed_precision (test_tiles)
// only. On a GPU the tensor core's own accumulator sums a block and cuBLASLt promotes (cuda/fp8_gemm.cu).
// The linear layers reach it through common/linear_gemm.hpp once install_fp8_gemm() has run.
// Test: `make test CH=11` (build/bin/tests_11 -tc='*tile*'; -tc='*cuda*' on a machine with a GPU).
#pragma once
#include <cstdint>
#include <vector>

#include "../common/linear_gemm.hpp"

namespace penta {

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

// x (rows, cols) f32 quantised per tile_rows x kTile tile on its device, returned on the host: the CPU's
// quantise_tiles above, or the GPU's kernel that fp8 GEMMs use there (the cuda tests hold them equal, bit for bit)
TileQuant quantise_tiles(const Tensor& x, int64_t tile_rows, DType format);

// FP8 GEMM: C (M, N) = A (M, K) @ Bt(N, K)^T + beta * C, both row-major with K contiguous. A is quantised per
// 1 x kTile tile in a_format, Bt per b_tile_rows x kTile tile in b_format (kTile: a weight's blocks; 1: an
// activation's tiles); each K block's products are summed in f32 and promoted into C with the two scales.
constexpr int64_t kTile = 128;
void fp8_gemm(const float* A, const float* Bt, float* C, int64_t M, int64_t N, int64_t K, float beta, DType a_format,
              DType b_format, int64_t b_tile_rows);

// The dot product of a and b (n elements) as an accumulator that keeps `mantissa_bits` bits (the sum is
// rounded to them after every addition), promoted into an f32 total every `promote_every` elements (<= 0:
// never; the limited accumulator sums everything). DeepSeek-V3 measured ~14 bits on H800's FP8 tensor cores.
float dot_limited(const float* a, const float* b, int64_t n, int mantissa_bits, int64_t promote_every);

// The linear layers' GEMMs in e4m3 (--precision fp8) from now on: fp8_gemm on the CPU, cuda::fp8_gemm on a GPU.
// Chapter 11's program and tests call it once before training.
void install_fp8_gemm();

namespace cuda {  // cuda/fp8_gemm.cu (CUDA builds)
// fp8: op(A) quantised per 1x128 tile and op(B)^T per b_tile_rows x 128 tile by our kernel, cuBLASLt's
// block-scaled FP8 GEMM on Hopper (sm_90; elsewhere it fails naming the device)
void fp8_gemm(const Tensor& A, const Tensor& B, Tensor& C, bool transA, bool transB, float beta, DType a_format,
              DType b_format, int64_t b_tile_rows);
TileQuant quantise_tiles(const Tensor& x, int64_t tile_rows, DType format);
}  // namespace cuda

}  // namespace penta
