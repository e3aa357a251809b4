// test_core.cpp — tests of the common core: dtype conversions (bf16, f16, OCP fp8 e4m3/e5m2) against known
// bit patterns, the Philox RNG against its published test vectors, errors, Tensor views, the tagged
// allocator's byte accounting and its out-of-memory message, and the watchdog's wait (watchdog.hpp).
//
// Playbook: "Mixed precision training" (number formats) and "Memory usage in Transformers" (counting bytes).
//   make test CH=00        or   build/bin/tests_00 -ts='ch00 np1'
//
// Expected codes were derived from the formats by hand and cross-checked: bf16 with torch
// (x.to(torch.bfloat16)), f16 with numpy.float16, fp8 with a nearest-value search over all 256 codes.
#include "../../common/core.hpp"

// The library's throwing CHECK, captured here because testing.hpp replaces CHECK with doctest's.
static const int kLibraryCheckLine = __LINE__ + 1;
static void library_check_positive(int v) { CHECK(v > 0, "v = %d must be positive", v); }

#include <cmath>
#include <cstring>
#include <ios>
#include <limits>

#include "../../common/config.hpp"
#include "../../common/watchdog.hpp"
#include "../testing.hpp"

using namespace penta;

namespace {

using testing::bits;  // testing.hpp
using testing::f32;
const float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

// Reference fp8 encoder by brute force: the nearest of all finite codes, ties to the even code (its last
// bit is the mantissa's last bit). `virtual_next` is the value one step above max finite if the exponent
// range were unbounded: rounding to it means overflow.
uint8_t fp8_nearest(float x, float (*decode)(uint8_t), uint8_t max_code, float virtual_next, uint8_t overflow) {
    double a = std::fabs((double)x), best_d = std::fabs(a - virtual_next);
    int best = 256;
    for (int c = 0; c <= max_code; c++) {
        double d = std::fabs(a - decode((uint8_t)c));
        if (d < best_d || (d == best_d && c % 2 == 0)) best_d = d, best = c;
    }
    uint8_t code = best == 256 ? overflow : (uint8_t)best;
    return std::signbit(x) ? (uint8_t)(code | 0x80) : code;
}
}  // namespace

TEST_SUITE("ch00 np1") {

TEST_CASE("bf16 conversion: exact values, ties to even, subnormals, overflow, NaN") {
    // playbook: 000.12.6 003.6.2 — bf16's layout: 1 sign, 8 exponent (f32's range), 7 mantissa bits
    CHECK(f32_to_bf16(1.0f) == 0x3F80);
    CHECK(f32_to_bf16(-2.0f) == 0xC000);
    CHECK(f32_to_bf16(0.0f) == 0x0000);
    CHECK(f32_to_bf16(-0.0f) == 0x8000);
    // the 16 dropped bits decide: exactly half -> even neighbour, both directions; a hair above -> up
    CHECK(f32_to_bf16(f32(0x3F808000)) == 0x3F80);
    CHECK(f32_to_bf16(f32(0x3F818000)) == 0x3F82);
    CHECK(f32_to_bf16(f32(0x3F808001)) == 0x3F81);
    CHECK(f32_to_bf16(f32(0x3F807FFF)) == 0x3F80);
    // f32 subnormals become bf16 subnormals (no flush to zero), ties to even there too
    CHECK(f32_to_bf16(f32(0x00008000)) == 0x0000);
    CHECK(f32_to_bf16(f32(0x00018000)) == 0x0002);
    CHECK(f32_to_bf16(f32(0x00000001)) == 0x0000);
    CHECK(f32_to_bf16(f32(0x007FFFFF)) == 0x0080);  // largest subnormal rounds up to the smallest normal
    // rounding past the largest finite value gives inf
    CHECK(f32_to_bf16(f32(0x7F7F7FFF)) == 0x7F7F);
    CHECK(f32_to_bf16(f32(0x7F7FFFFF)) == 0x7F80);
    CHECK(f32_to_bf16(kInf) == 0x7F80);
    CHECK(f32_to_bf16(-kInf) == 0xFF80);
    CHECK(std::isnan(bf16_to_f32(f32_to_bf16(kNaN))));
    CHECK(std::isnan(bf16_to_f32(f32_to_bf16(f32(0x7F800001)))));  // NaN payload below bf16's bits
    CHECK(bf16_to_f32(0x3F80) == 1.0f);
    CHECK(bf16_to_f32(0xFF80) == -kInf);
    CHECK(bits(bf16_to_f32(0x8000)) == 0x80000000u);
}

TEST_CASE("bf16 conversion matches the add-and-truncate rounding of every framework") {
    // (bits + 0x7FFF + lsb) >> 16 is round-to-nearest-even on the raw bits for every non-NaN f32
    for (uint64_t i = 0; i < 200000; i++) {
        uint32_t u = philox4x32(5, 0, i).v[0];
        if (std::isnan(f32(u))) continue;
        uint16_t expect = (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1)) >> 16);
        if (f32_to_bf16(f32(u)) != expect) {
            CHECK_MESSAGE(false, "f32 bits " << std::hex << u);
            break;
        }
    }
}

