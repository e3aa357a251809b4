// rope.cpp — RoPE's inverse-frequency table (rope.hpp).
//
// Every step is the f32 operation PyTorch performs, in its order: a Python scalar meeting an f32 tensor is
// rounded to f32 first, and `scalar / tensor` is tensor.reciprocal() * scalar (torch.Tensor.__rtruediv__).
// Each product is rounded before the sum that follows it, as PyTorch rounds every op's result: the Makefile
// compiles this file with -ffp-contract=off, so GCC does not fuse `a * b + c` into one FMA (one rounding).
// Test: `build/bin/tests_01 -ts='ch01 np1' -tc='RoPE*'`.
#include "rope.hpp"

#include <cmath>

namespace penta {

std::vector<float> rope_inv_freq(const LlamaConfig& c) {
    const int64_t hd = c.head_dim(), half = hd / 2;
    const float theta = (float)c.rope_theta;
    std::vector<float> f(half);
    for (int64_t i = 0; i < half; i++) f[i] = 1.0f / powf(theta, (float)(2 * i) / (float)hd);
    if (c.rope_scaling.type != RopeScaling::Type::llama3) return f;

    const RopeScaling& s = c.rope_scaling;
    const float factor = (float)s.factor, low = (float)s.low_freq_factor;
    const float old_len = (float)s.original_max_position;
    // wavelength bounds and the interpolation's span are Python floats (double) before they meet a tensor
    const float low_wavelen = (float)((double)s.original_max_position / s.low_freq_factor);
    const float high_wavelen = (float)((double)s.original_max_position / s.high_freq_factor);
    const float span = (float)(s.high_freq_factor - s.low_freq_factor);
    const float two_pi = (float)(2 * M_PI);
    for (int64_t i = 0; i < half; i++) {
        const float inv = f[i];
        const float wavelen = (1.0f / inv) * two_pi;
        const float scaled = wavelen > low_wavelen ? inv / factor : inv;  // long waves: stretched by factor
        const float smooth = ((1.0f / wavelen) * old_len - low) / span;   // 0 at low_wavelen .. 1 at high
        const float smoothed = (1.0f - smooth) * scaled / factor + smooth * scaled;
        const bool medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
        f[i] = medium ? smoothed : scaled;
    }
    return f;
}

Tensor rope_inv_freq_tensor(const LlamaConfig& c, Device device) {
    const std::vector<float> f = rope_inv_freq(c);
    return Tensor::from_host(f, {(int64_t)f.size()}, device, Tag::workspace);
}

}  // namespace penta
