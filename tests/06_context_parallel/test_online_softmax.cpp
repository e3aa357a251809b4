// test_online_softmax.cpp — chapter 06, the online softmax across key blocks (online_softmax.hpp): two
// attention partials over the two halves of the keys, merged from "no key seen yet", equal attention over
// all keys (GQA, causal spans with empty rows, either merge order); log-sum-exps of ±200 merge without
// overflow; the CUDA kernel equals the CPU merge (GPU builds).
// Playbook: "Context parallelism" (Ring Attention), "Flash attention". Run: `make test CH=06`, or
//   build/bin/tests_06 -tc='*online softmax*'
#include <cmath>

#include "../../06_context_parallel/online_softmax.hpp"
#include "../../common/ops.hpp"
#include "../testing.hpp"

using namespace penta;
using namespace penta::testing;

namespace {

// lse may hold -inf (a row that sees no key): those must match exactly, the finite ones closely
void check_lse(std::vector<float> a, std::vector<float> b, double rtol, const std::string& what) {
    REQUIRE(a.size() == b.size());
    for (size_t i = 0; i < a.size(); i++) {
        CHECK_MESSAGE(std::isinf(a[i]) == std::isinf(b[i]), what << ": lse[" << i << "] is " << a[i] << ", expected "
                                                                   << b[i]);
        if (std::isinf(a[i]) || std::isinf(b[i])) a[i] = b[i] = 0.0f;
    }
    check_close(a, b, rtol, 1e-6, what);
}

Tensor lse_like(const Tensor& q, float value) {  // (B, nh, T)
    return Tensor::from_host(std::vector<float>(q.size(0) * q.size(2) * q.size(1), value),
                             {q.size(0), q.size(2), q.size(1)}, Device::cpu);
}

}  // namespace