TEST_CASE("f16 conversion: exact values, ties to even, subnormals, overflow, NaN") {
    // playbook: 000.12.6 — f16's layout: 5 exponent, 10 mantissa bits, overflow at 65520
    CHECK(f32_to_f16(1.0f) == 0x3C00);
    CHECK(f32_to_f16(-0.0f) == 0x8000);
    CHECK(f32_to_f16(0.1f) == 0x2E66);
    CHECK(f32_to_f16(65504.0f) == 0x7BFF);
    CHECK(f32_to_f16(65519.0f) == 0x7BFF);
    CHECK(f32_to_f16(65520.0f) == 0x7C00);  // halfway to 65536, whose mantissa is even: overflow
    CHECK(f32_to_f16(1e6f) == 0x7C00);
    CHECK(f32_to_f16(-kInf) == 0xFC00);
    CHECK(f32_to_f16(1.0f + std::ldexp(1.0f, -11)) == 0x3C00);      // tie, down to even
    CHECK(f32_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3C02);  // tie, up to even
    CHECK(f32_to_f16(2.0f - std::ldexp(1.0f, -12)) == 0x4000);      // carry into the exponent
    // subnormals: quantum 2^-24
    CHECK(f32_to_f16(std::ldexp(1.0f, -14)) == 0x0400);
    CHECK(f32_to_f16(std::ldexp(1.0f, -24)) == 0x0001);
    CHECK(f32_to_f16(std::ldexp(1.0f, -25)) == 0x0000);                         // half of min: tie -> 0
    CHECK(f32_to_f16(-std::ldexp(1.0f, -25)) == 0x8000);
    CHECK(f32_to_f16(std::ldexp(1.0f + std::ldexp(1.0f, -10), -25)) == 0x0001);  // just above half
    CHECK(f32_to_f16(3 * std::ldexp(1.0f, -25)) == 0x0002);                     // 1.5 quanta -> 2
    CHECK(f32_to_f16(1023.5f * std::ldexp(1.0f, -24)) == 0x0400);  // largest subnormal -> smallest normal
    CHECK(f16_to_f32(0x0001) == std::ldexp(1.0f, -24));
    CHECK(f16_to_f32(0x03FF) == 1023 * std::ldexp(1.0f, -24));
    CHECK(f16_to_f32(0x7BFF) == 65504.0f);
    CHECK(f16_to_f32(0xFC00) == -kInf);
    CHECK(std::isnan(f16_to_f32(0x7C01)));
    CHECK(std::isnan(f16_to_f32(f32_to_f16(kNaN))));
    CHECK((f32_to_f16(-kNaN) & 0x7E00) == 0x7E00);  // NaN out is quiet
}

