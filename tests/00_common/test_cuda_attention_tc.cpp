// test_cuda_attention_tc.cpp — the tensor-core flash attention (common/cuda/attention_tc.cu, bf16 and fp16)
// against the f32 CPU reference on the same (rounded) inputs, forward and backward, with the tolerances
// of 16-bit operands stated below. Skipped without a GPU; scripts/gpu_check.sh runs it on one.
//
// Tolerances: the reference computes in f32 on q, k, v, dout already rounded to bf16 (fp16), so what is
// left is the kernels' own rounding: P and dS rounded to 8 (11) significant bits before their products,
// the outputs and accumulated gradients rounded once. Measured as ‖gpu − ref‖ / ‖ref‖ over the whole
// tensor (METHOD.md: bf16 operands land between 1e-3 and 1e-2): bf16 out ≤ 1e-2, gradients ≤ 2e-2; fp16 a
// quarter of those; lse (f32 statistics of f32 scores) within 1e-3 absolute; rows that see no key give
// out = 0, lse = -inf exactly. Outputs are filled with NaN first, so an element the kernel never writes
// fails; backward runs twice and must give the same bits (no atomics: a race would show).
//   build/bin/tests_00 -ts='ch00 np1' -tc='*cuda*tensor-core*'
#include <cmath>

#include "../testing.hpp"

using namespace penta;
using namespace penta::testing;

