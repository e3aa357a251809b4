// test_moe_ops.cpp — the mixture-of-experts ops (ops.hpp, "mixture of experts"): the router's top-k and
// weights against their definition, its backward (renormalised or not, softmax or sigmoid, with a per-sequence
// term) by finite differences, the per-sequence statistics, dispatch and combine with their backwards; then
// the CUDA kernels against the CPU reference (skipped without a GPU).
// Playbook: "Expert parallelism". Run: `make test CH=00`, or `build/bin/tests_00 -ts='ch00 np1' -tc='*moe*'`.
#include <algorithm>
#include <cmath>

#include "../testing.hpp"

using namespace penta;
using namespace penta::testing;

namespace {

Tensor empty(const Shape& s, DType t = DType::f32) { return Tensor::empty(s, t, Device::cpu, Tag::workspace); }
Tensor on_gpu(const Tensor& t) { return t.clone(Device::cuda, Tag::workspace); }

struct Routed {
    Tensor scores, experts, weights;
};
Routed route(const Tensor& logits, const Tensor& bias, int64_t k, bool sigmoid, bool normalize) {
    const int64_t N = logits.size(0), E = logits.size(1);
    const Device d = logits.device();
    Routed r{Tensor::empty({N, E}, DType::f32, d, Tag::workspace), Tensor::empty({N, k}, DType::i32, d, Tag::workspace),
             Tensor::empty({N, k}, DType::f32, d, Tag::workspace)};
    moe_router_forward(logits, bias, sigmoid, normalize, r.scores, r.experts, r.weights);
    return r;
}

// pos (N, k): a random subset of the N k choices kept, each given its own row of M = the kept count
Tensor random_positions(int64_t N, int64_t k, uint64_t seed, int64_t* M) {
    std::vector<int32_t> pos(N * k);
    const std::vector<float> r = random_tensor({N * k}, seed).to_host();
    std::vector<int32_t> order;
    for (int64_t i = 0; i < N * k; i++) order.push_back((int32_t)i);
    std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return r[a] < r[b]; });  // a random order
    *M = 0;
    for (int32_t i : order) pos[i] = r[i] < 1.0f ? (int32_t)(*M)++ : -1;  // roughly 1 in 6 dropped
    return Tensor::from_host_i32(pos, {N, k}, Device::cpu);
}

}  // namespace