TEST_CASE("e4m3 conversion: OCP FP8 values, rounding, subnormals and saturation") {
    // playbook: 000.12.6 — e4m3's values and saturation at 448
    CHECK(f32_to_e4m3(1.0f) == 0x38);
    CHECK(f32_to_e4m3(0.5f) == 0x30);
    CHECK(f32_to_e4m3(240.0f) == 0x77);
    CHECK(f32_to_e4m3(448.0f) == 0x7E);
    CHECK(f32_to_e4m3(-448.0f) == 0xFE);
    CHECK(f32_to_e4m3(-0.0f) == 0x80);
    CHECK(f32_to_e4m3(1.0625f) == 0x38);  // tie between 1.0 and 1.125 -> even mantissa 000
    CHECK(f32_to_e4m3(1.1875f) == 0x3A);  // tie between 1.125 and 1.25 -> even mantissa 010
    CHECK(f32_to_e4m3(1.9375f) == 0x40);  // tie above 1.875 carries into the exponent: 2.0
    // subnormals: smallest normal 2^-6, quantum 2^-9
    const float q = std::ldexp(1.0f, -9);
    CHECK(f32_to_e4m3(std::ldexp(1.0f, -6)) == 0x08);
    CHECK(f32_to_e4m3(q) == 0x01);
    CHECK(f32_to_e4m3(7 * q) == 0x07);
    CHECK(f32_to_e4m3(0.5f * q) == 0x00);  // half the smallest subnormal: tie -> 0
    CHECK(f32_to_e4m3(-0.5f * q) == 0x80);
    CHECK(f32_to_e4m3(0.5001f * q) == 0x01);
    CHECK(f32_to_e4m3(1.5f * q) == 0x02);
    CHECK(f32_to_e4m3(2.5f * q) == 0x02);
    CHECK(f32_to_e4m3(7.5f * q) == 0x08);  // largest subnormal -> smallest normal
    // overflow is decided after rounding: 464 is halfway between 448 (1.110b·2^8) and 480 (1.111b·2^8)
    // and goes to the even 448; anything above 464 rounds past max finite.
    const float above_464 = std::nextafter(464.0f, 1000.0f);
    for (bool sat : {true, false}) {
        CAPTURE(sat);
        CHECK(f32_to_e4m3(448.0f, sat) == 0x7E);
        CHECK(f32_to_e4m3(464.0f, sat) == 0x7E);
        CHECK(f32_to_e4m3(above_464, sat) == (sat ? 0x7E : 0x7F));
        CHECK(f32_to_e4m3(480.0f, sat) == (sat ? 0x7E : 0x7F));
        CHECK(f32_to_e4m3(500.0f, sat) == (sat ? 0x7E : 0x7F));
        CHECK(f32_to_e4m3(-500.0f, sat) == (sat ? 0xFE : 0xFF));
        CHECK(f32_to_e4m3(1e6f, sat) == (sat ? 0x7E : 0x7F));
        CHECK(f32_to_e4m3(kInf, sat) == (sat ? 0x7E : 0x7F));
        CHECK(f32_to_e4m3(-kInf, sat) == (sat ? 0xFE : 0xFF));
        CHECK(f32_to_e4m3(kNaN, sat) == 0x7F);
        CHECK(f32_to_e4m3(-kNaN, sat) == 0xFF);
    }
    // no infinities: the top binade is finite except S.1111.111
    CHECK(e4m3_to_f32(0x78) == 256.0f);
    CHECK(e4m3_to_f32(0x7E) == 448.0f);
    CHECK(e4m3_to_f32(0x01) == q);
    CHECK(bits(e4m3_to_f32(0x80)) == 0x80000000u);
    CHECK(std::isnan(e4m3_to_f32(0x7F)));
    CHECK(std::isnan(e4m3_to_f32(0xFF)));
}

TEST_CASE("e5m2 conversion: OCP FP8 values, rounding, subnormals and saturation") {
    // playbook: 000.12.6 — e5m2's values
    CHECK(f32_to_e5m2(1.0f) == 0x3C);
    CHECK(f32_to_e5m2(-0.0f) == 0x80);
    CHECK(f32_to_e5m2(1.125f) == 0x3C);  // tie -> even mantissa 00
    CHECK(f32_to_e5m2(1.375f) == 0x3E);  // tie -> even mantissa 10
    CHECK(f32_to_e5m2(1.875f) == 0x40);  // tie above 1.75 carries into the exponent
    // subnormals: smallest normal 2^-14, quantum 2^-16
    const float q = std::ldexp(1.0f, -16);
    CHECK(f32_to_e5m2(std::ldexp(1.0f, -14)) == 0x04);
    CHECK(f32_to_e5m2(q) == 0x01);
    CHECK(f32_to_e5m2(0.5f * q) == 0x00);
    CHECK(f32_to_e5m2(1.5f * q) == 0x02);
    CHECK(f32_to_e5m2(3 * q) == 0x03);
    CHECK(f32_to_e5m2(3.5f * q) == 0x04);  // largest subnormal -> smallest normal
    // 61440 is halfway between 57344 (1.11b·2^15) and 65536 (1.00b·2^16, even): overflow
    for (bool sat : {true, false}) {
        CAPTURE(sat);
        CHECK(f32_to_e5m2(57344.0f, sat) == 0x7B);
        CHECK(f32_to_e5m2(std::nextafter(61440.0f, 0.0f), sat) == 0x7B);
        CHECK(f32_to_e5m2(61440.0f, sat) == (sat ? 0x7B : 0x7C));
        CHECK(f32_to_e5m2(1e6f, sat) == (sat ? 0x7B : 0x7C));
        CHECK(f32_to_e5m2(kInf, sat) == (sat ? 0x7B : 0x7C));
        CHECK(f32_to_e5m2(-kInf, sat) == (sat ? 0xFB : 0xFC));
        CHECK(std::isnan(e5m2_to_f32(f32_to_e5m2(kNaN, sat))));
    }
    CHECK(e5m2_to_f32(0x7B) == 57344.0f);
    CHECK(e5m2_to_f32(0x7C) == kInf);
    CHECK(e5m2_to_f32(0xFC) == -kInf);
    CHECK(e5m2_to_f32(0x01) == q);
    for (uint8_t b : {0x7D, 0x7E, 0x7F, 0xFD, 0xFE, 0xFF}) CHECK(std::isnan(e5m2_to_f32(b)));
}