namespace {

struct TcCase {
    int64_t B, Tq, Tk, nh, nkv, hd;
    AttnSpan span;
};

const TcCase kTcCases[] = {
    {2, 70, 70, 4, 2, 64, {0, 0, true}},      // causal, more than one 64-query block, GQA 2
    {1, 5, 37, 2, 1, 32, {0, 0, false}},      // no mask, Tq != Tk, a partial key tile
    {1, 50, 20, 2, 2, 16, {0, 40, true}},     // keys after queries 0..39: those rows see nothing
    {2, 33, 96, 3, 1, 128, {64, 0, true}},    // a later query block (context parallelism), group of 3
    {1, 200, 200, 8, 2, 64, {0, 0, true}},    // several key tiles per block, causal skipping
    {1, 130, 130, 2, 1, 128, {0, 0, false}},  // 32-row tiles at 128, GQA 2, no mask
};

// x rounded to `dt` and back: the values the kernel really sees
Tensor rounded(const Tensor& x, DType dt) {
    Tensor n = Tensor::empty(x.shape, dt, Device::cpu, Tag::workspace), back = Tensor::empty(x.shape, DType::f32, Device::cpu, Tag::workspace);
    convert(n, x);
    convert(back, n);
    return back;
}

Tensor to_gpu(const Tensor& x_f32, DType dt) {
    Tensor g = x_f32.clone(Device::cuda, Tag::workspace), n = Tensor::empty(x_f32.shape, dt, Device::cuda, Tag::workspace);
    convert(n, g);
    return n;
}

Tensor nan_gpu(const Shape& s, DType dt) {
    Tensor t = Tensor::empty(s, dt, Device::cuda, Tag::workspace);
    fill(t, NAN);
    return t;
}

// ‖a − b‖ / ‖b‖, and no NaN anywhere in a
void check_rel(const Tensor& gpu, const Tensor& ref, double tol, const std::string& what) {
    const std::vector<float> a = gpu.to_host(), b = ref.to_host();
    REQUIRE(a.size() == b.size());
    double num = 0, den = 0;
    size_t nans = 0;
    for (size_t i = 0; i < a.size(); i++) {
        if (std::isnan(a[i])) nans++;
        num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        den += (double)b[i] * b[i];
    }
    const double rel = std::sqrt(num / std::max(den, 1e-30));
    CHECK_MESSAGE(nans == 0, what << ": " << nans << " NaN elements (never written?)");
    CHECK_MESSAGE(rel <= tol, what << ": relative error " << rel << " > " << tol);
    MESSAGE(what << ": relative error " << rel);
}

void check_case(const TcCase& c, DType dt) {
    const double k = dt == DType::bf16 ? 1.0 : 0.25;  // fp16 keeps 3 more bits
    const std::string what = strfmt("%s B%ld Tq%ld Tk%ld nh%ld nkv%ld hd%ld q@%ld k@%ld %s", dtype_name(dt), (long)c.B,
                                    (long)c.Tq, (long)c.Tk, (long)c.nh, (long)c.nkv, (long)c.hd, (long)c.span.q_offset,
                                    (long)c.span.k_offset, c.span.causal ? "causal" : "full");
    CAPTURE(what);
    const Shape qs{c.B, c.Tq, c.nh, c.hd}, ks{c.B, c.Tk, c.nkv, c.hd}, ls{c.B, c.nh, c.Tq};
    Tensor q = rounded(random_tensor(qs, 101), dt), kk = rounded(random_tensor(ks, 102), dt),
           v = rounded(random_tensor(ks, 103), dt), dout = rounded(random_tensor(qs, 104), dt);
    // the f32 reference on the rounded inputs
    Tensor out = Tensor::zeros(qs, DType::f32, Device::cpu, Tag::workspace), lse = Tensor::zeros(ls, DType::f32, Device::cpu, Tag::workspace);
    attention_forward_tiled(q, kk, v, out, lse, c.span);
    Tensor gq = to_gpu(q, dt), gk = to_gpu(kk, dt), gv = to_gpu(v, dt), gdout = to_gpu(dout, dt);
    Tensor gout = nan_gpu(qs, dt), glse = nan_gpu(ls, DType::f32);
    attention_forward_tiled(gq, gk, gv, gout, glse, c.span);
    check_rel(gout, out, 1e-2 * k, what + " out");
    std::vector<float> l_gpu = glse.to_host(), l_ref = lse.to_host();
    size_t inf_mismatch = 0;
    double worst = 0;
    for (size_t i = 0; i < l_ref.size(); i++) {
        if (std::isinf(l_ref[i]) || std::isinf(l_gpu[i]) || std::isnan(l_gpu[i])) {
            inf_mismatch += !(l_gpu[i] == l_ref[i]);
            continue;
        }
        worst = std::max(worst, std::fabs((double)l_gpu[i] - l_ref[i]));
    }
    CHECK_MESSAGE(inf_mismatch == 0, what << ": " << inf_mismatch << " lse entries differ in being -inf (or NaN)");
    CHECK_MESSAGE(worst <= 1e-3, what << ": lse differs by " << worst);

    // backward from the reference's own out and lse (rounded like the GPU's), gradients starting non-zero
    Tensor out_r = rounded(out, dt);
    Tensor dq = rounded(random_tensor(qs, 105, 0.01f), dt), dk = rounded(random_tensor(ks, 106, 0.01f), dt),
           dv = rounded(random_tensor(ks, 107, 0.01f), dt);
    Tensor gdq = to_gpu(dq, dt), gdk = to_gpu(dk, dt), gdv = to_gpu(dv, dt);
    Tensor gdq2 = to_gpu(dq, dt), gdk2 = to_gpu(dk, dt), gdv2 = to_gpu(dv, dt);
    Tensor glse_ref = lse.clone(Device::cuda, Tag::workspace), gout_r = to_gpu(out_r, dt);
    attention_backward_tiled(dout, q, kk, v, out_r, lse, dq, dk, dv, c.span);
    attention_backward_tiled(gdout, gq, gk, gv, gout_r, glse_ref, gdq, gdk, gdv, c.span);
    attention_backward_tiled(gdout, gq, gk, gv, gout_r, glse_ref, gdq2, gdk2, gdv2, c.span);
    check_rel(gdq, dq, 2e-2 * k, what + " dq (accumulated)");
    check_rel(gdk, dk, 2e-2 * k, what + " dk (accumulated)");
    check_rel(gdv, dv, 2e-2 * k, what + " dv (accumulated)");
    CHECK_MESSAGE(gdq.to_host() == gdq2.to_host(), what << ": dq differs between two identical runs");
    CHECK_MESSAGE(gdk.to_host() == gdk2.to_host(), what << ": dk differs between two identical runs");
    CHECK_MESSAGE(gdv.to_host() == gdv2.to_host(), what << ": dv differs between two identical runs");
}

}  // namespace

