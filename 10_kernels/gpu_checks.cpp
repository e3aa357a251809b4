// gpu_checks.cpp — the GPU kernels against the fp64 CPU reference (gpu_checks.hpp): inputs drawn fresh from
// the seed (bf16 inputs rounded first, so the reference reads exactly what the kernel reads), outputs poisoned
// with NaN (bytes 0xFF) before the kernel runs, every output compared with its bound.
//
// Playbook: "Diving into the GPUs".
//   build/bin/tests_10 -ts='ch10 np1' -tc='*gpu*'        (skipped, saying why, without a GPU)
#include "gpu_checks.hpp"

#include <algorithm>

#include "../common/core.hpp"
#include "../common/model_config.hpp"
#include "../common/ops.hpp"
#include "reference.hpp"

namespace penta::lab {

bool all_ok(const Reports& r) {
    for (const auto& x : r)
        if (!x.r.ok) return false;
    return !r.empty();
}

std::string summary(const Reports& r) {
    std::string s;
    for (const auto& x : r) s += "  " + x.what + ": " + x.r.str() + "\n";
    return s;
}

#if !defined(PENTA_CUDA)
std::string gpu_unavailable() { return "this build has no CUDA (nvcc was not found at build time)"; }
#else
std::string gpu_unavailable() { return device_capability() == 0 ? "no GPU visible (cudaGetDeviceCount found none)" : ""; }

namespace {

Tensor upload(const std::vector<float>& v, const Shape& s, DType t) { return Tensor::from_host(v, s, Device::cuda, Tag::workspace, t); }
// a device tensor whose every byte is 0xFF: NaN in f32 and in bf16, so an element never written fails
Tensor poisoned(const Shape& s, DType t) {
    Tensor x = Tensor::empty(s, t, Device::cuda, Tag::workspace);
    CUDA_CHECK(cudaMemset(x.data(), 0xFF, x.nbytes()));
    return x;
}
Tensor scratch_floats(int64_t n) { return Tensor::empty({std::max<int64_t>(n, 1)}, DType::f32, Device::cuda, Tag::workspace); }
std::vector<float> bf16_normal(int64_t n, uint64_t seed, float std = 1.0f) { return round_bf16(random_normal(n, seed, std)); }
void sync() { CUDA_CHECK(cudaDeviceSynchronize()); }
uint16_t* b16(const Tensor& t) { return t.ptr<uint16_t>(); }
float* f32(const Tensor& t) { return t.ptr<float>(); }

// the rows of x (rows x cols) listed in `rows`, one after the other
std::vector<float> take_rows(const std::vector<float>& x, int64_t cols, const std::vector<int64_t>& rows) {
    std::vector<float> r;
    for (int64_t i : rows) r.insert(r.end(), x.begin() + i * cols, x.begin() + (i + 1) * cols);
    return r;
}

}  // namespace

Reports check_gpu_gemm(GpuRung r, GemmType t, int64_t M, int64_t N, int64_t K, uint64_t seed, int64_t sample_rows) {
    const GpuRungInfo& info = gpu_rung_info(r);
    const DType dt = t == GemmType::f32 ? DType::f32 : DType::bf16;
    std::vector<float> A = random_normal(M * K, seed), B = random_normal(K * N, seed + 1);
    if (t == GemmType::bf16) A = round_bf16(A), B = round_bf16(B);
    std::vector<float> Bup = B;
    if (info.b_nk)  // the rung reads B stored (N, K)
        for (int64_t k = 0; k < K; k++)
            for (int64_t n = 0; n < N; n++) Bup[n * K + k] = B[k * N + n];
    Tensor dA = upload(A, {M, K}, dt), dB = upload(Bup, {info.b_nk ? N : K, info.b_nk ? K : N}, dt), dC = poisoned({M, N}, dt);
    gpu_gemm(r, t, M, N, K, dA.data(), dB.data(), dC.data(), 0);
    sync();
    std::vector<int64_t> rows;
    const int64_t n_rows = sample_rows <= 0 || sample_rows >= M ? M : sample_rows;
    for (int64_t i = 0; i < n_rows; i++) rows.push_back(n_rows == M ? i : i * (M - 1) / (n_rows - 1));
    const auto ref = gemm_ref(A.data(), B.data(), M, N, K, false, rows);
    const std::string what = strfmt("%s %s %ldx%ldx%ld (%ld rows)", info.name, t == GemmType::f32 ? "f32" : "bf16",
                                    (long)M, (long)N, (long)K, (long)rows.size());
    return {{what, compare(take_rows(dC.to_host(), N, rows), ref, t == GemmType::f32 ? Check::gemm_f32 : Check::gemm_bf16)}};
}

FusedShape fused_shape_of(const std::string& model, int64_t tokens, int64_t adamw_layers) {
    const LlamaConfig c = preset(model);
    FusedShape s{tokens, c.hidden, c.ffn, c.vocab, 2, c.n_heads, c.n_kv_heads, c.head_dim(), {}, 0};
    CHECK(tokens % 2 == 0, "fused shapes: %ld tokens must split into 2 sequences", (long)tokens);
    const int64_t h = c.hidden, kv = c.n_kv_heads * c.head_dim();
    for (int64_t l = 0; l < adamw_layers; l++)  // one layer's tensors: q, k, v, o, gate, up, down, two norms
        for (int64_t n : {h * h, kv * h, kv * h, h * h, c.ffn * h, c.ffn * h, h * c.ffn, h, h}) s.adamw_sizes.push_back(n);
    return s;
}

const char* fused_op_name(FusedOp op) {
    switch (op) {
        case FusedOp::rmsnorm_fwd: return "rmsnorm fwd";
        case FusedOp::rmsnorm_bwd: return "rmsnorm bwd";
        case FusedOp::rope: return "rope q+k";
        case FusedOp::swiglu_fwd: return "swiglu fwd";
        case FusedOp::swiglu_bwd: return "swiglu bwd";
        case FusedOp::cross_entropy: return "softmax-xent";
        case FusedOp::adamw: return "adamw";
    }
    return "?";
}

Reports check_fused(FusedOp op, bool unfused, const FusedShape& s, uint64_t seed) {
    const std::string tag = std::string(fused_op_name(op)) + (unfused ? " (unfused)" : " (fused)");
    Reports out;
    auto add = [&](const std::string& what, const Tensor& got, const std::vector<double>& ref, Check c) {
        out.push_back({tag + " " + what, compare(got.to_host(), ref, c)});
    };
    const int64_t N = s.tokens, h = s.hidden;
    const float eps = 1e-5f;
    switch (op) {
        case FusedOp::rmsnorm_fwd:
        case FusedOp::rmsnorm_bwd: {
            std::vector<float> w = random_normal(h, seed + 1, 0.2f);
            for (float& x : w) x += 1.0f;
            w = round_bf16(w);
            const auto x = bf16_normal(N * h, seed), dy = bf16_normal(N * h, seed + 2);
            std::vector<double> y, rstd, dx, dw;
            rmsnorm_fwd_ref(x, w, N, h, eps, y, rstd);
            Tensor X = upload(x, {N, h}, DType::bf16), W = upload(w, {h}, DType::bf16);
            if (op == FusedOp::rmsnorm_fwd) {
                Tensor Y = poisoned({N, h}, DType::bf16), R = poisoned({N}, DType::f32);
                Tensor work = scratch_floats(unfused_scratch_floats(op, N, h));
                if (unfused) rmsnorm_fwd_unfused(b16(X), b16(W), b16(Y), f32(R), N, h, eps, f32(work), 0);
                else rmsnorm_fwd(b16(X), b16(W), b16(Y), f32(R), N, h, eps, 0);
                sync();
                add("y", Y, y, Check::pointwise_bf16);
                add("rstd", R, rstd, Check::f32_sum);
                break;
            }
            rmsnorm_bwd_ref(dy, x, w, N, h, eps, dx, dw);
            Tensor R = upload(std::vector<float>(rstd.begin(), rstd.end()), {N}, DType::f32);
            Tensor DY = upload(dy, {N, h}, DType::bf16), DX = poisoned({N, h}, DType::bf16), DW = poisoned({h}, DType::f32);
            Tensor work = scratch_floats(unfused ? unfused_scratch_floats(op, N, h) : rmsnorm_bwd_partials(N, h));
            if (unfused) rmsnorm_bwd_unfused(b16(DY), b16(X), b16(W), f32(R), b16(DX), f32(DW), N, h, f32(work), 0);
            else rmsnorm_bwd(b16(DY), b16(X), b16(W), f32(R), b16(DX), f32(DW), f32(work), N, h, 0);
            sync();
            add("dx", DX, dx, Check::pointwise_bf16);
            add("dw", DW, dw, Check::f32_sum);
            break;
        }
        case FusedOp::rope: {
            const int64_t B = s.batch, T = N / B, H = s.heads, Hkv = s.kv_heads, D = s.head_dim;
            std::vector<int32_t> pos(T);
            for (int64_t t = 0; t < T; t++) pos[t] = s.first_position + (int32_t)t;
            Tensor P = Tensor::from_host_i32(pos, {T}, Device::cuda);
            const auto q = bf16_normal(B * T * H * D, seed), k = bf16_normal(B * T * Hkv * D, seed + 1);
            for (bool inverse : {false, true}) {
                Tensor Q = upload(q, {B, T, H, D}, DType::bf16), K = upload(k, {B, T, Hkv, D}, DType::bf16);
                if (unfused) {
                    Tensor work = scratch_floats(unfused_scratch_floats(op, B * T * H, D));
                    rope_unfused(b16(Q), P.ptr<int32_t>(), B, T, H, D, 10000.0f, inverse, f32(work), 0);
                    rope_unfused(b16(K), P.ptr<int32_t>(), B, T, Hkv, D, 10000.0f, inverse, f32(work), 0);
                } else {
                    rope(b16(Q), b16(K), P.ptr<int32_t>(), B, T, H, Hkv, D, 10000.0f, inverse, 0);
                }
                sync();
                add(inverse ? "q backward" : "q forward", Q, rope_ref(q, pos, B, T, H, D, 10000.0, inverse), Check::pointwise_bf16);
                add(inverse ? "k backward" : "k forward", K, rope_ref(k, pos, B, T, Hkv, D, 10000.0, inverse), Check::pointwise_bf16);
            }
            break;
        }
        case FusedOp::swiglu_fwd:
        case FusedOp::swiglu_bwd: {
            const int64_t n = N * s.ffn;
            const auto g = bf16_normal(n, seed, 2.0f), u = bf16_normal(n, seed + 1), d = bf16_normal(n, seed + 2);
            Tensor G = upload(g, {n}, DType::bf16), U = upload(u, {n}, DType::bf16);
            Tensor work = scratch_floats(unfused_scratch_floats(op, N, s.ffn));
            if (op == FusedOp::swiglu_fwd) {
                Tensor O = poisoned({n}, DType::bf16);
                if (unfused) swiglu_fwd_unfused(b16(G), b16(U), b16(O), n, f32(work), 0);
                else swiglu_fwd(b16(G), b16(U), b16(O), n, 0);
                sync();
                add("out", O, swiglu_fwd_ref(g, u), Check::pointwise_bf16);
                break;
            }
            Tensor Dd = upload(d, {n}, DType::bf16), DG = poisoned({n}, DType::bf16), DU = poisoned({n}, DType::bf16);
            if (unfused) swiglu_bwd_unfused(b16(Dd), b16(G), b16(U), b16(DG), b16(DU), n, f32(work), 0);
            else swiglu_bwd(b16(Dd), b16(G), b16(U), b16(DG), b16(DU), n, 0);
            sync();
            std::vector<double> dg, du;
            swiglu_bwd_ref(d, g, u, dg, du);
            add("dgate", DG, dg, Check::pointwise_bf16);
            add("dup", DU, du, Check::pointwise_bf16);
            break;
        }
        case FusedOp::cross_entropy: {
            const int64_t V = s.vocab;
            const auto logits = bf16_normal(N * V, seed, 2.0f);
            std::vector<int32_t> tg(N);
            for (int64_t i = 0; i < N; i++)  // every 7th row ignored (-1), the others a target anywhere in V
                tg[i] = i % 7 == 3 ? -1 : (int32_t)(rng_uniform(seed, 77, (uint64_t)i) * (float)V) % (int32_t)V;
            Tensor L = upload(logits, {N, V}, DType::bf16), TG = Tensor::from_host_i32(tg, {N}, Device::cuda);
            Tensor LOSS = poisoned({N}, DType::f32), DL = poisoned({N, V}, DType::bf16);
            const float scale = 1.0f / (float)N;
            if (unfused) {
                Tensor work = scratch_floats(unfused_scratch_floats(op, N, V));
                cross_entropy_unfused(b16(L), TG.ptr<int32_t>(), f32(LOSS), b16(DL), N, V, scale, f32(work), 0);
            } else {
                cross_entropy(b16(L), TG.ptr<int32_t>(), f32(LOSS), b16(DL), N, V, scale, 0);
            }
            sync();
            std::vector<double> loss, dl;
            cross_entropy_ref(logits, tg, N, V, scale, loss, dl);
            add("loss", LOSS, loss, Check::f32_sum);
            add("dlogits", DL, dl, Check::pointwise_bf16);
            break;
        }
        case FusedOp::adamw: {
            const AdamWParams a{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 10};
            std::vector<Tensor> keep;
            std::vector<AdamWTensor> list;
            std::vector<float> p0, gall, m0, v0;
            uint64_t sd = seed;
            for (int64_t n : s.adamw_sizes) {
                auto p = random_normal(n, sd++), g = random_normal(n, sd++, 0.1f), m = random_normal(n, sd++, 0.01f);
                auto v = random_normal(n, sd++, 0.01f);
                for (float& x : v) x = x * x;
                Tensor P = upload(p, {n}, DType::f32), G = upload(g, {n}, DType::f32), Mm = upload(m, {n}, DType::f32),
                       Vv = upload(v, {n}, DType::f32);
                list.push_back({f32(P), f32(G), f32(Mm), f32(Vv), n});
                keep.insert(keep.end(), {P, G, Mm, Vv});
                p0.insert(p0.end(), p.begin(), p.end()), gall.insert(gall.end(), g.begin(), g.end());
                m0.insert(m0.end(), m.begin(), m.end()), v0.insert(v0.end(), v.begin(), v.end());
            }
            Tensor table = scratch_floats((adamw_table_bytes(list) + 3) / 4);
            if (unfused) adamw_unfused(list, a, 0);
            else adamw_multi_tensor(list, a, table.data(), 0);
            sync();
            std::vector<float> p1, m1, v1;
            for (size_t i = 0; i < list.size(); i++) {
                for (auto [dst, t] : {std::pair{&p1, keep[4 * i]}, std::pair{&m1, keep[4 * i + 2]}, std::pair{&v1, keep[4 * i + 3]}}) {
                    const auto h = t.to_host();
                    dst->insert(dst->end(), h.begin(), h.end());
                }
            }
            std::vector<double> pr, mr, vr;
            adamw_ref(p0, gall, m0, v0, {a.lr, a.beta1, a.beta2, a.eps, a.weight_decay}, a.step, pr, mr, vr);
            out.push_back({tag + " p", compare(p1, pr, Check::adamw_f32)});
            out.push_back({tag + " m", compare(m1, mr, Check::adamw_f32)});
            out.push_back({tag + " v", compare(v1, vr, Check::adamw_f32)});
            std::vector<float> step(p1.size());
            std::vector<double> step_ref(p1.size());
            for (size_t i = 0; i < p1.size(); i++) step[i] = (float)((double)p1[i] - p0[i]), step_ref[i] = pr[i] - p0[i];
            out.push_back({tag + " p' - p", compare(step, step_ref, Check::adamw_step)});
            break;
        }
    }
    return out;
}

Reports check_flash(const FlashShape& s, uint64_t seed, int groups, bool against_naive) {
    const AttnShape as{s.B, s.T, s.H, s.Hkv, s.D};
    const auto q = bf16_normal(s.B * s.T * s.H * s.D, seed), k = bf16_normal(s.B * s.T * s.Hkv * s.D, seed + 1);
    const auto v = bf16_normal(s.B * s.T * s.Hkv * s.D, seed + 2), dout = bf16_normal(s.B * s.T * s.H * s.D, seed + 3);
    const Shape qs{s.B, s.T, s.H, s.D}, ks{s.B, s.T, s.Hkv, s.D};
    Tensor Q = upload(q, qs, DType::bf16), K = upload(k, ks, DType::bf16), V = upload(v, ks, DType::bf16);
    Tensor dO = upload(dout, qs, DType::bf16), O = poisoned(qs, DType::bf16), LSE = poisoned({s.B, s.H, s.T}, DType::f32);
    Tensor dQ = poisoned(qs, DType::bf16), dK = poisoned(ks, DType::bf16), dV = poisoned(ks, DType::bf16);
    Tensor work = scratch_floats(flash_bwd_workspace_floats(s));
    flash_fwd(b16(Q), b16(K), b16(V), b16(O), f32(LSE), s, 0);
    flash_bwd(b16(Q), b16(K), b16(V), b16(O), f32(LSE), b16(dO), b16(dQ), b16(dK), b16(dV), f32(work), s, 0);
    sync();
    const auto o = O.to_host(), lse = LSE.to_host(), dq = dQ.to_host(), dk = dK.to_host(), dv = dV.to_host();
    Reports out;
    const int64_t g = s.H / s.Hkv;
    std::vector<std::pair<int64_t, int64_t>> which = {{0, 0}, {s.B - 1, s.Hkv - 1}};
    which.resize(std::min<size_t>(which.size(), (size_t)std::max(groups, 1)));
    if (which.size() == 2 && which[0] == which[1]) which.pop_back();
    for (auto [b, kvh] : which) {
        const AttnGroupRef r = attention_ref(as, q, k, v, dout, b, kvh);
        const std::string at = strfmt(" of batch %ld, kv head %ld", (long)b, (long)kvh);
        out.push_back({"out" + at, compare(group_rows(o, as, s.H, b, kvh * g, g), r.out, Check::attention_bf16)});
        out.push_back({"lse" + at, compare(group_lse(lse, as, b, kvh), r.lse, Check::f32_sum)});
        out.push_back({"dq" + at, compare(group_rows(dq, as, s.H, b, kvh * g, g), r.dq, Check::attention_bf16)});
        out.push_back({"dk" + at, compare(group_rows(dk, as, s.Hkv, b, kvh, 1), r.dk, Check::attention_bf16)});
        out.push_back({"dv" + at, compare(group_rows(dv, as, s.Hkv, b, kvh, 1), r.dv, Check::attention_bf16)});
    }
    if (against_naive) {  // the trainer's naive CUDA kernel (f32, (T, T) probabilities in memory) on the same inputs
        Tensor Q32 = upload(q, qs, DType::f32), K32 = upload(k, ks, DType::f32), V32 = upload(v, ks, DType::f32);
        Tensor O32 = Tensor::empty(qs, DType::f32, Device::cuda, Tag::workspace);
        Tensor L32 = Tensor::empty({s.B, s.H, s.T}, DType::f32, Device::cuda, Tag::workspace);
        attention_forward_naive(Q32, K32, V32, O32, L32, nullptr);
        sync();
        const auto on = O32.to_host();
        out.push_back({"out vs the trainer's naive CUDA attention", compare(o, std::vector<double>(on.begin(), on.end()), Check::attention_bf16)});
    }
    return out;
}
#endif

}  // namespace penta::lab