TEST_CASE("fp8 conversion agrees with a nearest-value search over all codes") {
    for (uint64_t i = 0; i < 4000; i++) {
        Philox4 r = philox4x32(9, 1, i);
        // magnitudes from 2^-20 (below every subnormal) to 2^18 (past both maxima), either sign
        float x = (r.v[0] & 1 ? -1.0f : 1.0f) * std::ldexp(u32_to_unit(r.v[1]) + 0.5f, (int)(r.v[2] % 39) - 20);
        for (bool sat : {true, false}) {
            uint8_t e4 = fp8_nearest(x, e4m3_to_f32, 0x7E, 480.0f, sat ? 0x7E : 0x7F);
            uint8_t e5 = fp8_nearest(x, e5m2_to_f32, 0x7B, 65536.0f, sat ? 0x7B : 0x7C);
            if (f32_to_e4m3(x, sat) != e4 || f32_to_e5m2(x, sat) != e5) {
                CHECK_MESSAGE(false, "x = " << x << " sat " << sat << ": e4m3 " << (int)f32_to_e4m3(x, sat)
                                           << " vs " << (int)e4 << ", e5m2 " << (int)f32_to_e5m2(x, sat)
                                           << " vs " << (int)e5);
                return;
            }
        }
    }
}

TEST_CASE("every non-NaN code of every narrow dtype round-trips through f32") {
    int bad = 0;
    for (uint32_t c = 0; c < 65536; c++) {
        uint16_t h = (uint16_t)c;
        if (!std::isnan(bf16_to_f32(h)) && f32_to_bf16(bf16_to_f32(h)) != h) bad++;
        if (!std::isnan(f16_to_f32(h)) && f32_to_f16(f16_to_f32(h)) != h) bad++;
    }
    // playbook: 000.12.6 — every code of every narrow format round-trips
    CHECK(bad == 0);
    int nan4 = 0, nan5 = 0;
    for (uint32_t c = 0; c < 256; c++) {
        uint8_t b = (uint8_t)c;
        CAPTURE(c);
        if (std::isnan(e4m3_to_f32(b))) {
            nan4++;
        } else {
            CHECK(f32_to_e4m3(e4m3_to_f32(b), true) == b);
            CHECK(f32_to_e4m3(e4m3_to_f32(b), false) == b);
        }
        if (std::isnan(e5m2_to_f32(b))) {
            nan5++;
        } else {
            CHECK(f32_to_e5m2(e5m2_to_f32(b), false) == b);
            if (!std::isinf(e5m2_to_f32(b))) CHECK(f32_to_e5m2(e5m2_to_f32(b), true) == b);
        }
    }
    CHECK(nan4 == 2);  // only S.1111.111
    CHECK(nan5 == 6);  // S.11111.{01,10,11}
}

