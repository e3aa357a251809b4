// cpu_math.hpp — loop helpers of the CPU ops (ops_cpu.cpp, attention_cpu.cpp), written so that the
// loops calling them vectorise: the compiler may not reorder a float sum by itself (that changes its
// rounding), and libm's expf is a call it cannot inline into a vector loop.
// Playbook: "First steps: training on one GPU" (the CPU path of its ops). Tested through the ops that use
// them: `make test CH=00`.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>

namespace penta::cpu {

// sum_{i < n} term(i) in double, over kLanes partial sums. One running sum makes every addition wait for
// the previous one (4 cycles each); independent lanes fill vector accumulators. The tail goes lane by
// lane too, and the lanes are added as a tree, so a row of a few hundred terms has no long chain left.
template <class Term>
inline double sum_f64(int64_t n, Term term) {
    constexpr int kLanes = 16;
    double part[kLanes] = {};
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes)
        for (int j = 0; j < kLanes; j++) part[j] += term(i + j);
    for (int j = 0; i + j < n; j++) part[j] += term(i + j);
    for (int w = kLanes / 2; w > 0; w /= 2)
        for (int j = 0; j < w; j++) part[j] += part[j + w];
    return part[0];
}

// max_{i < n} x[i] for n >= 1, the same way: a max is exact in any order, but one running max is a chain
// of dependent instructions the compiler will not split by itself.
inline float max_f32(const float* x, int64_t n) {
    constexpr int kLanes = 16;
    float part[kLanes];
    for (int j = 0; j < kLanes; j++) part[j] = x[0];
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes)
        for (int j = 0; j < kLanes; j++) part[j] = std::max(part[j], x[i + j]);
    for (int j = 0; i + j < n; j++) part[j] = std::max(part[j], x[i + j]);
    for (int w = kLanes / 2; w > 0; w /= 2)
        for (int j = 0; j < w; j++) part[j] = std::max(part[j], part[j + w]);
    return part[0];
}

// exp(x) in f32 with a body of plain arithmetic (no call, no branch). exp(x) = 2^n exp(r) with
// n = round(x / ln 2) and |r| <= ln(2) / 2, where the degree-7 Taylor polynomial of exp(r) is exact to
// ~5e-9 relative, below f32's own rounding (6e-8). ln 2 is split into a high part with trailing zero bits
// (so n * hi is exact) and a low part, so r keeps all its bits. 2^n is built from its exponent bits.
// Within 1 ulp of the exact value for -87 <= x <= 88; exp(x < -87) = 0 (the exact value is below
// 1.7e-38), exp(x > 88) = inf, NaN stays NaN.
// Vectorises in a loop that stores the results; GCC 12 keeps a loop that converts them to double scalar.
inline float exp_f32(float x) {
    float xc = x < -87.0f ? -87.0f : x;  // keeps 2^n a normal float
    xc = xc > 88.0f ? 88.0f : xc;
    const float round = 12582912.0f;                         // 1.5 * 2^23: adding it rounds to an integer
    const float t = xc * 1.44269504f + round;                // n sits in the low mantissa bits of t
    const float n = t - round;
    const float r = (xc - n * 0.693145751953125f) - n * 1.42860677e-6f;
    float p = 1.0f / 5040;
    p = p * r + 1.0f / 720;
    p = p * r + 1.0f / 120;
    p = p * r + 1.0f / 24;
    p = p * r + 1.0f / 6;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    uint32_t tb;
    std::memcpy(&tb, &t, sizeof tb);
    const uint32_t sb = (tb - 0x4B400000u + 127u) << 23;  // the exponent field of 2^n: n + 127
    float scale;
    std::memcpy(&scale, &sb, sizeof scale);
    const float y = p * scale;
    return x < -87.0f ? 0.0f : (x > 88.0f ? std::numeric_limits<float>::infinity() : y);
}

}  // namespace penta::cpu
