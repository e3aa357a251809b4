// test_formats.cpp — the four narrow formats (common/dtype.cpp) bit for bit against references written
// elsewhere: bf16 and f16 against PyTorch's and NumPy's conversions on every one of the 2^16 codes and on
// inputs around every rounding boundary; e4m3 and e5m2 against a decoder written from the OCP FP8 spec's
// field formula (not the encoder's code) on all 2^8 codes, and an encoder that searches that table for the
// nearest value (ties to the even code) with the saturation rules.
// Playbook: "Mixed precision training". Run: `make test CH=11` (build/bin/tests_11 -tc='*format*').
#include <unistd.h>

#include <cmath>
#include <algorithm>
#include <cfloat>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>

#include "../01_single_gpu/torch_testing.hpp"
#include "../testing.hpp"

using namespace penta;
using namespace penta::testing;

namespace {

// f32 inputs that exercise every rounding decision of a format whose codes decode to `values`: each value,
// the exact midpoint to its neighbour (a tie), one f32 ulp either side of it, the specials, and f32 bit
// patterns from the counter RNG (every exponent, so overflow and underflow too)
std::vector<float> boundary_inputs(const std::vector<float>& values) {
    std::vector<float> sorted;
    for (float v : values)
        if (std::isfinite(v)) sorted.push_back(v);
    std::sort(sorted.begin(), sorted.end());
    std::vector<float> in;
    for (size_t i = 0; i + 1 < sorted.size(); i++) {
        const float a = sorted[i], b = sorted[i + 1];
        if (a == b) continue;  // ±0
        const float mid = (float)(((double)a + (double)b) / 2);
        in.insert(in.end(), {a, mid, std::nextafter(mid, -INFINITY), std::nextafter(mid, INFINITY)});
    }
    const float top = sorted.back();  // around the overflow threshold: top + half a quantum rounds away
    for (float x = top; x < top * 1.25f; x = std::nextafter(x, INFINITY) + (x - top) * 0.01f) in.push_back(x);
    in.insert(in.end(), {0.0f, -0.0f, INFINITY, -INFINITY, std::numeric_limits<float>::quiet_NaN(), FLT_MIN,
                         f32(1), f32(0x807FFFFF), FLT_MAX, -FLT_MAX});
    for (uint64_t i = 0; i < 200000; i++) in.push_back(f32(philox4x32(11, 0, i).v[0]));
    std::vector<float> neg;
    for (float x : in) neg.push_back(-x);
    in.insert(in.end(), neg.begin(), neg.end());
    return in;
}

// Python's conversions: decode every code of `fmt` (bf16 by torch, f16 by numpy), encode `inputs`
void python_reference(const std::string& py, const std::string& fmt, const std::vector<float>& inputs,
                      std::vector<float>& decoded, std::vector<uint16_t>& encoded) {
    const std::string dir = "/tmp/penta_formats_" + std::to_string(getpid());
    const std::string in = dir + "_in.f32", dec = dir + "_dec.f32", enc = dir + "_enc.u16";
    std::ofstream(in, std::ios::binary).write((const char*)inputs.data(), inputs.size() * 4);
    const std::string script =
        fmt == "bf16"
            ? "import numpy as np, torch, sys\n"
              "c = torch.from_numpy(np.arange(65536, dtype=np.int32).astype(np.int16)).view(torch.bfloat16)\n"
              "c.float().numpy().tofile(sys.argv[2])\n"
              "x = torch.from_numpy(np.fromfile(sys.argv[1], dtype=np.float32))\n"
              "x.to(torch.bfloat16).view(torch.int16).numpy().tofile(sys.argv[3])\n"
            : "import numpy as np, sys\n"
              "np.arange(65536, dtype=np.uint16).view(np.float16).astype(np.float32).tofile(sys.argv[2])\n"
              "np.fromfile(sys.argv[1], dtype=np.float32).astype(np.float16).view(np.uint16).tofile(sys.argv[3])\n";
    const std::string cmd = py + " -c '" + script + "' " + in + " " + dec + " " + enc + " 2>&1";
    REQUIRE(std::system(("OPENBLAS_NUM_THREADS=1 " + cmd + " >/dev/null").c_str()) == 0);
    decoded.resize(65536);
    encoded.resize(inputs.size());
    std::ifstream(dec, std::ios::binary).read((char*)decoded.data(), 65536 * 4);
    std::ifstream(enc, std::ios::binary).read((char*)encoded.data(), inputs.size() * 2);
    for (const std::string& f : {in, dec, enc}) std::remove(f.c_str());
}

// the same f32 bit pattern, or both NaN (a NaN's payload is not part of the contract)
bool same(float a, float b) { return (std::isnan(a) && std::isnan(b)) || bits(a) == bits(b); }

void check_16bit(const std::string& fmt, float (*dec)(uint16_t), uint16_t (*enc)(float)) {
    const std::string py = python_with_torch();
    if (py.empty()) SKIP_TEST("no python3 that imports torch and numpy (apt-get install python3-torch), or PENTA_NO_TORCH=1");
    std::vector<float> ours(65536);
    for (uint32_t c = 0; c < 65536; c++) ours[c] = dec((uint16_t)c);
    const std::vector<float> inputs = boundary_inputs(ours);
    std::vector<float> ref_dec;
    std::vector<uint16_t> ref_enc;
    python_reference(py, fmt, inputs, ref_dec, ref_enc);
    int64_t bad = 0;
    for (uint32_t c = 0; c < 65536; c++)
        if (!same(ours[c], ref_dec[c]) && bad++ < 5) INFO(fmt << " code " << c << ": ours " << ours[c] << ", reference " << ref_dec[c]);
    CHECK(bad == 0);
    bad = 0;
    for (size_t i = 0; i < inputs.size(); i++) {
        const uint16_t got = enc(inputs[i]);
        const bool ok = got == ref_enc[i] || (std::isnan(dec(got)) && std::isnan(dec(ref_enc[i])));
        if (!ok && bad++ < 5)
            MESSAGE(fmt << " of " << inputs[i] << " (bits 0x" << std::hex << bits(inputs[i]) << "): ours 0x" << got
                        << ", reference 0x" << ref_enc[i] << std::dec);
    }
    INFO(inputs.size() << " inputs, " << bad << " differ");
    CHECK(bad == 0);
    CHECK(inputs.size() > 400000);  // the boundaries of every code were there
}

// The OCP FP8 spec's decoding, field by field: (-1)^S · 2^(E - bias) · (1 + M / 2^m) for E > 0, and
// (-1)^S · 2^(1 - bias) · (M / 2^m) for E = 0; e5m2's E = 31 is inf (M = 0) or NaN, e4m3's S.1111.111 is NaN.
float spec_decode(uint8_t code, int e_bits, int m_bits) {
    const int bias = (1 << (e_bits - 1)) - 1;
    const int S = code >> 7, E = (code >> m_bits) & ((1 << e_bits) - 1), M = code & ((1 << m_bits) - 1);
    const double sign = S ? -1.0 : 1.0;
    if (e_bits == 5 && E == 31) return M == 0 ? (float)(sign * INFINITY) : NAN;
    if (e_bits == 4 && E == 15 && M == 7) return NAN;
    const double frac = (double)M / (double)(1 << m_bits);
    return (float)(sign * (E == 0 ? std::pow(2.0, 1 - bias) * frac : std::pow(2.0, E - bias) * (1.0 + frac)));
}

// the nearest finite code by search (ties: the even code), then the spec's overflow rule: saturate to ±max,
// or (saturate=false) ±inf in e5m2 / NaN in e4m3 beyond max + half a quantum
uint8_t search_encode(float x, int e_bits, int m_bits, bool saturate) {
    if (std::isnan(x)) return e_bits == 4 ? 0x7F : 0x7E;
    int best = -1;
    double best_d = INFINITY;
    float max = 0;
    for (int c = 0; c < 256; c++) {
        const float v = spec_decode((uint8_t)c, e_bits, m_bits);
        if (!std::isfinite(v)) continue;
        max = std::max(max, v);
        if (v == 0 && (c >> 7) != std::signbit(x)) continue;  // zero keeps the sign
        const double d = std::fabs((double)v - (double)x);
        if (d < best_d || (d == best_d && (c & 1) == 0)) best = c, best_d = d;
    }
    const uint8_t sign = std::signbit(x) ? 0x80 : 0;
    const double quantum = std::pow(2.0, (e_bits == 4 ? 8 : 15) - m_bits);  // the spacing at the top binade
    if (std::fabs((double)x) > max) {
        if (saturate) return sign | (e_bits == 4 ? 0x7E : 0x7B);
        // beyond max + half a quantum, or at that tie when max's code is odd (e5m2's 1.11: the even
        // neighbour is the next binade); e4m3's max 1.110 is even and keeps the tie
        const double edge = max + quantum / 2, ax = std::fabs((double)x);
        if (ax > edge || (ax == edge && e_bits == 5)) return e_bits == 4 ? (sign | 0x7F) : (sign | 0x7C);
    }
    return (uint8_t)best;
}

void check_8bit(const char* name, int e_bits, int m_bits, float (*dec)(uint8_t), uint8_t (*enc)(float, bool)) {
    std::vector<float> values(256);
    for (int c = 0; c < 256; c++) {
        values[c] = spec_decode((uint8_t)c, e_bits, m_bits);
        INFO(name << " code " << c);
        CHECK(same(dec((uint8_t)c), values[c]));
    }
    const std::vector<float> inputs = boundary_inputs(values);
    int64_t bad = 0;
    for (float x : inputs)
        for (bool sat : {true, false}) {
            const uint8_t got = enc(x, sat), want = search_encode(x, e_bits, m_bits, sat);
            const bool ok = got == want || (std::isnan(dec(got)) && std::isnan(dec(want)));
            if (!ok && bad++ < 5)
                MESSAGE(name << (sat ? " saturating" : "") << " of " << x << ": ours " << (int)got << ", search " << (int)want);
        }
    CHECK(bad == 0);
}

}  // namespace

