// test_reference.cpp — chapter 10, the fp64 references themselves, each against an independent
// implementation: the GEMM against OpenBLAS (both B layouts), RMSNorm, RoPE, SwiGLU, cross-entropy, AdamW and
// causal GQA attention (forward and backward) against the trainer's own CPU ops (common/ops.hpp, f32), which
// chapter 00's tests check by finite differences. Two implementations written apart that agree to f32
// rounding leave the lab's references trustworthy enough to judge GPU kernels by.
// Playbook: "Diving into the GPUs". Run: build/bin/tests_10 -ts='ch10 np1' -tc='*reference*'
#include <cblas.h>

#include <cmath>

#include "../../10_kernels/reference.hpp"
#include "../../10_kernels/validate.hpp"
#include "../../common/rope.hpp"
#include "../testing.hpp"

using namespace penta;
using namespace penta::lab;
using namespace penta::testing;

namespace {

Tensor host(const std::vector<float>& v, const Shape& s) { return Tensor::from_host(v, s, Device::cpu); }

// the f32 op's result against the fp64 reference: rel and element-wise within ~f32 rounding
void agree(const Tensor& op, const std::vector<double>& ref, const std::string& what, double rel = 1e-5) {
    const std::vector<float> got = op.to_host();
    REQUIRE(got.size() == ref.size());
    double d2 = 0, r2 = 0;
    for (size_t i = 0; i < got.size(); i++) d2 += (got[i] - ref[i]) * (got[i] - ref[i]), r2 += ref[i] * ref[i];
    CHECK_MESSAGE(std::sqrt(d2 / r2) < rel, what << ": rel " << std::sqrt(d2 / r2));
}

}  // namespace

