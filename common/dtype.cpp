// dtype.cpp — host conversions between f32 and the narrow float formats: bf16, f16 (IEEE half) and the two
// OCP 8-bit formats e4m3 / e5m2 (OFP8 spec v1.0).
//
// Playbook: "Mixed precision training" — bf16 keeps f32's exponent range with 8 bits of precision, f16
// keeps precision but overflows at 65504 (hence loss scaling), fp8 trades both and needs per-tile scales.
// All four narrow formats are "sign | exponent | mantissa" with a bias and subnormals, so one encoder and
// one decoder, parameterised by the format, serve them all.
// Tested by tests/00_common/test_core.cpp (`make test CH=00`, or `build/bin/tests_00 -tc='*conversion*'`) and,
// bit for bit against references written elsewhere (PyTorch's bf16, NumPy's f16, the OCP spec's field formula
// for e4m3 / e5m2) on every code, by tests/11_mixed_precision/test_formats.cpp (`build/bin/tests_11 -tc='formats*'`).
#include <cstring>

#include "core.hpp"

namespace penta {

namespace {

// A narrow binary float format. has_inf: IEEE-like (exponent all ones = inf/NaN, as bf16, f16, e5m2);
// otherwise OCP e4m3 style: no infinities, only S.1111.111 is NaN, so the top binade holds finite values.
struct Format {
    int exp_bits, man_bits, bias;
    bool has_inf;