TEST_SUITE("ch11 np1") {

TEST_CASE("formats: bf16 matches PyTorch on all 2^16 codes and every rounding boundary (ties, NaN, inf, subnormals)") {
    check_16bit("bf16", bf16_to_f32, f32_to_bf16);
}

TEST_CASE("formats: f16 matches NumPy on all 2^16 codes and every rounding boundary (overflow to inf at 65520)") {
    check_16bit("f16", f16_to_f32, f32_to_f16);
    CHECK(f32_to_f16(65519.99f) == 0x7BFF);  // rounds down to max 65504
    CHECK(f32_to_f16(65520.0f) == 0x7C00);   // the tie at max + half a quantum goes to the even code: inf
}

TEST_CASE("formats: e4m3 and e5m2 match the OCP spec's field formula on all 2^8 codes and a nearest-value search") {
    check_8bit("e4m3", 4, 3, e4m3_to_f32, f32_to_e4m3);
    check_8bit("e5m2", 5, 2, e5m2_to_f32, f32_to_e5m2);
    CHECK(e4m3_to_f32(0x7E) == 448.0f);
    CHECK(e5m2_to_f32(0x7B) == 57344.0f);
    CHECK(e4m3_to_f32(0x01) == std::ldexp(1.0f, -9));   // the smallest subnormal
    CHECK(e5m2_to_f32(0x01) == std::ldexp(1.0f, -16));
}

}  // TEST_SUITE
