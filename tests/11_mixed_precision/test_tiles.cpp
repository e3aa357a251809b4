// test_tiles.cpp — FP8 with fine-grained scales (11_mixed_precision/fp8.hpp): dequantise(quantise(x)) within the
// format's bound in every tile; an outlier spoils only its own tile (per-tensor scaling loses its neighbours'
// small values); the tiled fp8 GEMM equals the exact product of its dequantised inputs up to f32 rounding, its
// right operand in 128x128 blocks (a weight) or 1x128 tiles (an activation); and the limited-precision
// accumulator with promotion every 128 elements of K against one that never promotes.
// Playbook: "Mixed precision training" (FP8, DeepSeek-V3). Run: `make test CH=11` (build/bin/tests_11 -tc='*tile*').
#include <cmath>

#include "../../11_mixed_precision/fp8.hpp"
#include "../testing.hpp"

using namespace penta;
using namespace penta::testing;

namespace {

// n values ~ N(0, 1) from the counter RNG (Box-Muller)
std::vector<float> normal_values(int64_t n, uint64_t seed) {
    std::vector<float> x(n);
    for (int64_t i = 0; i < n; i++) {
        const Philox4 r = philox4x32(seed, 5, (uint64_t)i);
        const double u = (r.v[0] + 1.0) / 4294967297.0, v = r.v[1] / 4294967296.0;
        x[i] = (float)(std::sqrt(-2 * std::log(u)) * std::cos(2 * M_PI * v));
    }
    return x;
}

// the format's bound for one element: half a quantum, which is 2^-(m+1) of |x| in the normal range, and half
// the subnormal spacing (2^(emin - m - 1)) times the tile's scale below it
double bound(float x, float scale, DType f) {
    const int m = f == DType::e4m3 ? 3 : 2, emin = f == DType::e4m3 ? -6 : -14;
    return std::max(std::ldexp(std::fabs((double)x), -(m + 1)), std::ldexp((double)scale, emin - m - 1));
}

double mean_relative_error(const std::vector<float>& x, const std::vector<float>& y, int64_t from, int64_t to) {
    double e = 0;
    for (int64_t i = from; i < to; i++) e += std::fabs((double)y[i] - x[i]) / std::fabs((double)x[i]) / (double)(to - from);
    return e;
}

}  // namespace