    uint32_t sign_bit() const { return 1u << (exp_bits + man_bits); }
    uint32_t all_ones() const { return sign_bit() - 1; }              // magnitude bits all set
    uint32_t inf_code() const { return ((1u << exp_bits) - 1) << man_bits; }
    uint32_t nan_code() const { return has_inf ? inf_code() | (1u << (man_bits - 1)) : all_ones(); }
    uint32_t max_finite() const { return has_inf ? inf_code() - 1 : all_ones() - 1; }
    int emin() const { return 1 - bias; }  // exponent of the smallest normal
};

constexpr Format kBF16{8, 7, 127, true};
constexpr Format kF16{5, 10, 15, true};
constexpr Format kE4M3{4, 3, 7, false};
constexpr Format kE5M2{5, 2, 15, true};

uint32_t float_bits(float x) {
    uint32_t u;
    std::memcpy(&u, &x, 4);
    return u;
}

float bits_float(uint32_t u) {
    float x;
    std::memcpy(&x, &u, 4);
    return x;
}

// f32 -> code of format F, round to nearest, ties to even. Requires F.man_bits <= 23 (narrower than f32),
// so every f32 value is an integer multiple of the quantum it is rounded to.
// saturate=true: anything beyond ±max finite (±inf included) becomes ±max finite; otherwise it becomes
// ±inf, or NaN in a format without infinities.
uint32_t encode(float x, const Format& F, bool saturate) {
    const uint32_t bits = float_bits(x);
    const uint32_t sign = (bits >> 31) ? F.sign_bit() : 0;
    const uint32_t exp_field = (bits >> 23) & 0xFF, man_field = bits & 0x7FFFFF;

    if (exp_field == 0xFF && man_field != 0) {
        // NaN: keep the top of the payload where the format has room for one, and make it quiet
        uint32_t payload = F.has_inf ? man_field >> (23 - F.man_bits) : 0;
        return sign | F.nan_code() | payload;
    }
    if (exp_field == 0xFF) return sign | (saturate ? F.max_finite() : F.has_inf ? F.inf_code() : F.nan_code());

    // |x| = sig * 2^e2 exactly, sig an integer below 2^24 (hidden bit made explicit for normals)
    uint32_t sig = exp_field ? (man_field | 0x800000) : man_field;
    int e2 = exp_field ? (int)exp_field - 150 : -149;
    if (sig == 0) return sign;  // ±0

    // The target exponent is x's own (position of its leading bit), but not below emin: under it the
    // format has only subnormals, whose spacing stays 2^(emin - man_bits). The quantum is 2^q.
    int lead = e2 + 31 - __builtin_clz(sig);
    int t = lead > F.emin() ? lead : F.emin();
    int q = t - F.man_bits;
    // Drop the low `shift` bits of sig. Capped at 31: sig < 2^24, so from 25 on everything is dropped
    // and only the sticky bit remains set (which rounds down, since the guard bit is 0).
    int shift = q - e2;
    if (shift > 31) shift = 31;

    uint32_t kept = sig >> shift;  // |x| truncated to a whole number of quanta
    if (shift > 0) {
        // guard = the first dropped bit (worth half a quantum); sticky = any dropped bit below it.
        // Round up when the dropped part exceeds half (guard && sticky), or equals half exactly (guard,
        // no sticky) and kept is odd: that is the tie going to the even neighbour.
        uint32_t guard = (sig >> (shift - 1)) & 1;
        uint32_t sticky = (sig & ((1u << (shift - 1)) - 1)) != 0;
        kept += guard & (sticky | (kept & 1));
    }

    // kept < 2^man_bits: a subnormal (exponent field 0). kept in [2^m, 2^(m+1)]: a normal whose hidden
    // bit is kept's top bit. Adding (t + bias - 1) << man_bits covers both, and if rounding carried
    // kept up to 2^(m+1) (1.111.. -> 10.000..) the carry lands in the exponent field, as it must —
    // including largest subnormal -> smallest normal.
    uint32_t mag = ((uint32_t)(t + F.bias - 1) << F.man_bits) + kept;

    // Overflow is decided after rounding: a value rounds into range or it does not.
    if (mag > F.max_finite()) mag = saturate ? F.max_finite() : F.has_inf ? F.inf_code() : F.nan_code();
    return sign | mag;
}

// code of format F -> f32 (exact: every value of these formats is an f32)
float decode(uint32_t code, const Format& F) {
    const uint32_t sign = (code & F.sign_bit()) ? 0x80000000u : 0;
    const uint32_t mag = code & F.all_ones();
    const uint32_t exp_field = mag >> F.man_bits, man_field = mag & ((1u << F.man_bits) - 1);

    if (F.has_inf && exp_field == (1u << F.exp_bits) - 1) {
        if (man_field == 0) return bits_float(sign | 0x7F800000u);
        return bits_float(sign | 0x7FC00000u | (man_field << (23 - F.man_bits)));  // quiet, payload kept
    }
    if (!F.has_inf && mag == F.all_ones()) return bits_float(sign | 0x7FC00000u);

    // subnormal: man * 2^(emin - m); normal: (2^m + man) * 2^(exp - bias - m)
    float v = exp_field == 0 ? std::ldexp((float)man_field, F.emin() - F.man_bits)
                             : std::ldexp((float)(man_field | (1u << F.man_bits)),
                                          (int)exp_field - F.bias - F.man_bits);
    return sign ? -v : v;
}

}  // namespace

// bf16 is f32's top half: the same exponent, so rounding can only overflow at the very top (-> inf),
// which is what x.to(torch.bfloat16) does.
uint16_t f32_to_bf16(float x) { return (uint16_t)encode(x, kBF16, false); }
float bf16_to_f32(uint16_t h) { return bits_float((uint32_t)h << 16); }

uint16_t f32_to_f16(float x) { return (uint16_t)encode(x, kF16, false); }
float f16_to_f32(uint16_t h) { return decode(h, kF16); }

uint8_t f32_to_e4m3(float x, bool saturate) { return (uint8_t)encode(x, kE4M3, saturate); }
float e4m3_to_f32(uint8_t b) { return decode(b, kE4M3); }

uint8_t f32_to_e5m2(float x, bool saturate) { return (uint8_t)encode(x, kE5M2, saturate); }
float e5m2_to_f32(uint8_t b) { return decode(b, kE5M2); }

// n values at a time; elements are copied byte-wise, so src and dst need no alignment (a safetensors file's
// tensors start wherever its header ends)
namespace {
template <class Code, class Enc>
void encode_all(const float* src, void* dst, int64_t n, Enc enc) {
    for (int64_t i = 0; i < n; i++) {
        const Code c = enc(src[i]);
        std::memcpy((char*)dst + i * sizeof(Code), &c, sizeof(Code));
    }
}
template <class Code, class Dec>
void decode_all(const void* src, float* dst, int64_t n, Dec dec) {
    for (int64_t i = 0; i < n; i++) {
        Code c;
        std::memcpy(&c, (const char*)src + i * sizeof(Code), sizeof(Code));
        dst[i] = dec(c);
    }
}
}  // namespace

void f32_to_dtype(const float* src, void* dst, DType t, int64_t n) {
    switch (t) {
        case DType::f32: std::memmove(dst, src, (size_t)n * sizeof(float)); return;
        case DType::bf16: encode_all<uint16_t>(src, dst, n, f32_to_bf16); return;
        case DType::f16: encode_all<uint16_t>(src, dst, n, f32_to_f16); return;
        case DType::e4m3: encode_all<uint8_t>(src, dst, n, [](float x) { return f32_to_e4m3(x, true); }); return;
        case DType::e5m2: encode_all<uint8_t>(src, dst, n, [](float x) { return f32_to_e5m2(x, true); }); return;
        case DType::i32: break;
    }
    FAIL("convert: cannot encode f32 as %s", dtype_name(t));
}

void dtype_to_f32(const void* src, DType t, float* dst, int64_t n) {
    switch (t) {
        case DType::f32: std::memmove(dst, src, (size_t)n * sizeof(float)); return;
        case DType::bf16: decode_all<uint16_t>(src, dst, n, bf16_to_f32); return;
        case DType::f16: decode_all<uint16_t>(src, dst, n, f16_to_f32); return;
        case DType::e4m3: decode_all<uint8_t>(src, dst, n, e4m3_to_f32); return;
        case DType::e5m2: decode_all<uint8_t>(src, dst, n, e5m2_to_f32); return;
        case DType::i32: break;
    }
    FAIL("convert: cannot decode %s as f32", dtype_name(t));
}

}  // namespace penta