TEST_CASE("Philox4x32-10 reproduces the published test vectors") {
    // Random123's known answers; our (seed, stream, index) is (key, counter words 2-3, counter words 0-1)
    Philox4 z = philox4x32(0, 0, 0);
    CHECK(z.v[0] == 0x6627e8d5u);
    CHECK(z.v[1] == 0xe169c58du);
    CHECK(z.v[2] == 0xbc57ac4cu);
    CHECK(z.v[3] == 0x9b00dbd8u);
    Philox4 ones = philox4x32(~0ull, ~0ull, ~0ull);
    CHECK(ones.v[0] == 0x408f276du);
    CHECK(ones.v[3] == 0x6d5451fdu);
    Philox4 pi = philox4x32(0x299f31d0a4093822ull, 0x0370734413198a2eull, 0x85a308d3243f6a88ull);
    CHECK(pi.v[0] == 0xd16cfe09u);
    CHECK(pi.v[1] == 0x94fdccebu);
    CHECK(pi.v[2] == 0x5001e420u);
    CHECK(pi.v[3] == 0x24126ea1u);
}

TEST_CASE("counter RNG: a pure function of (seed, stream, index)") {
    CHECK(rng_uniform(42, 7, 1000) == rng_uniform(42, 7, 1000));
    CHECK(rng_normal(42, 7, 1000) == rng_normal(42, 7, 1000));
    CHECK(rng_uniform(42, 7, 1000) != rng_uniform(42, 8, 1000));
    CHECK(rng_uniform(42, 7, 1000) != rng_uniform(42, 7, 1001));
    CHECK(rng_uniform(42, 7, 1000) != rng_uniform(43, 7, 1000));
    CHECK(rng_uniform(1, 2, 3ull << 32) != rng_uniform(1, 2, 3));  // the index's high word counts too

    const int n = 100000;
    double s = 0, s2 = 0, su = 0;
    float umin = 1, umax = 0;
    for (int i = 0; i < n; i++) {
        double z = rng_normal(3, 11, (uint64_t)i);
        s += z;
        s2 += z * z;
        float u = rng_uniform(3, 12, (uint64_t)i);
        su += u;
        umin = std::min(umin, u);
        umax = std::max(umax, u);
    }
    double mean = s / n, var = s2 / n - mean * mean;
    CHECK(std::fabs(mean) < 0.02);  // ~6 standard errors
    CHECK(std::fabs(var - 1) < 0.03);
    CHECK(std::fabs(su / n - 0.5) < 0.01);
    CHECK(umin > 0.0f);
    CHECK(umax < 1.0f);
}

TEST_CASE("name_stream is FNV-1a of the name") {
    CHECK(name_stream("") == 0xcbf29ce484222325ull);
    CHECK(name_stream("a") == 0xaf63dc4c8601ec8cull);
    CHECK(name_stream("layers.3.attn.wq") == 0x30de91e3b24fa7f1ull);
    CHECK(name_stream("layers.3.attn.wq") != name_stream("layers.3.attn.wk"));
}

TEST_CASE("a failed library CHECK throws penta::Error naming rank, file and line") {
    try {
        library_check_positive(-3);
        CHECK_MESSAGE(false, "no exception");
    } catch (const Error& e) {
        std::string msg = e.what();
        CHECK(msg.find("[rank 0]") != std::string::npos);
        CHECK(msg.find("test_core.cpp:" + std::to_string(kLibraryCheckLine) + ":") != std::string::npos);
        CHECK(msg.find("v = -3 must be positive") != std::string::npos);
    }
    Tensor t = Tensor::zeros({4, 3}, DType::f32, Device::cpu, Tag::workspace);
    try {
        t.view({5, -1});
        CHECK_MESSAGE(false, "no exception");
    } catch (const Error& e) {
        std::string msg = e.what();
        CHECK(msg.find("[rank 0]") != std::string::npos);
        CHECK(msg.find("tensor.cpp:") != std::string::npos);
        CHECK(msg.find("(5, -1)") != std::string::npos);
    }
}

