// test_ops.cpp — the CPU ops of ops.hpp checked against their definitions, and every backward checked
// against finite differences of loss = dot(forward output, random weights).
//
// Playbook: "First steps: training on one GPU" — these are the ops of one training step; everything
// later (TP, CP, ZeRO, ...) is tested against them. Attention has its own file (test_attention.cpp).
//   make test CH=00     or     build/bin/tests_00 -ts='ch00 np1' -tc='ops:*'
#include <algorithm>
#include <cmath>

#include "../testing.hpp"

using namespace penta;
using namespace penta::testing;

namespace {

Tensor zeros_like(const Tensor& t) { return Tensor::zeros(t.shape, t.dtype, Device::cpu, Tag::workspace); }
Tensor f32(const std::vector<float>& v, const Shape& s) { return Tensor::from_host(v, s, Device::cpu); }

// C[e] = op(A[e]) @ op(B[e] or the shared B), in double; a and b are stored as in ops.hpp
std::vector<float> ref_matmul(const std::vector<float>& a, const std::vector<float>& b, int64_t batch,
                              int64_t M, int64_t K, int64_t N, bool ta, bool tb, bool shared_b) {
    std::vector<float> c(batch * M * N);
    for (int64_t e = 0; e < batch; e++) {
        const float* A = &a[e * M * K];
        const float* B = &b[shared_b ? 0 : e * K * N];
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double s = 0;
                for (int64_t k = 0; k < K; k++)
                    s += (double)(ta ? A[k * M + i] : A[i * K + k]) * (tb ? B[j * K + k] : B[k * N + j]);
                c[(e * M + i) * N + j] = (float)s;
            }
    }
    return c;
}

std::vector<float> scaled(std::vector<float> v, float s) {
    for (float& x : v) x *= s;
    return v;
}

// Cross-entropy on `device` of logits shifted by `shift` (+1000: exp(z) overflows to inf unless the row max
// is subtracted first; -1000: the sum of exp(z) underflows to 0 and its log to -inf): the loss and the
// gradient against a double-precision softmax of the same f32 (shifted) values.
void check_shifted_cross_entropy(Device device, float shift) {
    CAPTURE(shift);
    const int64_t N = 6, V = 300;
    std::vector<float> z = random_tensor({N, V}, 30, 2.0f).to_host();
    for (float& v : z) v += shift;
    std::vector<int32_t> tg = random_tokens({N}, (int32_t)V, 31).to_host_i32();
    tg[1] = -1;  // one ignored row
    const float gscale = 0.5f;
    Tensor logits = Tensor::from_host(z, {N, V}, device);
    Tensor targets = Tensor::from_host_i32(tg, {N}, device), none;
    Tensor dl = Tensor::zeros({N, V}, DType::f32, device, Tag::workspace);
    const double total = cross_entropy_forward_backward(logits, targets, dl, gscale, -1, none);
    std::vector<float> dwant;
    const double want = cross_entropy_reference(z, V, tg, gscale, dwant);
    CHECK_MESSAGE(std::isfinite(total), "the loss of logits shifted by " << shift << " is " << total);
    CHECK(total == doctest::Approx(want).epsilon(1e-5));
    check_close(dl.to_host(), dwant, 1e-4, 1e-7, strfmt("cross-entropy dlogits, logits shifted by %g", shift));
}

}  // namespace