TEST_SUITE("ch00 np1") {

TEST_CASE("[gpu] cuda tensor-core attention (bf16, fp16) matches the f32 reference within 16-bit tolerances") {
    SKIP_WITHOUT_GPU();
    for (DType dt : {DType::bf16, DType::f16})
        for (const TcCase& c : kTcCases) check_case(c, dt);
    // a row that sees no key: exactly out = 0 and lse = -inf on the GPU itself
    const TcCase& c = kTcCases[2];
    Tensor out = nan_gpu({c.B, c.Tq, c.nh, c.hd}, DType::bf16), lse = nan_gpu({c.B, c.nh, c.Tq}, DType::f32);
    attention_forward_tiled(to_gpu(random_tensor(out.shape, 1), DType::bf16),
                            to_gpu(random_tensor({c.B, c.Tk, c.nkv, c.hd}, 2), DType::bf16),
                            to_gpu(random_tensor({c.B, c.Tk, c.nkv, c.hd}, 3), DType::bf16), out, lse, c.span);
    auto o = out.to_host(), l = lse.to_host();
    CHECK(std::isinf(l[0]));
    CHECK(l[0] < 0);
    CHECK(o[0] == 0.0f);
    CHECK(std::isfinite(l[c.Tq - 1]));
}

TEST_CASE("[gpu] cuda tensor-core attention refuses what it cannot run, by name") {
    SKIP_WITHOUT_GPU();
    auto g = [](const Shape& s, DType dt) { return Tensor::zeros(s, dt, Device::cuda, Tag::workspace); };
    Tensor lse = g({1, 2, 8}, DType::f32);
    Tensor q = g({1, 8, 2, 24}, DType::bf16), k = g({1, 8, 2, 24}, DType::bf16), o = g({1, 8, 2, 24}, DType::bf16);
    CHECK(contains(error_of([&] { attention_forward_tiled(q, k, k, o, lse); }), "head dims 16, 32, 64 or 128, not 24"));
    Tensor q2 = g({1, 8, 2, 32}, DType::bf16), k16 = g({1, 8, 2, 32}, DType::f16), o2 = g({1, 8, 2, 32}, DType::bf16);
    CHECK(contains(error_of([&] { attention_forward_tiled(q2, k16, k16, o2, lse); }), "k has dtype f16, q bf16"));
    // a view 2 bytes into its buffer cannot be read in 16-byte chunks
    Tensor big = g({1 + 8 * 2 * 32}, DType::bf16), odd = big.flat(1, 8 * 2 * 32).view({1, 8, 2, 32});
    CHECK(contains(error_of([&] { attention_forward_tiled(odd, q2, q2, o2, lse); }), "not 16-byte aligned"));
    // the naive kernel takes f32 only
    Tensor p = g({1, 2, 8, 8}, DType::f32);
    CHECK(contains(error_of([&] { attention_forward_naive(q2, q2, q2, o2, lse, &p); }), "this attention takes f32"));
}

TEST_CASE("attention in bf16 on the CPU is refused by name (the CPU reference is f32)") {
    Tensor hq = Tensor::zeros({1, 8, 2, 32}, DType::bf16, Device::cpu, Tag::workspace);
    Tensor hl = Tensor::zeros({1, 2, 8}, DType::f32, Device::cpu, Tag::workspace);
    CHECK(contains(error_of([&] { attention_forward_tiled(hq, hq, hq, hq, hl); }), "the CPU reference takes f32"));
    Tensor h32 = Tensor::zeros({1, 8, 2, 32}, DType::f32, Device::cpu, Tag::workspace), hp = Tensor::zeros({1, 2, 8, 8}, DType::f32, Device::cpu, Tag::workspace);
    CHECK(contains(error_of([&] { attention_forward_naive(hq, hq, hq, hq, hl, &hp); }), "this attention takes f32"));
    CHECK(contains(error_of([&] { attention_forward_tiled(h32, h32, h32, hq, hl); }), "out has dtype bf16, expected f32"));
}

}  // TEST_SUITE