TEST_CASE("tensor view, slice and flat share the buffer; clone copies") {
    Tensor t = Tensor::zeros({4, 3}, DType::f32, Device::cpu, Tag::workspace);
    CHECK(t.numel() == 12);
    CHECK(t.nbytes() == 48);

    Tensor s = t.slice(1, 2);  // rows 1..2: (2, 3)
    CHECK(s.shape == Shape{2, 3});
    CHECK(s.data() == t.ptr<float>() + 3);
    s.ptr<float>()[0] = 5.0f;
    CHECK(t.ptr<float>()[3] == 5.0f);

    Tensor v = t.view({3, -1});  // (3, 4)
    CHECK(v.shape == Shape{3, 4});
    CHECK(v.data() == t.data());
    CHECK(t.view({-1}).shape == Shape{12});
    CHECK_THROWS_AS(t.view({5, 2}), Error);
    CHECK_THROWS_AS(t.view({-1, -1}), Error);
    CHECK_THROWS_AS(t.slice(3, 2), Error);
    CHECK_THROWS_AS(t.flat(10, 3), Error);

    Tensor f = t.flat(2, 5);
    CHECK(f.shape == Shape{5});
    CHECK(f.ptr<float>()[1] == 5.0f);

    Tensor c = t.clone(Device::cpu, Tag::workspace);
    CHECK(c.data() != t.data());
    CHECK(c.to_host() == t.to_host());
    c.ptr<float>()[3] = 7.0f;
    CHECK(t.ptr<float>()[3] == 5.0f);

    Tensor h = Tensor::zeros({2}, DType::bf16, Device::cpu, Tag::workspace);
    CHECK(h.nbytes() == 4);
    CHECK_THROWS_AS(h.ptr<float>(), Error);  // typed access must match the dtype
}

TEST_CASE("allocator counts exactly the bytes of each tag; views allocate nothing") {
    const MemStats& st = mem_stats(Device::cpu);
    const int optim = (int)Tag::optim, grads = (int)Tag::grads;
    mem_reset_peak(Device::cpu);
    const int64_t cur0 = st.current[optim], grads0 = st.current[grads], total0 = st.total_current;
    CHECK(st.peak[optim] == cur0);
    {
        Tensor a = Tensor::empty({3, 5}, DType::f32, Device::cpu, Tag::optim);
        // playbook: 000.02.3 — a tag's current bytes = exactly the tensors' bytes
        CHECK(st.current[optim] == cur0 + 60);
        CHECK(st.total_current == total0 + 60);
        CHECK(st.current[grads] == grads0);
        {
            Tensor b = Tensor::zeros({7}, DType::bf16, Device::cpu, Tag::optim);
            CHECK(st.current[optim] == cur0 + 74);
            CHECK(st.peak[optim] == cur0 + 74);
            Tensor e = Tensor::empty({0, 4}, DType::e4m3, Device::cpu, Tag::optim);
            CHECK(st.current[optim] == cur0 + 74);
        }
        CHECK(st.current[optim] == cur0 + 60);
        CHECK(st.peak[optim] == cur0 + 74);
        CHECK(st.total_peak >= total0 + 74);

        Tensor v = a.view({15}), s = a.slice(1, 1), f = a.flat(2, 3), copy = a;
        CHECK(st.current[optim] == cur0 + 60);
        a = Tensor();  // the views keep the buffer alive and counted
        CHECK(st.current[optim] == cur0 + 60);
    }
    CHECK(st.current[optim] == cur0);
    CHECK(st.total_current == total0);
    CHECK(st.peak[optim] == cur0 + 74);
    mem_reset_peak(Device::cpu);
    CHECK(st.peak[optim] == cur0);
    CHECK(st.total_peak == total0);

    // from_host converts through workspace scratch and keeps only the tagged result
    const int64_t ws0 = st.current[(int)Tag::workspace];
    {
        Tensor p = Tensor::from_host({1, 2, 3, 4, 5, 6}, {2, 3}, Device::cpu, Tag::grads, DType::bf16);
        CHECK(st.current[grads] == grads0 + 12);
        CHECK(st.current[(int)Tag::workspace] == ws0);
    }
    CHECK(st.current[grads] == grads0);
}

TEST_CASE("from_host / to_host round-trip low-precision dtypes") {
    // representable values come back exactly; others come back as the conversion functions round them
    const std::vector<float> vals = {1.5f, -0.25f, 3.0f, 0.0f, -448.0f, 0.1f, 1.0625f, -7.3f};
    auto expect = [&](float (*round)(float)) {
        std::vector<float> out;
        for (float v : vals) out.push_back(round(v));
        return out;
    };
    Tensor b = Tensor::from_host(vals, {2, 4}, Device::cpu, Tag::workspace, DType::bf16);
    CHECK(b.dtype == DType::bf16);
    CHECK(b.to_host() == expect([](float v) { return bf16_to_f32(f32_to_bf16(v)); }));
    CHECK(b.to_host()[0] == 1.5f);
    CHECK(b.to_host()[4] == -448.0f);

    Tensor e = Tensor::from_host(vals, {8}, Device::cpu, Tag::workspace, DType::e4m3);
    CHECK(e.dtype == DType::e4m3);
    CHECK(e.nbytes() == 8);
    CHECK(e.to_host() == expect([](float v) { return e4m3_to_f32(f32_to_e4m3(v)); }));
    CHECK(e.to_host()[6] == 1.0f);  // tie to even
    CHECK(e.ptr<uint8_t>()[4] == 0xFE);

    Tensor h = Tensor::from_host(vals, {8}, Device::cpu, Tag::workspace, DType::f16);
    CHECK(h.to_host() == expect([](float v) { return f16_to_f32(f32_to_f16(v)); }));
}

