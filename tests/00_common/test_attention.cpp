// test_attention.cpp — causal GQA attention on the CPU: the naive version against a double-precision
// reference written here, flash (tiled) against naive, finite-difference gradients of both backwards,
// and the key-split attention that context parallelism relies on (its merge, in double here, is chapter
// 06's online_softmax_merge, tested in tests/06_context_parallel/test_online_softmax.cpp).
//
// Playbook: "Flash attention", "Context parallelism". Code under test: common/attention_cpu.cpp.
// Run: build/bin/tests_00 -tc='*attention*'   (or `make test CH=00`)
#include <algorithm>
#include <cmath>
#include <limits>

#include "../testing.hpp"

namespace {

using namespace penta;
using penta::testing::check_close;
using penta::testing::check_gradient;
using penta::testing::dot;
using penta::testing::key_range;
using penta::testing::random_tensor;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct Case {
    int64_t B, Tq, Tk, nh, nkv, hd;
    AttnSpan span;
};

struct Inputs {
    Tensor q, k, v;  // (B, Tq, nh, hd), (B, Tk, nkv, hd), (B, Tk, nkv, hd)
};
Inputs make_inputs(const Case& c, uint64_t seed) {
    return {random_tensor({c.B, c.Tq, c.nh, c.hd}, seed), random_tensor({c.B, c.Tk, c.nkv, c.hd}, seed + 1),
            random_tensor({c.B, c.Tk, c.nkv, c.hd}, seed + 2)};
}

struct Fwd {
    Tensor out, lse;  // (B, Tq, nh, hd), (B, nh, Tq)
};
Fwd forward(bool tiled, const Inputs& in, AttnSpan span, Tensor* probs = nullptr) {
    Fwd f{Tensor::empty(in.q.shape, DType::f32, Device::cpu, Tag::activations),
          Tensor::empty({in.q.size(0), in.q.size(2), in.q.size(1)}, DType::f32, Device::cpu, Tag::activations)};
    if (tiled)
        attention_forward_tiled(in.q, in.k, in.v, f.out, f.lse, span);
    else
        attention_forward_naive(in.q, in.k, in.v, f.out, f.lse, probs, span);
    return f;
}

struct Grads {
    Tensor dq, dk, dv;
};
Grads zero_grads(const Inputs& in) {
    return {Tensor::zeros(in.q.shape, DType::f32, Device::cpu, Tag::grads),
            Tensor::zeros(in.k.shape, DType::f32, Device::cpu, Tag::grads),
            Tensor::zeros(in.v.shape, DType::f32, Device::cpu, Tag::grads)};
}
void backward(bool tiled, const Tensor& dout, const Inputs& in, const Fwd& f, Grads& g, AttnSpan span,
              const Tensor* probs = nullptr) {
    if (tiled)
        attention_backward_tiled(dout, in.q, in.k, in.v, f.out, f.lse, g.dq, g.dk, g.dv, span);
    else
        attention_backward_naive(dout, in.q, in.k, in.v, f.out, f.lse, probs, g.dq, g.dk, g.dv, span);
}

// Straight from the definition, in double: every (b, h, i) on its own, mask written as the rule says.
struct Ref {
    std::vector<float> out, lse, probs;  // (B, Tq, nh, hd), (B, nh, Tq), (B, nh, Tq, Tk)
};
Ref reference(const Case& c, const Inputs& in) {
    auto q = in.q.to_host(), k = in.k.to_host(), v = in.v.to_host();
    Ref r{std::vector<float>(q.size()), std::vector<float>(c.B * c.nh * c.Tq),
          std::vector<float>(c.B * c.nh * c.Tq * c.Tk)};
    const double scale = 1.0 / std::sqrt((double)c.hd);
    for (int64_t b = 0; b < c.B; b++)
        for (int64_t h = 0; h < c.nh; h++) {
            const int64_t g = h / (c.nh / c.nkv);
            for (int64_t i = 0; i < c.Tq; i++) {
                std::vector<double> s(c.Tk, -INFINITY);
                double mx = -INFINITY;
                for (int64_t j = 0; j < c.Tk; j++) {
                    if (c.span.causal && c.span.k_offset + j > c.span.q_offset + i) continue;
                    double acc = 0;
                    for (int64_t e = 0; e < c.hd; e++)
                        acc += (double)q[((b * c.Tq + i) * c.nh + h) * c.hd + e] *
                               k[((b * c.Tk + j) * c.nkv + g) * c.hd + e];
                    s[j] = acc * scale;
                    mx = std::max(mx, s[j]);
                }
                float* lse = &r.lse[(b * c.nh + h) * c.Tq + i];
                float* p = &r.probs[((b * c.nh + h) * c.Tq + i) * c.Tk];
                float* o = &r.out[((b * c.Tq + i) * c.nh + h) * c.hd];
                if (mx == -INFINITY) {  // sees no key: out and probs stay 0
                    *lse = kNegInf;
                    continue;
                }
                double sum = 0;
                for (int64_t j = 0; j < c.Tk; j++) sum += std::exp(s[j] - mx);
                *lse = (float)(mx + std::log(sum));
                for (int64_t e = 0; e < c.hd; e++) {
                    double acc = 0;
                    for (int64_t j = 0; j < c.Tk; j++)
                        acc += std::exp(s[j] - mx) / sum * v[((b * c.Tk + j) * c.nkv + g) * c.hd + e];
                    o[e] = (float)acc;
                }
                for (int64_t j = 0; j < c.Tk; j++) p[j] = (float)(std::exp(s[j] - mx) / sum);
            }
        }
    return r;
}

// lse may hold -inf: those must match exactly, the finite ones closely
void check_lse(std::vector<float> a, std::vector<float> b, double rtol, const std::string& what) {
    REQUIRE(a.size() == b.size());
    for (size_t i = 0; i < a.size(); i++) {
        CHECK_MESSAGE((a[i] == kNegInf) == (b[i] == kNegInf), what << ": lse[" << i << "] is " << a[i]
                                                                  << ", expected " << b[i]);
        if (a[i] == kNegInf || b[i] == kNegInf) a[i] = b[i] = 0.0f;
    }
    check_close(a, b, rtol, 1e-6, what);
}

std::string name(const Case& c) {
    return "B" + std::to_string(c.B) + " Tq" + std::to_string(c.Tq) + " Tk" + std::to_string(c.Tk) + " nh" +
           std::to_string(c.nh) + " nkv" + std::to_string(c.nkv) + " hd" + std::to_string(c.hd) + " offsets " +
           std::to_string(c.span.q_offset) + "/" + std::to_string(c.span.k_offset) +
           (c.span.causal ? " causal" : " full");
}

// the two key ranges' gradients put back in key order (B, Tk1 + Tk2, nkv, hd)
std::vector<float> concat_keys(const Tensor& a, const Tensor& b) {
    auto ha = a.to_host(), hb = b.to_host();
    const int64_t B = a.size(0), ra = a.numel() / B, rb = b.numel() / B;
    std::vector<float> all;
    for (int64_t i = 0; i < B; i++) {
        all.insert(all.end(), ha.begin() + i * ra, ha.begin() + (i + 1) * ra);
        all.insert(all.end(), hb.begin() + i * rb, hb.begin() + (i + 1) * rb);
    }
    return all;
}

// shapes that are not multiples of the 32-wide tiles, GQA/MQA/MHA, Tq != Tk, spans with empty rows
const Case kTiledCases[] = {
    {1, 37, 37, 4, 2, 8, {0, 0, true}},
    {2, 70, 70, 4, 1, 16, {0, 0, true}},
    {1, 45, 70, 4, 4, 8, {50, 10, true}},  // queries at 50..94 see a prefix of keys at 10..79
    {1, 40, 33, 4, 2, 8, {0, 20, true}},   // queries 0..19 come before every key: out 0, lse -inf
    {1, 37, 70, 4, 2, 8, {0, 0, false}},
};

}  // namespace