TEST_SUITE("ch10 np1") {
    TEST_CASE("reference: gemm equals OpenBLAS in both B layouts, and sampled rows are those rows") {
        const int64_t M = 45, N = 70, K = 130;
        const auto A = random_normal(M * K, 1), B = random_normal(K * N, 2);
        std::vector<float> C((size_t)(M * N)), Bt((size_t)(N * K));
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.0f, A.data(), K, B.data(), N, 0.0f, C.data(), N);
        for (int64_t k = 0; k < K; k++)
            for (int64_t n = 0; n < N; n++) Bt[n * K + k] = B[k * N + n];
        const auto ref = gemm_ref(A.data(), B.data(), M, N, K, false);
        CHECK_MESSAGE(compare(C, ref, Check::gemm_f32).ok, compare(C, ref, Check::gemm_f32).str());
        CHECK(gemm_ref(A.data(), Bt.data(), M, N, K, true) == ref);  // the same sums in the same order
        const auto rows = gemm_ref(A.data(), B.data(), M, N, K, false, {44, 3});
        CHECK(std::vector<double>(rows.begin(), rows.begin() + N) == std::vector<double>(ref.begin() + 44 * N, ref.end()));
        CHECK(std::vector<double>(rows.begin() + N, rows.end()) == std::vector<double>(ref.begin() + 3 * N, ref.begin() + 4 * N));
    }

    TEST_CASE("reference: rmsnorm, rope, swiglu, cross-entropy and adamw agree with the trainer's CPU ops") {
        const int64_t N = 6, h = 96;
        const double eps = 1e-5;
        const auto x = random_normal(N * h, 3), w = random_normal(h, 4), dy = random_normal(N * h, 5);
        std::vector<double> y, rstd, dx, dw;
        rmsnorm_fwd_ref(x, w, N, h, eps, y, rstd);
        rmsnorm_bwd_ref(dy, x, w, N, h, eps, dx, dw);
        Tensor X = host(x, {N, h}), W = host(w, {h}), Y = Tensor::empty({N, h}, DType::f32, Device::cpu, Tag::workspace);
        Tensor R = Tensor::empty({N}, DType::f32, Device::cpu, Tag::workspace), DX = Tensor::empty({N, h}, DType::f32, Device::cpu, Tag::workspace);
        Tensor DW = Tensor::zeros({h}, DType::f32, Device::cpu, Tag::workspace);
        rmsnorm_forward(X, W, Y, R, (float)eps);
        rmsnorm_backward(host(dy, {N, h}), X, W, R, DX, DW);
        agree(Y, y, "rmsnorm y");
        agree(R, rstd, "rmsnorm rstd");
        agree(DX, dx, "rmsnorm dx");
        agree(DW, dw, "rmsnorm dw");

        const int64_t B = 2, T = 5, H = 3, D = 16;
        const auto q = random_normal(B * T * H * D, 6);
        const std::vector<int32_t> pos = {0, 1, 7, 300, 4095};
        Tensor Q = host(q, {B, T, H, D}), P = Tensor::from_host_i32(pos, {T}, Device::cpu);
        Tensor O = Tensor::empty({B, T, H, D}, DType::f32, Device::cpu, Tag::workspace);
        LlamaConfig rc;  // only what the table reads: theta 10000 (the default), head dim D
        rc.hidden = H * D, rc.n_heads = H;
        const Tensor inv_freq = rope_inv_freq_tensor(rc, Device::cpu);  // (D/2) theta^(-2i/D), as the model makes it
        rope_forward(Q, P, inv_freq, O);
        agree(O, rope_ref(q, pos, B, T, H, D, 10000.0, false), "rope forward", 1e-4);  // f32 angles at pos 4095
        rope_backward(Q, P, inv_freq, O);
        agree(O, rope_ref(q, pos, B, T, H, D, 10000.0, true), "rope backward", 1e-4);

        const auto g = random_normal(200, 7), u = random_normal(200, 8), dout = random_normal(200, 9);
        Tensor G = host(g, {200}), U = host(u, {200}), S = Tensor::empty({200}, DType::f32, Device::cpu, Tag::workspace);
        Tensor DG = Tensor::empty({200}, DType::f32, Device::cpu, Tag::workspace), DU = Tensor::empty({200}, DType::f32, Device::cpu, Tag::workspace);
        swiglu_forward(G, U, S);
        swiglu_backward(host(dout, {200}), G, U, DG, DU);
        std::vector<double> dg, du;
        swiglu_bwd_ref(dout, g, u, dg, du);
        agree(S, swiglu_fwd_ref(g, u), "swiglu forward");
        agree(DG, dg, "swiglu dgate");
        agree(DU, du, "swiglu dup");

        const int64_t rows = 5, V = 300;
        const auto logits = random_normal(rows * V, 10, 3.0f);
        const std::vector<int32_t> tg = {3, -1, 299, 0, 150};
        Tensor L = host(logits, {rows, V}), TG = Tensor::from_host_i32(tg, {rows}, Device::cpu);
        Tensor DL = Tensor::empty({rows, V}, DType::f32, Device::cpu, Tag::workspace), LOSS = Tensor::empty({rows}, DType::f32, Device::cpu, Tag::workspace);
        cross_entropy_forward_backward(L, TG, DL, 0.25f, -1, LOSS);
        std::vector<double> loss, dl;
        cross_entropy_ref(logits, tg, rows, V, 0.25, loss, dl);
        agree(LOSS, loss, "cross-entropy losses");
        agree(DL, dl, "cross-entropy dlogits");

        const auto p0 = random_normal(500, 11), gr = random_normal(500, 12), m0 = random_normal(500, 13, 0.1f);
        std::vector<float> v0 = random_normal(500, 14, 0.1f);
        for (float& vv : v0) vv = vv * vv;
        Tensor Pp = host(p0, {500}), Mm = host(m0, {500}), Vv = host(v0, {500});
        AdamWConfig cfg;
        cfg.lr = 1e-3f;
        adamw_step(Pp, host(gr, {500}), Mm, Vv, cfg, 3);
        std::vector<double> p1, m1, v1;
        adamw_ref(p0, gr, m0, v0, {cfg.lr, cfg.beta1, cfg.beta2, cfg.eps, cfg.weight_decay}, 3, p1, m1, v1);
        agree(Pp, p1, "adamw p");
        agree(Mm, m1, "adamw m");
        agree(Vv, v1, "adamw v");
    }

    TEST_CASE("reference: causal GQA attention forward and backward agree with the trainer's naive kernel") {
        const AttnShape s{2, 33, 4, 2, 16};
        const auto q = random_normal(s.B * s.T * s.H * s.D, 20), k = random_normal(s.B * s.T * s.Hkv * s.D, 21);
        const auto v = random_normal(s.B * s.T * s.Hkv * s.D, 22), dout = random_normal(s.B * s.T * s.H * s.D, 23);
        Tensor Q = host(q, {s.B, s.T, s.H, s.D}), K = host(k, {s.B, s.T, s.Hkv, s.D}), V = host(v, {s.B, s.T, s.Hkv, s.D});
        Tensor O = Tensor::empty(Q.shape, DType::f32, Device::cpu, Tag::workspace);
        Tensor LSE = Tensor::empty({s.B, s.H, s.T}, DType::f32, Device::cpu, Tag::workspace);
        attention_forward_naive(Q, K, V, O, LSE, nullptr);
        Tensor dQ = Tensor::zeros(Q.shape, DType::f32, Device::cpu, Tag::workspace), dK = Tensor::zeros(K.shape, DType::f32, Device::cpu, Tag::workspace);
        Tensor dV = Tensor::zeros(V.shape, DType::f32, Device::cpu, Tag::workspace);
        attention_backward_naive(host(dout, Q.shape), Q, K, V, O, LSE, nullptr, dQ, dK, dV);
        const auto o = O.to_host(), lse = LSE.to_host(), dq = dQ.to_host(), dk = dK.to_host(), dv = dV.to_host();
        const int64_t g = s.H / s.Hkv;
        for (int64_t b = 0; b < s.B; b++)
            for (int64_t kvh = 0; kvh < s.Hkv; kvh++) {
                const AttnGroupRef r = attention_ref(s, q, k, v, dout, b, kvh);
                auto cmp = [&](const std::vector<float>& got, const std::vector<double>& ref, const char* what) {
                    const ErrorReport e = compare(got, ref, Check::f32_sum);
                    CHECK_MESSAGE(e.ok, what << " of batch " << b << ", kv head " << kvh << ": " << e.str());
                };
                cmp(group_rows(o, s, s.H, b, kvh * g, g), r.out, "out");
                cmp(group_lse(lse, s, b, kvh), r.lse, "lse");
                cmp(group_rows(dq, s, s.H, b, kvh * g, g), r.dq, "dq");
                cmp(group_rows(dk, s, s.Hkv, b, kvh, 1), r.dk, "dk");
                cmp(group_rows(dv, s, s.Hkv, b, kvh, 1), r.dv, "dv");
            }
    }
}