TEST_CASE("an allocation the machine cannot hold names its tag, its size and the flags that set it") {
    const int64_t before = mem_stats(Device::cpu).total_current;
    const std::string e = testing::error_of([] { Tensor::empty({int64_t(1) << 48}, DType::f32, Device::cpu, Tag::activations); });
    CHECK(testing::contains(e, "out of host memory allocating 1125899906842624 bytes (1048576.00 GiB) for activations"));
    CHECK(testing::contains(e, "--micro-batch × --seq"));
    CHECK(mem_stats(Device::cpu).total_current == before);  // nothing counted for the failed buffer
}

TEST_CASE("watchdog: a wait that ends before the deadline returns and counts its time") {
    const double timeout = comm_timeout(), blocked = comm_blocked_seconds();
    set_comm_timeout(60);
    int polls = 0;
    wait_until([&] { return ++polls == 1000; }, [] { return std::string("a test wait"); });
    // playbook: 003.7.4 — a wait under the watchdog returns before its deadline and counts its time
    CHECK(polls == 1000);
    CHECK(comm_blocked_seconds() >= blocked);
    wait_until([] { return true; }, [] { return std::string("done at once"); });  // no clock read, no time
    set_comm_timeout(timeout);
    CHECK(group_members_str({0, 1, 2, 3}) == "4 ranks: world ranks 0 1 2 3");
    CHECK(group_members_str({5}) == "1 rank: world rank 5");
}

TEST_CASE("flags: an integer is read whole and within its range, never wrapped; RANK:STEP likewise") {
    using testing::contains;
    using testing::error_of;
    int64_t chunks = 1, seed = 0;
    bool sp = false;
    Flags f("test", "flags");
    f.add("pp-chunks", &chunks, "int range (the default)");
    f.add("seed", &seed, "int64 range", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max());
    f.add("sp", &sp, "a bool");
    auto parse = [&](std::vector<std::string> args) {
        args.insert(args.begin(), "test");
        std::vector<char*> av;
        for (std::string& a : args) av.push_back(a.data());
        f.parse((int)av.size(), av.data());
    };
    parse({"--pp-chunks", "2147483647", "--seed=-9223372036854775808"});
    CHECK((chunks == 2147483647 && seed == std::numeric_limits<int64_t>::min()));
    // 4294967298 would be 2 after an int cast: refused by name, as is a value past int64 (strtoll's ERANGE)
    CHECK(contains(error_of([&] { parse({"--pp-chunks", "4294967298"}); }),
                   "--pp-chunks 4294967298 is out of range: at most 2147483647"));
    CHECK(contains(error_of([&] { parse({"--pp-chunks", "-2147483649"}); }), "is out of range: at least -2147483648"));
    CHECK(contains(error_of([&] { parse({"--pp-chunks", "99999999999999999999"}); }), "at most 2147483647"));
    CHECK(contains(error_of([&] { parse({"--seed", "99999999999999999999"}); }), "at most 9223372036854775807"));
    CHECK(contains(error_of([&] { parse({"--pp-chunks", "2x"}); }), "--pp-chunks 2x must be an integer"));
    CHECK(contains(error_of([&] { parse({"--sp=yes"}); }), "--sp=yes must be 0 or 1"));
    CHECK(chunks == 2147483647);  // a refused value changes nothing
    CHECK(parse_rank_step("1:3", "--x") == std::pair<int64_t, int64_t>{1, 3});
    for (const char* bad : {"1", "1:0", "-1:3", "a:b", "1:3x", ":3", "1:", "1:-3"})
        CHECK(contains(error_of([&] { parse_rank_step(bad, "--x"); }), "must be RANK:STEP"));
    CHECK(contains(error_of([] { parse_rank_step("4294967297:1", "--x"); }),
                   "--x '4294967297:1': RANK 4294967297 is out of range: at most 2147483647"));
}

}  // TEST_SUITE
