// test_cuda.cpp — the low-precision GEMMs on the GPU (11_mixed_precision/cuda/fp8_gemm.cu,
// common/cuda/linear_gemm.cu) against the CPU emulation (11_mixed_precision/fp8.cpp, common/linear_gemm.cpp):
// the fp8 tile quantisation bit for bit (codes and scales, 1x128 and 128x128, e4m3 and e5m2, edge tiles, an
// all-zero tile); the three GEMMs of a linear layer (forward, input gradient, weight gradient with beta 1) in
// bf16 and f16 through cuBLASLt within f32 rounding, and in fp8 through cuBLASLt's block-scaled FP8 GEMM on Hopper within its accumulator's rounding (elsewhere: refused by name).
// A CPU case checks that each tolerance tells the low precision apart: the emulation is further from plain
// f32 than the tolerance allows, so a GPU path that skipped the rounding (or mixed up a tile's scale) fails.
// Public API only (Device::cuda tensors), so it compiles in a CPU-only build, where every case is skipped.
// Playbook: "Mixed precision training". Run on a machine with a GPU: build/bin/tests_11 -tc='*cuda*'
// (scripts/gpu_check.sh runs it).
#include <cmath>

#include "../../11_mixed_precision/fp8.hpp"
#include "../testing.hpp"

using namespace penta;
using namespace penta::testing;

namespace {

// (rows, cols) normal values whose magnitude changes every 7 rows and every 128 columns (2^-5 ... 2^5): tiles
// get different scales, so a scale read for the wrong tile shows
std::vector<float> tiled_values(int64_t rows, int64_t cols, uint64_t seed) {
    std::vector<float> x(rows * cols);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            x[r * cols + c] = std::ldexp(rng_normal(seed, 11, (uint64_t)(r * cols + c)),
                                         (int)((r / 7 * 3 + c / 128 * 5) % 11) - 5);
    return x;
}

Tensor on(Device d, const std::vector<float>& v, int64_t rows, int64_t cols) {
    return Tensor::from_host(v, {rows, cols}, d, Tag::workspace);
}

// One GEMM of a linear layer: C = op(A) @ op(B) + beta * C0 with the operands' roles, on the CPU (the
// emulation under `format`, and plain f32) and on the GPU, and each element's sum of |products| (+ |beta C0|)
struct Gemm {
    std::string name;
    int64_t a_rows, a_cols, b_rows, b_cols, c_rows, c_cols;
    bool ta, tb;
    float beta;
    Operand a_role, b_role;
};

struct Results {
    std::vector<float> emulated, f32, magnitude;  // on the CPU
};

std::vector<float> gemm(const Gemm& g, Device d, DType format, const std::vector<float>& a, const std::vector<float>& b,
                        const std::vector<float>& c0) {
    Tensor C = on(d, c0, g.c_rows, g.c_cols);
    GemmScope scope(format);
    linear_gemm(on(d, a, g.a_rows, g.a_cols), on(d, b, g.b_rows, g.b_cols), C, g.ta, g.tb, g.beta, g.a_role, g.b_role);
    return C.to_host();
}

std::vector<float> operand(const Gemm& g, char which) {
    return which == 'a' ? tiled_values(g.a_rows, g.a_cols, 1)
           : which == 'b' ? tiled_values(g.b_rows, g.b_cols, 2) : tiled_values(g.c_rows, g.c_cols, 3);
}

std::vector<float> absolute(std::vector<float> x) {
    for (float& v : x) v = std::fabs(v);
    return x;
}

Results on_cpu(const Gemm& g, DType format) {
    const std::vector<float> a = operand(g, 'a'), b = operand(g, 'b'), c0 = operand(g, 'c');
    return {gemm(g, Device::cpu, format, a, b, c0), gemm(g, Device::cpu, DType::f32, a, b, c0),
            gemm(g, Device::cpu, DType::f32, absolute(a), absolute(b), absolute(c0))};
}

std::vector<float> on_gpu(const Gemm& g, DType format) {
    return gemm(g, Device::cuda, format, operand(g, 'a'), operand(g, 'b'), operand(g, 'c'));
}

// the largest |x - y| / magnitude over the elements
double worst(const std::vector<float>& x, const std::vector<float>& y, const std::vector<float>& magnitude) {
    double w = 0;
    for (size_t i = 0; i < x.size(); i++) w = std::max(w, std::fabs((double)x[i] - y[i]) / magnitude[i]);
    return w;
}

// |GPU - emulation| / sum |a b| allowed: bf16 and f16 products are exact in f32 and both sides sum them in f32,
// in another order; fp8's tensor core accumulates ~14 bits (DeepSeek-V3) before cuBLASLt promotes to f32
constexpr double kHalfTol = 1.0 / (1 << 16), kFp8Tol = 1.0 / (1 << 10);
double tolerance(DType f) { return f == DType::e4m3 ? kFp8Tol : kHalfTol; }

// x (300 tokens, 200 features) -> y (300, 136): no dimension a multiple of 16, so the GPU's padding is exercised
const Gemm kLinear[] = {
    {"forward y = x W^T", 300, 200, 136, 200, 300, 136, false, true, 0.0f, Operand::activation, Operand::weight},
    {"input gradient dx = dy W", 300, 136, 136, 200, 300, 200, false, false, 0.0f, Operand::gradient, Operand::weight},
    {"weight gradient dW += dy^T x", 300, 136, 300, 200, 136, 200, true, false, 1.0f, Operand::gradient,
     Operand::activation},
};

}  // namespace