TEST_SUITE("ch00 np1") {

TEST_CASE("moe router: top-k of scores + bias, ties to the lower expert, renormalised weights") {
    // one row, E 4: logits 0, ln 2, ln 2, ln 4 -> softmax 1/9, 2/9, 2/9, 4/9
    Tensor logits = Tensor::from_host({0.0f, std::log(2.0f), std::log(2.0f), std::log(4.0f)}, {1, 4}, Device::cpu);
    Routed r = route(logits, Tensor(), 2, false, true);
    check_close(r.scores.to_host(), {1 / 9.f, 2 / 9.f, 2 / 9.f, 4 / 9.f}, 1e-6, 1e-7, "softmax");
    CHECK(r.experts.to_host_i32() == std::vector<int32_t>{3, 1});  // 2/9 twice: the lower expert
    check_close(r.weights.to_host(), {4 / 6.f, 2 / 6.f}, 1e-6, 1e-7, "renormalised over the chosen two");
    // a bias moves the choice, never the weights: expert 0 now wins, weighted by its own score
    Tensor bias = Tensor::from_host({1.0f, 0.0f, 0.0f, 0.0f}, {4}, Device::cpu);
    r = route(logits, bias, 2, false, false);
    CHECK(r.experts.to_host_i32() == std::vector<int32_t>{0, 3});
    check_close(r.weights.to_host(), {1 / 9.f, 4 / 9.f}, 1e-6, 1e-7, "scores, not renormalised");
    r = route(logits, Tensor(), 1, true, false);  // sigmoid scores
    check_close(r.scores.to_host(), {0.5f, 2 / 3.f, 2 / 3.f, 0.8f}, 1e-6, 1e-7, "sigmoid");
    CHECK(r.experts.to_host_i32() == std::vector<int32_t>{3});
    CHECK(contains(error_of([&] { route(logits, Tensor(), 5, false, true); }), "k 5 must be in [1, E 4]"));
}

TEST_CASE("moe router backward by finite differences: softmax and sigmoid, renormalised or not, a per-sequence term") {
    const int64_t B = 2, T = 3, N = B * T, E = 5, k = 2;
    for (bool sigmoid : {false, true})
        for (bool normalize : {true, false}) {
            INFO("sigmoid " << sigmoid << " normalize " << normalize);
            Tensor logits = random_tensor({N, E}, 3, 2.0f), dw = random_tensor({N, k}, 4);
            Tensor aux = random_tensor({B, E}, 5), R = random_tensor({N, E}, 6);
            Routed r = route(logits, Tensor(), k, sigmoid, normalize);
            const std::vector<int32_t> chosen = r.experts.to_host_i32();
            // loss = sum dw · weights + sum over rows of aux[seq] · scores; the choice held fixed (no flip nearby)
            auto loss = [&] {
                Routed q = route(logits, Tensor(), k, sigmoid, normalize);
                REQUIRE(q.experts.to_host_i32() == chosen);
                double l = dot(q.weights, dw);
                const std::vector<float> s = q.scores.to_host(), a = aux.to_host();
                for (int64_t n = 0; n < N; n++)
                    for (int64_t e = 0; e < E; e++) l += (double)a[(n / T) * E + e] * s[n * E + e];
                return l;
            };
            Tensor dlogits = empty({N, E});
            moe_router_backward(dw, r.scores, r.experts, aux, sigmoid, normalize, dlogits);
            check_gradient(logits, dlogits.to_host(), loss, "d logits", 1e-3, 1e-2, 1e-4);
        }
}

TEST_CASE("moe sequence statistics: each sequence's choices per expert and score sums") {
    const int64_t B = 2, T = 3, E = 3;
    Tensor scores = random_tensor({B * T, E}, 8);
    Tensor experts = Tensor::from_host_i32({0, 1, 0, 2, 2, 1, 1, 0, 1, 2, 1, 0}, {B * T, 2}, Device::cpu);
    Tensor counts = empty({B, E}), sums = empty({B, E});
    moe_sequence_stats(scores, experts, counts, sums);
    check_close(counts.to_host(), {2, 2, 2, 2, 3, 1}, 0, 0, "counts");
    const std::vector<float> s = scores.to_host();
    std::vector<float> want(B * E, 0.0f);
    for (int64_t n = 0; n < B * T; n++)
        for (int64_t e = 0; e < E; e++) want[(n / T) * E + e] += s[n * E + e];
    check_close(sums.to_host(), want, 1e-6, 1e-6, "score sums");
}

TEST_CASE("moe dispatch and combine: each kept choice to its row, weighted sums back, and their backwards") {
    const int64_t N = 7, k = 3, h = 5;
    int64_t M = 0;
    Tensor pos = random_positions(N, k, 9, &M);
    const std::vector<int32_t> p = pos.to_host_i32();
    Tensor x = random_tensor({N, h}, 10), w = random_tensor({N, k}, 11), eo = random_tensor({M, h}, 12);
    Tensor sent = empty({M, h});
    moe_dispatch(x, pos, sent);
    const std::vector<float> xs = x.to_host(), ss = sent.to_host(), ws = w.to_host(), es = eo.to_host();
    for (int64_t n = 0; n < N; n++)
        for (int64_t j = 0; j < k; j++)
            if (p[n * k + j] >= 0)
                for (int64_t i = 0; i < h; i++) CHECK(ss[p[n * k + j] * h + i] == xs[n * h + i]);
    // combine against its definition, and both backwards by finite differences
    Tensor y = empty({N, h}), dy = random_tensor({N, h}, 13);
    moe_combine(eo, pos, w, y);
    std::vector<float> want(N * h, 0.0f);
    for (int64_t n = 0; n < N; n++)
        for (int64_t j = 0; j < k; j++)
            if (p[n * k + j] >= 0)
                for (int64_t i = 0; i < h; i++) want[n * h + i] += ws[n * k + j] * es[p[n * k + j] * h + i];
    check_close(y.to_host(), want, 1e-6, 1e-6, "combine");
    Tensor deo = random_tensor({M, h}, 14), dw = empty({N, k});  // overwritten, whatever it held
    moe_combine_backward(dy, eo, pos, w, deo, dw);
    auto combined = [&] {
        Tensor out = empty({N, h});
        moe_combine(eo, pos, w, out);
        return dot(out, dy);
    };
    check_gradient(eo, deo.to_host(), combined, "combine d expert_out", 1e-2, 1e-3, 1e-5);
    check_gradient(w, dw.to_host(), combined, "combine d weights (0 where dropped)", 1e-2, 1e-3, 1e-5);
    Tensor dsent = random_tensor({M, h}, 15), dx = empty({N, h});
    moe_dispatch_backward(dsent, pos, dx);
    auto dispatched = [&] {
        Tensor out = Tensor::zeros({M, h}, DType::f32, Device::cpu, Tag::workspace);
        moe_dispatch(x, pos, out);
        return dot(out, dsent);
    };
    check_gradient(x, dx.to_host(), dispatched, "dispatch d x", 1e-2, 1e-3, 1e-5);
}

TEST_CASE("[gpu] cuda moe ops match cpu: router (softmax and sigmoid, bias), backward, statistics, dispatch and combine") {
    SKIP_WITHOUT_GPU();
    const int64_t B = 3, T = 37, N = B * T, E = 12, k = 3, h = 70;
    Tensor logits = random_tensor({N, E}, 20, 2.0f), bias = random_tensor({E}, 21, 0.1f);
    for (bool sigmoid : {false, true}) {
        Routed c = route(logits, bias, k, sigmoid, !sigmoid), g = route(on_gpu(logits), on_gpu(bias), k, sigmoid, !sigmoid);
        check_close(g.scores.to_host(), c.scores.to_host(), 1e-5, 1e-6, "router scores");
        CHECK(g.experts.to_host_i32() == c.experts.to_host_i32());
        check_close(g.weights.to_host(), c.weights.to_host(), 1e-5, 1e-6, "router weights");
        Tensor dw = random_tensor({N, k}, 22), aux = random_tensor({B, E}, 23);
        Tensor dl = empty({N, E}), gdl = on_gpu(dl);
        moe_router_backward(dw, c.scores, c.experts, aux, sigmoid, !sigmoid, dl);
        moe_router_backward(on_gpu(dw), g.scores, g.experts, on_gpu(aux), sigmoid, !sigmoid, gdl);
        check_close(gdl.to_host(), dl.to_host(), 1e-4, 1e-6, "router d logits");
        Tensor cnt = empty({B, E}), sums = empty({B, E}), gcnt = on_gpu(cnt), gsums = on_gpu(sums);
        moe_sequence_stats(c.scores, c.experts, cnt, sums);
        moe_sequence_stats(g.scores, g.experts, gcnt, gsums);
        check_close(gcnt.to_host(), cnt.to_host(), 0, 0, "sequence counts");
        check_close(gsums.to_host(), sums.to_host(), 1e-5, 1e-5, "sequence score sums");
    }
    int64_t M = 0;
    Tensor pos = random_positions(N, k, 24, &M), gpos = on_gpu(pos);
    Tensor x = random_tensor({N, h}, 25), w = random_tensor({N, k}, 26), eo = random_tensor({M, h}, 27);
    Tensor dy = random_tensor({N, h}, 28);
    Tensor sent = empty({M, h}), gsent = on_gpu(sent);
    moe_dispatch(x, pos, sent);
    moe_dispatch(on_gpu(x), gpos, gsent);
    check_close(gsent.to_host(), sent.to_host(), 0, 0, "dispatch");
    Tensor dx = empty({N, h}), gdx = on_gpu(dx);
    moe_dispatch_backward(eo, pos, dx);
    moe_dispatch_backward(on_gpu(eo), gpos, gdx);
    check_close(gdx.to_host(), dx.to_host(), 1e-6, 1e-6, "dispatch backward");
    Tensor y = empty({N, h}), gy = on_gpu(y);
    moe_combine(eo, pos, w, y);
    moe_combine(on_gpu(eo), gpos, on_gpu(w), gy);
    check_close(gy.to_host(), y.to_host(), 1e-5, 1e-6, "combine");
    Tensor deo = empty({M, h}), dw = empty({N, k}), gdeo = on_gpu(random_tensor({M, h}, 29)), gdw = on_gpu(dw);
    moe_combine_backward(dy, eo, pos, w, deo, dw);
    moe_combine_backward(on_gpu(dy), on_gpu(eo), gpos, on_gpu(w), gdeo, gdw);
    check_close(gdeo.to_host(), deo.to_host(), 1e-6, 1e-6, "combine d expert_out");
    check_close(gdw.to_host(), dw.to_host(), 1e-5, 1e-5, "combine d weights");
}

}  // TEST_SUITE