TEST_SUITE("ch00 np1") {

TEST_CASE("attention naive forward matches a double-precision reference") {
    std::vector<Case> cases;
    for (int64_t nkv : {4, 2, 1})
        for (bool causal : {true, false}) {
            cases.push_back({2, 5, 5, 4, nkv, 8, {0, 0, causal}});
            cases.push_back({2, 9, 9, 4, nkv, 8, {0, 0, causal}});
            cases.push_back({2, 5, 9, 4, nkv, 8, {4, 0, causal}});  // the last 5 queries of 9 tokens
            cases.push_back({2, 7, 6, 4, nkv, 8, {0, 3, causal}});  // causal: queries 0..2 see no key
        }
    uint64_t seed = 100;
    for (const Case& c : cases) {
        Inputs in = make_inputs(c, seed += 3);
        Tensor probs = Tensor::empty({c.B, c.nh, c.Tq, c.Tk}, DType::f32, Device::cpu, Tag::activations);
        Fwd f = forward(false, in, c.span, &probs);
        Ref r = reference(c, in);
        check_close(f.out.to_host(), r.out, 1e-5, 1e-6, "out " + name(c));
        check_lse(f.lse.to_host(), r.lse, 1e-5, "lse " + name(c));
        check_close(probs.to_host(), r.probs, 1e-5, 1e-7, "probs " + name(c));
        // rows that see no key are exactly zero
        auto out = f.out.to_host(), lse = f.lse.to_host();
        int64_t empty_rows = 0;
        for (int64_t b = 0; b < c.B; b++)
            for (int64_t h = 0; h < c.nh; h++)
                for (int64_t i = 0; i < c.Tq; i++) {
                    if (lse[(b * c.nh + h) * c.Tq + i] != kNegInf) continue;
                    empty_rows++;
                    for (int64_t e = 0; e < c.hd; e++)
                        CHECK(out[((b * c.Tq + i) * c.nh + h) * c.hd + e] == 0.0f);
                }
        if (c.span.causal && c.span.k_offset == 3) CHECK(empty_rows == c.B * c.nh * 3);
    }
}

TEST_CASE("attention tiled (flash) forward and backward agree with naive") {
    uint64_t seed = 200;
    for (const Case& c : kTiledCases) {
        Inputs in = make_inputs(c, seed += 4);
        Tensor dout = random_tensor(in.q.shape, seed + 3);
        Fwd fn = forward(false, in, c.span), ft = forward(true, in, c.span);
        check_close(ft.out.to_host(), fn.out.to_host(), 1e-5, 1e-6, "out " + name(c));
        check_lse(ft.lse.to_host(), fn.lse.to_host(), 1e-5, "lse " + name(c));
        Grads gn = zero_grads(in), gt = zero_grads(in);
        backward(false, dout, in, fn, gn, c.span);
        backward(true, dout, in, ft, gt, c.span);
        check_close(gt.dq.to_host(), gn.dq.to_host(), 1e-5, 1e-5, "dq " + name(c));
        check_close(gt.dk.to_host(), gn.dk.to_host(), 1e-5, 1e-5, "dk " + name(c));
        check_close(gt.dv.to_host(), gn.dv.to_host(), 1e-5, 1e-5, "dv " + name(c));
    }
}

TEST_CASE("attention backward (naive and tiled) matches finite differences") {
    // two query and key tiles, GQA, and queries 0..2 that see no key
    const Case c{1, 37, 35, 4, 2, 8, {0, 3, true}};
    for (bool tiled : {false, true}) {
        const std::string v = tiled ? "tiled " : "naive ";
        Inputs in = make_inputs(c, 300);
        Tensor W = random_tensor(in.q.shape, 303);  // loss = dot(out, W), so dout = W
        Fwd f = forward(tiled, in, c.span);
        Grads g = zero_grads(in);
        backward(tiled, W, in, f, g, c.span);
        auto loss = [&] { return dot(forward(tiled, in, c.span).out, W); };
        check_gradient(in.q, g.dq.to_host(), loss, v + "dq");
        check_gradient(in.k, g.dk.to_host(), loss, v + "dk");
        check_gradient(in.v, g.dv.to_host(), loss, v + "dv");
        // queries that see no key get exactly zero gradient, not NaN
        auto dq = g.dq.to_host();
        for (int64_t i = 0; i < 3 * c.nh * c.hd; i++) CHECK(dq[i] == 0.0f);
    }
}

TEST_CASE("attention naive backward: saved probs equal probs recomputed from lse") {
    const Case c{2, 9, 8, 4, 2, 8, {0, 2, true}};
    Inputs in = make_inputs(c, 400);
    Tensor dout = random_tensor(in.q.shape, 404);
    Tensor probs = Tensor::empty({c.B, c.nh, c.Tq, c.Tk}, DType::f32, Device::cpu, Tag::activations);
    Fwd f = forward(false, in, c.span, &probs);
    Grads saved = zero_grads(in), recomputed = zero_grads(in);
    backward(false, dout, in, f, saved, c.span, &probs);
    backward(false, dout, in, f, recomputed, c.span, nullptr);
    check_close(saved.dq.to_host(), recomputed.dq.to_host(), 1e-5, 1e-6, "dq");
    check_close(saved.dk.to_host(), recomputed.dk.to_host(), 1e-5, 1e-6, "dk");
    check_close(saved.dv.to_host(), recomputed.dv.to_host(), 1e-5, 1e-6, "dv");
}

TEST_CASE("attention over two key halves merged with lse equals attention over all keys") {
    // Context parallelism: each part attends to its own keys; merged lse = logaddexp(lse_1, lse_2) and
    // out = sum over parts of exp(lse_part - lse) * out_part. The backward of each part, given the MERGED
    // out and lse, must yield that part's share: dq summed over parts, dk/dv of its own keys.
    const Case cases[] = {{2, 9, 9, 4, 2, 8, {0, 0, true}}, {1, 40, 70, 4, 1, 8, {30, 0, true}}};
    uint64_t seed = 500;
    for (const Case& c : cases)
        for (bool tiled : {false, true}) {
            const std::string what = (tiled ? "tiled " : "naive ") + name(c);
            Inputs in = make_inputs(c, seed += 4);
            Tensor dout = random_tensor(in.q.shape, seed + 3);
            const int64_t split = c.Tk / 2 - 1;
            Inputs part[2] = {{in.q, key_range(in.k, 0, split), key_range(in.v, 0, split)},
                              {in.q, key_range(in.k, split, c.Tk - split), key_range(in.v, split, c.Tk - split)}};
            const AttnSpan spans[2] = {c.span, {c.span.q_offset, c.span.k_offset + split, c.span.causal}};
            Fwd fp[2] = {forward(tiled, part[0], spans[0]), forward(tiled, part[1], spans[1])};

            auto o1 = fp[0].out.to_host(), o2 = fp[1].out.to_host(), l1 = fp[0].lse.to_host(),
                 l2 = fp[1].lse.to_host();
            std::vector<float> out(o1.size()), lse(l1.size());
            for (int64_t b = 0; b < c.B; b++)
                for (int64_t h = 0; h < c.nh; h++)
                    for (int64_t i = 0; i < c.Tq; i++) {
                        const int64_t li = (b * c.nh + h) * c.Tq + i;
                        const double m = std::max(l1[li], l2[li]);
                        const double tot = m + std::log(std::exp(l1[li] - m) + std::exp(l2[li] - m));
                        lse[li] = (float)tot;
                        for (int64_t e = 0; e < c.hd; e++) {
                            const int64_t oi = ((b * c.Tq + i) * c.nh + h) * c.hd + e;
                            out[oi] = (float)(std::exp(l1[li] - tot) * o1[oi] + std::exp(l2[li] - tot) * o2[oi]);
                        }
                    }
            Fwd full = forward(tiled, in, c.span);
            check_close(out, full.out.to_host(), 1e-5, 1e-6, "merged out " + what);
            check_lse(lse, full.lse.to_host(), 1e-5, "merged lse " + what);
            // chapter 06's online_softmax_merge does this merge in f32 (tests/06_context_parallel/test_online_softmax.cpp)

            Fwd merged{Tensor::from_host(out, in.q.shape, Device::cpu),
                       Tensor::from_host(lse, full.lse.shape, Device::cpu)};
            Grads g[2] = {zero_grads(part[0]), zero_grads(part[1])};
            g[1].dq = g[0].dq;  // the parts' dq contributions accumulate into one buffer
            for (int p = 0; p < 2; p++) backward(tiled, dout, part[p], merged, g[p], spans[p]);
            Grads gf = zero_grads(in);
            backward(tiled, dout, in, full, gf, c.span);
            check_close(g[0].dq.to_host(), gf.dq.to_host(), 1e-5, 1e-5, "dq " + what);
            check_close(concat_keys(g[0].dk, g[1].dk), gf.dk.to_host(), 1e-5, 1e-5, "dk " + what);
            check_close(concat_keys(g[0].dv, g[1].dv), gf.dv.to_host(), 1e-5, 1e-5, "dv " + what);
        }
}

TEST_CASE("attention backward accumulates into dq, dk, dv") {
    const Case c{1, 37, 37, 4, 2, 8, {0, 0, true}};
    for (bool tiled : {false, true}) {
        Inputs in = make_inputs(c, 600);
        Tensor dout = random_tensor(in.q.shape, 603);
        Fwd f = forward(tiled, in, c.span);
        Grads once = zero_grads(in), twice = zero_grads(in);
        backward(tiled, dout, in, f, once, c.span);
        backward(tiled, dout, in, f, twice, c.span);
        backward(tiled, dout, in, f, twice, c.span);
        for (Tensor* t : {&once.dq, &once.dk, &once.dv}) scale_inplace(*t, 2.0f);
        check_close(twice.dq.to_host(), once.dq.to_host(), 1e-6, 1e-7, tiled ? "tiled dq" : "naive dq");
        check_close(twice.dk.to_host(), once.dk.to_host(), 1e-6, 1e-7, tiled ? "tiled dk" : "naive dk");
        check_close(twice.dv.to_host(), once.dv.to_host(), 1e-6, 1e-7, tiled ? "tiled dv" : "naive dv");
    }
}

TEST_CASE("attention tiled forward holds a tile of scores, naive the whole (Tq, Tk) matrix") {
    const Case c{1, 256, 256, 2, 1, 8, {0, 0, true}};
    Inputs in = make_inputs(c, 700);
    auto workspace_peak = [&](bool tiled) {
        const int64_t before = mem_stats(Device::cpu).current[(int)Tag::workspace];
        mem_reset_peak(Device::cpu);
        forward(tiled, in, c.span);
        return mem_stats(Device::cpu).peak[(int)Tag::workspace] - before;
    };
    const int64_t scores_bytes = c.Tq * c.Tk * (int64_t)sizeof(float);
    const int64_t naive = workspace_peak(false), tiled = workspace_peak(true);
    CHECK(naive >= scores_bytes);
    // playbook: 000.02.15 003.5.3 000.12.4 — the tiled kernel's workspace peak is under 1/8 of the (Tq, Tk) scores
    CHECK(tiled * 8 < scores_bytes);
}

}  // TEST_SUITE