TEST_SUITE("ch11 np1") {

TEST_CASE("[gpu] cuda: fp8 tile quantisation on the GPU equals the CPU's bit for bit (codes and scales)") {
    SKIP_WITHOUT_GPU();
    const int64_t R = 300, C = 200;  // edge tiles both ways
    std::vector<float> x = tiled_values(R, C, 4);
    for (int64_t c = 128; c < C; c++) x[c] = 0.0f;  // row 0's second 1x128 tile: all zeros (scale 1)
    x[150 * C + 17] = 3e4f;                           // an outlier
    x[151 * C + 18] = 1e-30f;                         // a value far below its tile's quantum: rounds to 0
    const Tensor xd = on(Device::cuda, x, R, C);
    for (DType f : {DType::e4m3, DType::e5m2})
        for (int64_t tile_rows : {int64_t(1), kTile}) {
            INFO(std::string(dtype_name(f)) << ", tiles " << tile_rows << "x128");
            const TileQuant gpu = quantise_tiles(xd, tile_rows, f);
            const TileQuant cpu = quantise_tiles(x.data(), R, C, tile_rows, kTile, f);
            CHECK(gpu.scale == cpu.scale);
            int64_t differ = 0;
            for (size_t i = 0; i < cpu.q.size(); i++) differ += gpu.q[i] != cpu.q[i];
            CHECK(differ == 0);
        }
}

TEST_CASE("lowp GEMM tolerances: each format's emulation is further from f32 than the GPU comparison allows") {
    // so a GPU path that skipped the inputs' rounding, or read a tile's scale for another, fails the cases below
    for (DType f : {DType::bf16, DType::f16, DType::e4m3})
        for (const Gemm& g : kLinear) {
            const Results r = on_cpu(g, f);
            const double rounding = worst(r.emulated, r.f32, r.magnitude);
            INFO(std::string(dtype_name(f)) << " " << g.name << ": the rounding moved the emulation up to " << rounding
                 << " of sum |a b| from f32; tolerance " << tolerance(f));
            CHECK(rounding > 8 * tolerance(f));
        }
}

TEST_CASE("[gpu] cuda: bf16 and f16 GEMMs through cuBLASLt equal the CPU emulation to f32 rounding") {
    SKIP_WITHOUT_GPU();
    for (DType f : {DType::bf16, DType::f16})
        for (const Gemm& g : kLinear) {
            const Results r = on_cpu(g, f);
            const double gpu = worst(on_gpu(g, f), r.emulated, r.magnitude);
            MESSAGE(std::string(dtype_name(f)) << " " << g.name << ": |GPU - emulation| <= " << gpu << " of sum |a b|");
            CHECK(gpu <= kHalfTol);
        }
}

TEST_CASE("[gpu] cuda: fp8 GEMMs through cuBLASLt's block-scaled FP8 equal the CPU emulation (Hopper; refused elsewhere)") {
    SKIP_WITHOUT_GPU();
    for (const Gemm& g : kLinear) {
        INFO("fp8 " << g.name);
        std::vector<float> gpu;
        const std::string refused = error_of([&] { gpu = on_gpu(g, DType::e4m3); });
        if (!refused.empty()) {  // not a Hopper GPU: the reason, naming the flag
            CHECK(contains(refused, "--precision fp8 on the GPU"));
            CHECK(contains(refused, "sm_90"));
            continue;
        }
        const Results r = on_cpu(g, DType::e4m3);
        const double worst_gpu = worst(gpu, r.emulated, r.magnitude);
        MESSAGE("fp8 " << g.name << ": |GPU - emulation| <= " << worst_gpu << " of sum |a b|");
        CHECK(worst_gpu <= kFp8Tol);
    }
}

}  // TEST_SUITE