TEST_SUITE("ch00 np1") {

TEST_CASE("ops: matmul, all transpose combinations, alpha and beta") {
    const int64_t M = 5, K = 7, N = 3;
    for (bool ta : {false, true})
        for (bool tb : {false, true}) {
            std::string what = std::string("matmul ta=") + (ta ? "1" : "0") + " tb=" + (tb ? "1" : "0");
            Tensor A = random_tensor(ta ? Shape{K, M} : Shape{M, K}, 1);
            Tensor B = random_tensor(tb ? Shape{N, K} : Shape{K, N}, 2);
            auto ref = ref_matmul(A.to_host(), B.to_host(), 1, M, K, N, ta, tb, false);
            // beta = 0 overwrites C, even when C holds NaN (an uninitialised buffer may)
            Tensor C = f32(std::vector<float>(M * N, NAN), {M, N});
            matmul(A, B, C, ta, tb);
            check_close(C.to_host(), ref, 1e-5, 1e-5, what);
            Tensor C2 = random_tensor({M, N}, 3);
            auto c0 = C2.to_host();
            matmul(A, B, C2, ta, tb, 0.5f, 2.0f);
            std::vector<float> want(M * N);
            for (int64_t i = 0; i < M * N; i++) want[i] = 0.5f * ref[i] + 2.0f * c0[i];
            check_close(C2.to_host(), want, 1e-5, 1e-5, what + " alpha=0.5 beta=2");
        }
}

TEST_CASE("ops: matmul batched, per-batch and shared B") {
    const int64_t M = 4, K = 6, N = 5, batch = 6;  // batch dims (2, 3)
    for (bool shared : {false, true})
        for (bool ta : {false, true})
            for (bool tb : {false, true}) {
                Tensor A = random_tensor(ta ? Shape{2, 3, K, M} : Shape{2, 3, M, K}, 4);
                Shape bs = tb ? Shape{N, K} : Shape{K, N};
                if (!shared) bs.insert(bs.begin(), {2, 3});
                Tensor B = random_tensor(bs, 5);
                Tensor C = random_tensor({2, 3, M, N}, 6);
                auto c0 = C.to_host();
                matmul(A, B, C, ta, tb, 1.0f, 1.0f);
                auto ref = ref_matmul(A.to_host(), B.to_host(), batch, M, K, N, ta, tb, shared);
                for (size_t i = 0; i < ref.size(); i++) ref[i] += c0[i];
                check_close(C.to_host(), ref, 1e-5, 1e-5,
                            std::string("batched matmul shared=") + (shared ? "1" : "0") + " ta=" +
                                (ta ? "1" : "0") + " tb=" + (tb ? "1" : "0"));
            }
}

TEST_CASE("ops: linear forward/backward, dW accumulates") {
    const int64_t N = 6, in = 5, out = 4;
    Tensor x = random_tensor({N, in}, 7), W = random_tensor({out, in}, 8), wy = random_tensor({N, out}, 9);
    Tensor y = Tensor::empty({N, out}, DType::f32, Device::cpu, Tag::workspace);
    auto loss = [&] {
        linear_forward(x, W, y);
        return dot(y, wy);
    };
    loss();
    check_close(y.to_host(), ref_matmul(x.to_host(), W.to_host(), 1, N, in, out, false, true, false), 1e-5,
                1e-5, "linear forward");
    Tensor dx = zeros_like(x), dW = zeros_like(W);
    linear_backward(wy, x, W, dx, dW);
    check_gradient(x, dx.to_host(), loss, "linear dx");
    check_gradient(W, dW.to_host(), loss, "linear dW");
    auto dW1 = dW.to_host();
    Tensor no_dx;
    linear_backward(wy, x, W, no_dx, dW);  // undefined dx: only dW
    check_close(dW.to_host(), scaled(dW1, 2.0f), 1e-6, 1e-6, "linear dW accumulates");
}

TEST_CASE("ops: embedding, vocab shards sum to the full table") {
    const int64_t V = 10, h = 4;
    std::vector<int32_t> ids = {0, 3, 9, 3, 5, 6, 10, 1, 7, 9};  // 10 is outside the table: zero row
    const int64_t N = (int64_t)ids.size();
    Tensor tok = Tensor::from_host_i32(ids, {N}, Device::cpu);
    Tensor table = random_tensor({V, h}, 10), wout = random_tensor({N, h}, 11);
    Tensor out = Tensor::empty({N, h}, DType::f32, Device::cpu, Tag::workspace);
    embedding_forward(tok, table, out);
    auto t = table.to_host(), o = out.to_host();
    std::vector<float> want(N * h, 0.0f);
    for (int64_t n = 0; n < N; n++)
        for (int64_t i = 0; i < h && ids[n] < V; i++) want[n * h + i] = t[ids[n] * h + i];
    check_close(o, want, 0, 0, "embedding forward");

    // shard 0 holds rows [0, 6), shard 1 rows [6, 10): outputs add up, grads are slices of the full grad
    Tensor s0 = table.slice(0, 6), s1 = table.slice(6, 4);
    Tensor o0 = zeros_like(out), o1 = zeros_like(out);
    embedding_forward(tok, s0, o0, 0);
    embedding_forward(tok, s1, o1, 6);
    Tensor sum = zeros_like(out);
    add(o0, o1, sum);
    check_close(sum.to_host(), o, 0, 0, "embedding shards sum");

    Tensor dtab = zeros_like(table), d0 = zeros_like(s0), d1 = zeros_like(s1);
    embedding_backward(tok, wout, dtab);
    embedding_backward(tok, wout, d0, 0);
    embedding_backward(tok, wout, d1, 6);
    check_close(d0.to_host(), dtab.slice(0, 6).to_host(), 0, 0, "embedding shard 0 grad");
    check_close(d1.to_host(), dtab.slice(6, 4).to_host(), 0, 0, "embedding shard 1 grad");
    check_gradient(table, dtab.to_host(), [&] {
        embedding_forward(tok, table, out);
        return dot(out, wout);
    }, "embedding dtable");
    auto g1 = dtab.to_host();
    embedding_backward(tok, wout, dtab);
    check_close(dtab.to_host(), scaled(g1, 2.0f), 1e-6, 1e-6, "embedding dtable accumulates");
}

TEST_CASE("ops: rmsnorm forward/backward") {
    const int64_t N = 4, h = 16;
    const float eps = 1e-5f;
    Tensor x = random_tensor({N, h}, 12), w = random_tensor({h}, 13), wy = random_tensor({N, h}, 14);
    Tensor y = zeros_like(x), rstd = Tensor::zeros({N}, DType::f32, Device::cpu, Tag::workspace);
    auto loss = [&] {
        rmsnorm_forward(x, w, y, rstd, eps);
        return dot(y, wy);
    };
    loss();
    auto xs = x.to_host(), ws = w.to_host();
    std::vector<float> want(N * h), want_r(N);
    for (int64_t n = 0; n < N; n++) {
        double ss = 0;
        for (int64_t i = 0; i < h; i++) ss += (double)xs[n * h + i] * xs[n * h + i];
        double r = 1.0 / std::sqrt(ss / h + eps);
        want_r[n] = (float)r;
        for (int64_t i = 0; i < h; i++) want[n * h + i] = (float)(xs[n * h + i] * r * ws[i]);
    }
    check_close(y.to_host(), want, 1e-5, 1e-6, "rmsnorm y");
    check_close(rstd.to_host(), want_r, 1e-6, 0, "rmsnorm rstd");

    Tensor dx = zeros_like(x), dw = zeros_like(w);
    rmsnorm_backward(wy, x, w, rstd, dx, dw);
    check_gradient(x, dx.to_host(), loss, "rmsnorm dx", 1e-2, 2e-2, 1e-3);
    check_gradient(w, dw.to_host(), loss, "rmsnorm dw");
    auto dw1 = dw.to_host();
    rmsnorm_backward(wy, x, w, rstd, dx, dw);
    check_close(dw.to_host(), scaled(dw1, 2.0f), 1e-6, 1e-6, "rmsnorm dw accumulates");
}

TEST_CASE("ops: rope forward/backward (HF rotate_half)") {
    const int64_t B = 2, T = 5, nh = 3, hd = 8, half = hd / 2;
    const float theta = 10000.0f;
    std::vector<float> freqs(half);  // the default table of rope.hpp
    for (int64_t i = 0; i < half; i++) freqs[i] = 1.0f / powf(theta, (float)(2 * i) / (float)hd);
    Tensor freq = Tensor::from_host(freqs, {half}, Device::cpu);
    Tensor pos = Tensor::from_host_i32({3, 4, 5, 6, 700}, {T}, Device::cpu);  // global positions (CP offset)
    Tensor x = random_tensor({B, T, nh, hd}, 15), wo = random_tensor({B, T, nh, hd}, 16);
    Tensor out = zeros_like(x);
    rope_forward(x, pos, freq, out);
    auto xs = x.to_host();
    auto ps = pos.to_host_i32();
    std::vector<float> want(xs.size());
    for (int64_t row = 0; row < B * T * nh; row++) {
        int64_t t = row / nh % T;
        for (int64_t i = 0; i < half; i++) {
            double a = ps[t] * std::pow((double)theta, -2.0 * i / hd);
            double x1 = xs[row * hd + i], x2 = xs[row * hd + half + i];
            want[row * hd + i] = (float)(x1 * std::cos(a) - x2 * std::sin(a));
            want[row * hd + half + i] = (float)(x2 * std::cos(a) + x1 * std::sin(a));
        }
    }
    // the f32 angle HF computes differs from the double one by ~pos * 1e-7 rad
    check_close(out.to_host(), want, 1e-4, 1e-4, "rope forward");

    Tensor inplace = x.clone(Device::cpu, Tag::workspace);
    rope_forward(inplace, pos, freq, inplace);
    check_close(inplace.to_host(), out.to_host(), 0, 0, "rope forward in place");

    Tensor back = zeros_like(x);
    rope_backward(out, pos, freq, back);
    check_close(back.to_host(), xs, 1e-5, 1e-5, "rope_backward(rope_forward(x)) == x");

    Tensor dx = zeros_like(x);
    rope_backward(wo, pos, freq, dx);
    check_gradient(x, dx.to_host(), [&] {
        rope_forward(x, pos, freq, out);
        return dot(out, wo);
    }, "rope dx");
}

TEST_CASE("ops: swiglu forward/backward") {
    const int64_t N = 3, f = 10;
    Tensor g = random_tensor({N, f}, 17, 2.0f), u = random_tensor({N, f}, 18), wo = random_tensor({N, f}, 19);
    Tensor out = zeros_like(g);
    auto loss = [&] {
        swiglu_forward(g, u, out);
        return dot(out, wo);
    };
    loss();
    auto gs = g.to_host(), us = u.to_host();
    std::vector<float> want(gs.size());
    for (size_t i = 0; i < gs.size(); i++) want[i] = (float)(gs[i] / (1.0 + std::exp(-(double)gs[i])) * us[i]);
    check_close(out.to_host(), want, 1e-5, 1e-6, "swiglu forward");
    Tensor dg = zeros_like(g), du = zeros_like(u);
    swiglu_backward(wo, g, u, dg, du);
    check_gradient(g, dg.to_host(), loss, "swiglu dgate");
    check_gradient(u, du.to_host(), loss, "swiglu dup");
}

TEST_CASE("ops: cross-entropy forward/backward, ignore_index, grad_scale") {
    const int64_t N = 5, V = 7;
    const int32_t ignore = -100;
    const float gscale = 0.25f;
    std::vector<int32_t> tg = {1, 6, ignore, 0, 3};
    Tensor targets = Tensor::from_host_i32(tg, {N}, Device::cpu);
    Tensor logits = random_tensor({N, V}, 20, 3.0f);
    Tensor dl = zeros_like(logits), losses = Tensor::zeros({N}, DType::f32, Device::cpu, Tag::workspace);
    double total = cross_entropy_forward_backward(logits, targets, dl, gscale, ignore, losses);

    auto z = logits.to_host();
    std::vector<float> want(N);
    double want_total = 0;
    for (int64_t n = 0; n < N; n++) {
        if (tg[n] == ignore) continue;
        double mx = -INFINITY, s = 0;
        for (int64_t v = 0; v < V; v++) mx = std::max(mx, (double)z[n * V + v]);
        for (int64_t v = 0; v < V; v++) s += std::exp(z[n * V + v] - mx);
        want[n] = (float)(mx + std::log(s) - z[n * V + tg[n]]);  // -log_softmax at the target
        want_total += want[n];
    }
    check_close(losses.to_host(), want, 1e-5, 1e-6, "cross-entropy per-row losses");
    CHECK(total == doctest::Approx(want_total).epsilon(1e-6));
    auto d = dl.to_host();
    for (int64_t v = 0; v < V; v++) CHECK(d[2 * V + v] == 0.0f);  // the ignored row

    Tensor empty_t;
    check_gradient(logits, d, [&] {
        return gscale * cross_entropy_forward_backward(logits, targets, empty_t, 1.0f, ignore, empty_t);
    }, "cross-entropy dlogits");

    // dlogits may overwrite the logits
    Tensor alias = logits.clone(Device::cpu, Tag::workspace);
    double total2 = cross_entropy_forward_backward(alias, targets, alias, gscale, ignore, empty_t);
    CHECK(total2 == total);
    check_close(alias.to_host(), d, 0, 0, "cross-entropy dlogits aliasing logits");

    // stable for huge logits: a shift of every logit by 1000 changes nothing
    for (float& v : z) v += 1000.0f;
    Tensor shifted = f32(z, {N, V}), dshift = zeros_like(logits);
    double total3 = cross_entropy_forward_backward(shifted, targets, dshift, gscale, ignore, empty_t);
    CHECK(total3 == doctest::Approx(want_total).epsilon(1e-3));
    check_close(dshift.to_host(), d, 1e-3, 1e-4, "cross-entropy shifted logits");
}

TEST_CASE("ops: cross-entropy is stable for logits shifted by +1000 and -1000 (the row max is subtracted)") {
    for (float shift : {1000.0f, -1000.0f}) check_shifted_cross_entropy(Device::cpu, shift);
}

TEST_CASE("[gpu] ops: cross-entropy on the GPU is stable for logits shifted by +1000 and -1000") {
    SKIP_WITHOUT_GPU();
    for (float shift : {1000.0f, -1000.0f}) check_shifted_cross_entropy(Device::cuda, shift);
}

TEST_CASE("ops: adamw matches a double-precision reference over 3 steps") {
    const int64_t n = 12;
    AdamWConfig cfg;
    cfg.lr = 1e-2f;
    cfg.weight_decay = 0.1f;
    const float gscale = 0.5f;
    Tensor p = random_tensor({n}, 21), m = Tensor::zeros({n}, DType::f32, Device::cpu, Tag::optim);
    Tensor v = zeros_like(m);
    auto p0 = p.to_host();
    std::vector<double> rp(p0.begin(), p0.end()), rm(n, 0.0), rv(n, 0.0);
    for (int step = 1; step <= 3; step++) {
        Tensor g = random_tensor({n}, 30 + step);
        adamw_step(p, g, m, v, cfg, step, gscale);
        auto gs = g.to_host();
        for (int64_t i = 0; i < n; i++) {
            double gi = (double)gs[i] * gscale;
            rp[i] -= (double)cfg.lr * cfg.weight_decay * rp[i];
            rm[i] = cfg.beta1 * rm[i] + (1.0 - cfg.beta1) * gi;
            rv[i] = cfg.beta2 * rv[i] + (1.0 - cfg.beta2) * gi * gi;
            double mhat = rm[i] / (1.0 - std::pow((double)cfg.beta1, step));
            double vhat = rv[i] / (1.0 - std::pow((double)cfg.beta2, step));
            rp[i] -= cfg.lr * mhat / (std::sqrt(vhat) + cfg.eps);
        }
    }
    auto to_f = [](const std::vector<double>& a) { return std::vector<float>(a.begin(), a.end()); };
    check_close(p.to_host(), to_f(rp), 1e-5, 1e-6, "adamw param");
    check_close(m.to_host(), to_f(rm), 1e-5, 1e-7, "adamw m");
    check_close(v.to_host(), to_f(rv), 1e-5, 1e-9, "adamw v");
}

TEST_CASE("ops: sum_squares, add, add_inplace, scale_inplace") {
    Tensor a = random_tensor({1000}, 40), b = random_tensor({1000}, 41);
    auto as = a.to_host(), bs = b.to_host();
    double ss = 0;
    for (float x : as) ss += (double)x * x;
    CHECK(sum_squares(a) == doctest::Approx(ss).epsilon(1e-12));

    std::vector<float> want(as.size());
    for (size_t i = 0; i < as.size(); i++) want[i] = as[i] + bs[i];
    Tensor out = zeros_like(a);
    add(a, b, out);
    check_close(out.to_host(), want, 0, 0, "add");
    Tensor a2 = a.clone(Device::cpu, Tag::workspace);
    add(a2, b, a2);
    check_close(a2.to_host(), want, 0, 0, "add aliasing out = a");

    Tensor c = a.clone(Device::cpu, Tag::workspace);
    add_inplace(c, b, -0.5f);
    for (size_t i = 0; i < as.size(); i++) want[i] = as[i] - 0.5f * bs[i];
    check_close(c.to_host(), want, 1e-7, 0, "add_inplace alpha=-0.5");
    scale_inplace(c, 3.0f);
    check_close(c.to_host(), scaled(want, 3.0f), 1e-7, 0, "scale_inplace");
}

TEST_CASE("ops: fill of every dtype") {
    auto filled = [](DType t, float value) {
        Tensor x = Tensor::empty({7}, t, Device::cpu, Tag::workspace);
        fill(x, value);
        return x.to_host();
    };
    check_close(filled(DType::f32, -2.5f), std::vector<float>(7, -2.5f), 0, 0, "fill f32");
    check_close(filled(DType::i32, 7.0f), std::vector<float>(7, 7.0f), 0, 0, "fill i32");
    check_close(filled(DType::bf16, 1.5f), std::vector<float>(7, 1.5f), 0, 0, "fill bf16");
    check_close(filled(DType::f16, -0.75f), std::vector<float>(7, -0.75f), 0, 0, "fill f16");
    check_close(filled(DType::e4m3, 1000.0f), std::vector<float>(7, 448.0f), 0, 0, "fill e4m3 saturates");
    check_close(filled(DType::e5m2, -1e6f), std::vector<float>(7, -57344.0f), 0, 0, "fill e5m2 saturates");
}

TEST_CASE("ops: convert f32 <-> bf16, f16, e4m3, e5m2") {
    const int64_t n = 64;
    Tensor x = random_tensor({n}, 42, 100.0f);
    auto xs = x.to_host();
    xs[0] = 6e4f;  // beyond both fp8 ranges (they saturate), inside f16's
    x = f32(xs, {n});
    for (DType t : {DType::bf16, DType::f16, DType::e4m3, DType::e5m2}) {
        Tensor lo = Tensor::empty({n}, t, Device::cpu, Tag::workspace);
        convert(lo, x);
        Tensor back = zeros_like(x);
        convert(back, lo);
        std::vector<float> want(n);
        for (int64_t i = 0; i < n; i++) {
            switch (t) {
                case DType::bf16: want[i] = bf16_to_f32(f32_to_bf16(xs[i])); break;
                case DType::f16: want[i] = f16_to_f32(f32_to_f16(xs[i])); break;
                case DType::e4m3: want[i] = e4m3_to_f32(f32_to_e4m3(xs[i], true)); break;
                default: want[i] = e5m2_to_f32(f32_to_e5m2(xs[i], true)); break;
            }
        }
        check_close(back.to_host(), want, 0, 0, std::string("convert round trip ") + dtype_name(t));
        if (t == DType::e4m3) CHECK(back.to_host()[0] == 448.0f);
        if (t == DType::e5m2) CHECK(back.to_host()[0] == 57344.0f);
    }
}

TEST_CASE("ops: init_normal shards are slices of the full tensor") {
    const uint64_t seed = 5, stream = name_stream("layers.0.mlp.w_up");
    Tensor full = Tensor::empty({6, 10}, DType::f32, Device::cpu, Tag::params);
    init_normal(full, seed, stream, 0.5f);
    auto fs = full.to_host();
    // a TP shard: rows [2, 5), cols [3, 8) of the (6, 10) tensor
    Tensor shard = Tensor::empty({3, 5}, DType::f32, Device::cpu, Tag::params);
    init_normal(shard, seed, stream, 0.5f, 2, 3, 10);
    std::vector<float> want;
    for (int r = 2; r < 5; r++)
        for (int c = 3; c < 8; c++) want.push_back(fs[r * 10 + c]);
    check_close(shard.to_host(), want, 0, 0, "init_normal 2-D shard");
    // a ZeRO shard of the flattened tensor: elements [25, 45) as a 1-D run
    Tensor run = Tensor::empty({20}, DType::f32, Device::cpu, Tag::params);
    init_normal(run, seed, stream, 0.5f, 0, 25, 60);
    check_close(run.to_host(), std::vector<float>(fs.begin() + 25, fs.begin() + 45), 0, 0, "init_normal 1-D shard");

    Tensor other = zeros_like(full);
    init_normal(other, seed, stream + 1, 0.5f);
    CHECK(other.to_host() != fs);

    const int64_t n = 100000;
    Tensor big = Tensor::empty({n}, DType::f32, Device::cpu, Tag::workspace);
    init_normal(big, 9, 1, 1.0f);
    double s = 0, s2 = 0;
    for (float v : big.to_host()) {
        s += v;
        s2 += (double)v * v;
    }
    double mean = s / n, sd = std::sqrt(s2 / n - mean * mean);
    CHECK(std::fabs(mean) < 0.02);  // ~6 standard errors
    CHECK(std::fabs(sd - 1.0) < 0.02);
}

}  // TEST_SUITE