TEST_SUITE("ch06 np1") {
    TEST_CASE("online softmax merge of two key halves equals attention over all keys, either order") {
        // (B, Tq, Tk, nh, nkv, hd, span): GQA and MQA; the second's queries 30..69 see keys 0..69 causally, the
        // third's queries 0..19 come before every key of the second half (a part with lse -inf changes nothing)
        struct Case {
            int64_t B, Tq, Tk, nh, nkv, hd;
            AttnSpan span;
        };
        const Case cases[] = {{2, 9, 9, 4, 2, 8, {0, 0, true}}, {1, 40, 70, 4, 1, 8, {30, 0, true}},
                              {1, 40, 40, 2, 2, 4, {0, 0, true}}};
        uint64_t seed = 700;
        for (const Case& c : cases)
            for (bool reversed : {false, true}) {
                const std::string what = "Tq " + std::to_string(c.Tq) + " Tk " + std::to_string(c.Tk) +
                                         (reversed ? " second half first" : " first half first");
                Tensor q = random_tensor({c.B, c.Tq, c.nh, c.hd}, seed++), k = random_tensor({c.B, c.Tk, c.nkv, c.hd}, seed++),
                       v = random_tensor({c.B, c.Tk, c.nkv, c.hd}, seed++);
                Tensor full_out = Tensor::empty(q.shape, DType::f32, Device::cpu, Tag::activations);
                Tensor full_lse = lse_like(q, 0.0f);
                attention_forward_tiled(q, k, v, full_out, full_lse, c.span);

                const int64_t split = c.Tk / 2 - 1;
                const int64_t start[2] = {0, split}, len[2] = {split, c.Tk - split};
                // "no key seen yet": lse -inf, out whatever it holds (NaN: the merge must not read it)
                Tensor out = Tensor::from_host(std::vector<float>(q.numel(), NAN), q.shape, Device::cpu);
                Tensor lse = lse_like(q, -INFINITY);
                for (int i = 0; i < 2; i++) {
                    const int p = reversed ? 1 - i : i;
                    Tensor part_out = Tensor::empty(q.shape, DType::f32, Device::cpu, Tag::activations);
                    Tensor part_lse = lse_like(q, 0.0f);
                    attention_forward_tiled(q, key_range(k, start[p], len[p]), key_range(v, start[p], len[p]),
                                            part_out, part_lse,
                                            {c.span.q_offset, c.span.k_offset + start[p], c.span.causal});
                    online_softmax_merge(out, lse, part_out, part_lse);
                }
                // playbook: 000.07.6 — the lse merge of two key halves = attention over all keys
                check_close(out.to_host(), full_out.to_host(), 1e-5, 1e-6, "merged out " + what);
                check_lse(lse.to_host(), full_lse.to_host(), 1e-5, "merged lse " + what);
            }
    }

    TEST_CASE("online softmax merge: log-sum-exps of +-200 merge without overflow") {
        // Large scores give large log-sum-exps: exp(200) overflows f32 (and exp(-200) underflows to 0), so a merge
        // that adds exp(l1) + exp(l2) without first taking out the larger one returns inf (or -inf) and loses the
        // rows. Two parts of one (B 1, T 3, nh 1, hd 2) output, by hand: lse 200 and 199, -200 and -201, 90 and 3.
        const float l_a[] = {200.0f, -200.0f, 90.0f}, l_b[] = {199.0f, -201.0f, 3.0f};
        const std::vector<float> o_a = {1, 2, 3, 4, 5, 6}, o_b = {-1, 0.5f, 7, -8, 9, 10};
        Tensor out = Tensor::from_host(std::vector<float>(6, NAN), {1, 3, 1, 2}, Device::cpu);
        Tensor lse = Tensor::from_host(std::vector<float>(3, -INFINITY), {1, 1, 3}, Device::cpu);
        online_softmax_merge(out, lse, Tensor::from_host(o_a, {1, 3, 1, 2}, Device::cpu),
                             Tensor::from_host(std::vector<float>(l_a, l_a + 3), {1, 1, 3}, Device::cpu));
        online_softmax_merge(out, lse, Tensor::from_host(o_b, {1, 3, 1, 2}, Device::cpu),
                             Tensor::from_host(std::vector<float>(l_b, l_b + 3), {1, 1, 3}, Device::cpu));
        std::vector<float> want_out(6), want_lse(3);
        for (int t = 0; t < 3; t++) {
            const double m = std::max(l_a[t], l_b[t]), tot = m + std::log(std::exp(l_a[t] - m) + std::exp(l_b[t] - m));
            want_lse[t] = (float)tot;
            for (int e = 0; e < 2; e++)
                want_out[t * 2 + e] =
                    (float)(std::exp(l_a[t] - tot) * o_a[t * 2 + e] + std::exp(l_b[t] - tot) * o_b[t * 2 + e]);
        }
        // f32 holds 200 to 2^-16: exp(l - lse) is that close, 1e-5 relative
        check_lse(lse.to_host(), want_lse, 1e-6, "merged lse of +-200");
        check_close(out.to_host(), want_out, 1e-4, 1e-6, "merged out of lse +-200");
    }

    TEST_CASE("[gpu] cuda online softmax merge matches the cpu merge, -inf rows included") {
        SKIP_WITHOUT_GPU();
        const int64_t B = 2, T = 5, nh = 3, hd = 4;
        std::vector<float> l_h = random_tensor({B, nh, T}, 11).to_host(), lp_h = random_tensor({B, nh, T}, 12).to_host();
        l_h[0] = -INFINITY, lp_h[1] = -INFINITY;  // a row merged for the first time; a part that saw no key
        Tensor out = random_tensor({B, T, nh, hd}, 13), out_p = random_tensor({B, T, nh, hd}, 14);
        Tensor l = Tensor::from_host(l_h, {B, nh, T}, Device::cpu), lp = Tensor::from_host(lp_h, {B, nh, T}, Device::cpu);
        auto on_gpu = [](const Tensor& t) { return t.clone(Device::cuda, Tag::workspace); };
        Tensor out_g = on_gpu(out), l_g = on_gpu(l);
        online_softmax_merge(out, l, out_p, lp);
        online_softmax_merge(out_g, l_g, on_gpu(out_p), on_gpu(lp));
        check_close(out_g.to_host(), out.to_host(), 1e-6, 1e-7, "merged out");
        check_close(l_g.to_host(), l.to_host(), 1e-6, 1e-7, "merged lse");
    }
}  // TEST_SUITE