TEST_SUITE("ch11 np1") {

TEST_CASE("tile quantisation: dequantise(quantise(x)) within the format's bound in every 1x128 and 128x128 tile") {
    const std::vector<float> x = normal_values(256 * 384, 1);  // (256, 384)
    for (DType f : {DType::e4m3, DType::e5m2})
        for (auto [tr, tc] : {std::pair<int64_t, int64_t>{1, 128}, {128, 128}}) {
            const TileQuant q = quantise_tiles(x.data(), 256, 384, tr, tc, f);
            CHECK(q.scale.size() == (size_t)((256 / tr) * 3));
            const std::vector<float> y = q.dequantise();
            int64_t bad = 0;
            double worst = 0;
            for (int64_t r = 0; r < 256; r++)
                for (int64_t c = 0; c < 384; c++) {
                    const float xi = x[r * 384 + c];
                    const double e = std::fabs((double)y[r * 384 + c] - xi), b = bound(xi, q.scale_of(r, c), f);
                    bad += e > b;
                    worst = std::max(worst, e / b);
                }
            INFO(dtype_name(f) << " tiles " << tr << "x" << tc << ": worst error / bound " << worst);
            // playbook: 000.12.9 — every 1x128 and 128x128 tile within the format's bound
            CHECK(bad == 0);
            CHECK(worst > 0.5);  // the bound is tight: rounding really happened
            for (float s : q.scale) CHECK(s > 0);
        }
    // each tile's largest element lands on the format's largest value: the whole range is used, e4m3's 448
    // and e5m2's 57344 (a gradient tile scaled onto 448 would use 1/128 of e5m2's range)
    for (auto [f, top] : {std::pair<DType, float>{DType::e4m3, 448.0f}, {DType::e5m2, 57344.0f}})
        for (auto [tr, tc] : {std::pair<int64_t, int64_t>{1, 128}, {128, 128}}) {
            CAPTURE(dtype_name(f));
            CAPTURE(tr);
            const TileQuant q = quantise_tiles(x.data(), 256, 384, tr, tc, f);
            std::vector<float> amax(q.scale.size(), 0.0f);
            for (int64_t r = 0; r < 256; r++)
                for (int64_t c = 0; c < 384; c++) {
                    float& m = amax[(r / tr) * 3 + c / tc];
                    m = std::max(m, std::fabs(q.q[r * 384 + c]));
                }
            for (float m : amax) CHECK(m == top);
        }
}

TEST_CASE("tile quantisation: an outlier spoils only its own 1x128 tile; per-tensor scaling loses its neighbours") {
    std::vector<float> x = normal_values(1024, 2);  // one row of 8 tiles
    for (float& v : x) v = std::copysign(std::max(std::fabs(v), 0.05f), v);  // no value near 0: relative errors mean something
    const TileQuant clean = quantise_tiles(x.data(), 1, 1024, 1, 128, DType::e4m3);
    x[3 * 128 + 7] = 1e5f;  // an activation outlier in tile 3
    const TileQuant tiled = quantise_tiles(x.data(), 1, 1024, 1, 128, DType::e4m3);
    const TileQuant tensor = quantise_tiles(x.data(), 1, 1024, 1, 1024, DType::e4m3);
    const std::vector<float> yt = tiled.dequantise(), yp = tensor.dequantise(), yc = clean.dequantise();
    for (int64_t t = 0; t < 8; t++) {
        if (t == 3) continue;
        // the neighbours quantise exactly as without the outlier
        for (int64_t i = t * 128; i < (t + 1) * 128; i++) CHECK(yt[i] == yc[i]);
    }
    const double tiled_err = (mean_relative_error(x, yt, 0, 384) + mean_relative_error(x, yt, 512, 1024)) / 2;
    const double tensor_err = (mean_relative_error(x, yp, 0, 384) + mean_relative_error(x, yp, 512, 1024)) / 2;
    const double own_tile = mean_relative_error(x, yt, 384, 512);
    int64_t flushed = 0;  // neighbours per-tensor scaling rounded to zero
    for (int64_t i = 0; i < 1024; i++) flushed += i / 128 != 3 && yp[i] == 0;
    MESSAGE("outlier 1e5 in tile 3 of 8 (e4m3): mean relative error of the other 7 tiles " << tiled_err
            << " with 1x128 tiles, " << tensor_err << " with one per-tensor scale (" << flushed
            << " of 896 flushed to 0); the outlier's own tile " << own_tile);
    CHECK(tiled_err < 0.04);               // e4m3's 3 mantissa bits: at most 1/16, about 1/40 on average
    // playbook: 000.12.9 003.6.4 — an outlier spoils only its tile; per-tensor scaling loses its neighbours
    CHECK(tensor_err > 10 * tiled_err);    // the outlier's scale pushes the others into subnormals or zero
    CHECK(own_tile > 2 * tiled_err);       // the outlier's tile pays
}

TEST_CASE("tile quantisation: the fp8 GEMM is the exact product of its dequantised tiles, promoted every 128 of K") {
    const int64_t M = 40, N = 300, K = 520;  // edge tiles in every dimension
    const std::vector<float> A = normal_values(M * K, 3), Bt = normal_values(N * K, 4);
    // the right operand a weight (128x128 blocks) or an activation (1x128 tiles, the weight-gradient GEMM's x)
    for (int64_t b_tile_rows : {kTile, int64_t(1)}) {
        std::vector<float> C(M * N, 1.0f);
        fp8_gemm(A.data(), Bt.data(), C.data(), M, N, K, 0.5f, DType::e5m2, DType::e4m3, b_tile_rows);
        const std::vector<float> a = quantise_tiles(A.data(), M, K, 1, kTile, DType::e5m2).dequantise();
        const std::vector<float> b = quantise_tiles(Bt.data(), N, K, b_tile_rows, kTile, DType::e4m3).dequantise();
        double worst_exact = 0, worst_true = 0;
        for (int64_t m = 0; m < M; m++)
            for (int64_t n = 0; n < N; n++) {
                double dq = 0.5, tr = 0.5, mag = 0;  // beta * C = 0.5
                for (int64_t k = 0; k < K; k++) {
                    dq += (double)a[m * K + k] * b[n * K + k];
                    tr += (double)A[m * K + k] * Bt[n * K + k];
                    mag += std::fabs((double)A[m * K + k] * Bt[n * K + k]);
                }
                worst_exact = std::max(worst_exact, std::fabs(C[m * N + n] - dq) / mag);
                worst_true = std::max(worst_true, std::fabs(C[m * N + n] - tr) / mag);
            }
        MESSAGE("fp8 GEMM (e5m2 x e4m3, K " << K << ", right operand in " << b_tile_rows << "x128 tiles): |C - "
                "dequantised product| / sum|a b| <= " << worst_exact << ", |C - f32 product| / sum|a b| <= "
                << worst_true);
        // playbook: 000.12.9 000.12.9b — the fp8 GEMM = the exact product of its dequantised tiles, f32 sums
        CHECK(worst_exact < 1e-6);  // f32 sums: only rounding
        CHECK(worst_true < 0.25);   // e5m2's 1/8 + e4m3's 1/16 per product at most
        CHECK(worst_true > 1e-3);   // and the inputs really were fp8
    }
}

TEST_CASE("tile quantisation: a 14-bit accumulator promoted every 128 elements keeps the sum; one that never promotes drifts") {
    const int64_t K = 4096;
    std::vector<float> a = normal_values(K, 6), b(K, 1.0f);
    for (float& v : a) v = std::fabs(v);  // a positive sum: each addition's rounding grows with the total
    double exact = 0;
    for (float v : a) exact += v;
    const double never = std::fabs(dot_limited(a.data(), b.data(), K, 14, 0) - exact) / exact;
    const double every = std::fabs(dot_limited(a.data(), b.data(), K, 14, kTile) - exact) / exact;
    const double f32 = std::fabs(dot_limited(a.data(), b.data(), K, 22, 0) - exact) / exact;
    MESSAGE("K " << K << ", 14-bit accumulator: relative error " << never << " never promoted, " << every
            << " promoted every 128; (22 bits, never promoted: " << f32 << ")");
    // playbook: 000.12.9 — a 14-bit accumulator promoted every 128 keeps the sum
    CHECK(never > 4 * every);
    CHECK(every < 1e-3);
}

}  // TEST_SUITE
