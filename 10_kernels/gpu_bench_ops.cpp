// gpu_bench_ops.cpp — the fused kernels' and flash attention's tables. Each kernel is validated first (at a
// smaller shape, where the fp64 reference is cheap), then timed at the model's shape in interleaved repeats:
//   fused      fused vs unfused sequence: ms, GB/s of the bytes the operation must move (each input read
//              once, each output written once) and their share of the measured copy bandwidth
//   attention  flash fwd and fwd+bwd in TFLOP/s (causal: 2·B·H·T²·D forward, 2.5x that backward), beside the
//              trainer's naive CUDA attention (f32, probabilities in memory); one "RESULT" line per head dim
//              for 10_kernels/sdpa_compare.py, which times PyTorch's scaled_dot_product_attention alike
//
// Playbook: "Diving into the GPUs — fused kernels", "Flash attention".
//   build/bin/10_kernels --part fused [--model llama3-8b --fused-tokens 16384]
//   build/bin/10_kernels --part attention [--attn-batch 2 --attn-seq 4096 --head-dims 64,128]
#if defined(PENTA_CUDA)
#include <cstdio>

#include "../common/model_config.hpp"
#include "../common/ops.hpp"
#include "../common/tensor.hpp"
#include "gpu_bench.hpp"
#include "gpu_checks.hpp"
#include "gpu_kernels.hpp"
#include "gpu_timing.hpp"
#include "lab_util.hpp"

namespace penta::lab {

namespace {

Tensor dev(const Shape& s, DType t, uint64_t seed, float std = 1.0f) {
    Tensor x = Tensor::empty(s, t, Device::cuda, Tag::workspace);
    fill_normal(x.data(), x.numel(), t == DType::bf16, seed, std, 0);
    return x;
}
Tensor floats(int64_t n) { return Tensor::empty({std::max<int64_t>(n, 1)}, DType::f32, Device::cuda, Tag::workspace); }
uint16_t* b16(const Tensor& t) { return t.ptr<uint16_t>(); }
float* f32(const Tensor& t) { return t.ptr<float>(); }

// the timed pair of one operation: its fused call, its unfused sequence, the bytes it must move
struct OpBench {
    std::vector<Tensor> keep;
    std::function<void()> fused, unfused;
    double bytes = 0;
    int unfused_launches = 0;
};

OpBench make_op(FusedOp op, const FusedShape& s, uint64_t seed) {
    OpBench b;
    const int64_t N = s.tokens, h = s.hidden;
    switch (op) {
        case FusedOp::rmsnorm_fwd: {
            Tensor x = dev({N, h}, DType::bf16, seed), w = dev({h}, DType::bf16, seed + 1), y = dev({N, h}, DType::bf16, 0);
            Tensor r = floats(N), sc = floats(unfused_scratch_floats(op, N, h));
            b.fused = [=] { rmsnorm_fwd(b16(x), b16(w), b16(y), f32(r), N, h, 1e-5f, 0); };
            b.unfused = [=] { rmsnorm_fwd_unfused(b16(x), b16(w), b16(y), f32(r), N, h, 1e-5f, f32(sc), 0); };
            b.keep = {x, w, y, r, sc}, b.bytes = 4.0 * N * h + 2.0 * h + 4.0 * N, b.unfused_launches = 5;
            break;
        }
        case FusedOp::rmsnorm_bwd: {
            Tensor dy = dev({N, h}, DType::bf16, seed), x = dev({N, h}, DType::bf16, seed + 1), w = dev({h}, DType::bf16, seed + 2);
            Tensor r = dev({N}, DType::f32, seed + 3), dx = dev({N, h}, DType::bf16, 0), dw = floats(h);
            Tensor part = floats(rmsnorm_bwd_partials(N, h)), sc = floats(unfused_scratch_floats(op, N, h));
            b.fused = [=] { rmsnorm_bwd(b16(dy), b16(x), b16(w), f32(r), b16(dx), f32(dw), f32(part), N, h, 0); };
            b.unfused = [=] { rmsnorm_bwd_unfused(b16(dy), b16(x), b16(w), f32(r), b16(dx), f32(dw), N, h, f32(sc), 0); };
            b.keep = {dy, x, w, r, dx, dw, part, sc}, b.bytes = 6.0 * N * h + 6.0 * h + 4.0 * N, b.unfused_launches = 7;
            break;
        }
        case FusedOp::rope: {
            const int64_t B = s.batch, T = N / B, H = s.heads, Hkv = s.kv_heads, D = s.head_dim;
            std::vector<int32_t> pos(T);
            for (int64_t t = 0; t < T; t++) pos[t] = (int32_t)t;
            Tensor q = dev({B, T, H, D}, DType::bf16, seed), k = dev({B, T, Hkv, D}, DType::bf16, seed + 1);
            Tensor p = Tensor::from_host_i32(pos, {T}, Device::cuda), sc = floats(unfused_scratch_floats(op, B * T * H, D));
            b.fused = [=] { rope(b16(q), b16(k), p.ptr<int32_t>(), B, T, H, Hkv, D, 10000.0f, false, 0); };
            b.unfused = [=] {
                rope_unfused(b16(q), p.ptr<int32_t>(), B, T, H, D, 10000.0f, false, f32(sc), 0);
                rope_unfused(b16(k), p.ptr<int32_t>(), B, T, Hkv, D, 10000.0f, false, f32(sc), 0);
            };
            b.keep = {q, k, p, sc}, b.bytes = 4.0 * B * T * (H + Hkv) * D + 4.0 * T, b.unfused_launches = 10;
            break;
        }
        case FusedOp::swiglu_fwd:
        case FusedOp::swiglu_bwd: {
            const int64_t n = N * s.ffn;
            Tensor g = dev({n}, DType::bf16, seed, 2.0f), u = dev({n}, DType::bf16, seed + 1), d = dev({n}, DType::bf16, seed + 2);
            Tensor o1 = dev({n}, DType::bf16, 0), o2 = dev({n}, DType::bf16, 0), sc = floats(unfused_scratch_floats(op, N, s.ffn));
            if (op == FusedOp::swiglu_fwd) {
                b.fused = [=] { swiglu_fwd(b16(g), b16(u), b16(o1), n, 0); };
                b.unfused = [=] { swiglu_fwd_unfused(b16(g), b16(u), b16(o1), n, f32(sc), 0); };
                b.bytes = 6.0 * n, b.unfused_launches = 3;
            } else {
                b.fused = [=] { swiglu_bwd(b16(d), b16(g), b16(u), b16(o1), b16(o2), n, 0); };
                b.unfused = [=] { swiglu_bwd_unfused(b16(d), b16(g), b16(u), b16(o1), b16(o2), n, f32(sc), 0); };
                b.bytes = 10.0 * n, b.unfused_launches = 5;
            }
            b.keep = {g, u, d, o1, o2, sc};
            break;
        }
        case FusedOp::cross_entropy: {
            const int64_t V = s.vocab;
            Tensor l = dev({N, V}, DType::bf16, seed, 2.0f), dl = dev({N, V}, DType::bf16, 0), loss = floats(N);
            Tensor t = Tensor::empty({N}, DType::i32, Device::cuda, Tag::workspace), sc = floats(unfused_scratch_floats(op, N, V));
            fill_uniform_int(t.ptr<int32_t>(), N, (int32_t)V, seed + 1, 0);
            const float scale = 1.0f / (float)N;
            b.fused = [=] { cross_entropy(b16(l), t.ptr<int32_t>(), f32(loss), b16(dl), N, V, scale, 0); };
            b.unfused = [=] { cross_entropy_unfused(b16(l), t.ptr<int32_t>(), f32(loss), b16(dl), N, V, scale, f32(sc), 0); };
            b.keep = {l, dl, loss, t, sc}, b.bytes = 4.0 * N * V + 8.0 * N, b.unfused_launches = 7;
            break;
        }
        case FusedOp::adamw: {
            std::vector<AdamWTensor> list;
            int64_t params = 0;
            for (int64_t n : s.adamw_sizes) {
                Tensor p = dev({n}, DType::f32, seed++), g = dev({n}, DType::f32, seed++, 0.1f);
                Tensor m = dev({n}, DType::f32, seed++, 0.01f), v = floats(n);
                CUDA_CHECK(cudaMemset(v.data(), 0, v.nbytes()));  // v >= 0
                list.push_back({f32(p), f32(g), f32(m), f32(v), n});
                b.keep.insert(b.keep.end(), {p, g, m, v});
                params += n;
            }
            Tensor table = floats((adamw_table_bytes(list) + 3) / 4);
            b.keep.push_back(table);
            const AdamWParams a{1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 10};
            b.fused = [=] { adamw_multi_tensor(list, a, table.data(), 0); };
            b.unfused = [=] { adamw_unfused(list, a, 0); };
            b.bytes = 28.0 * params, b.unfused_launches = 3 * (int)list.size();
            break;
        }
    }
    return b;
}

}  // namespace

bool run_fused_bench(const GpuBenchOptions& opt) {
    const std::string why = gpu_unavailable();
    if (!why.empty()) {
        std::printf("fused kernels: skipped: %s\n", why.c_str());
        return false;
    }
    const std::string model = opt.model.empty() ? "llama3-8b" : opt.model;
    const FusedShape big = fused_shape_of(model, opt.fused_tokens, 2);
    FusedShape small = fused_shape_of(model, std::min<int64_t>(opt.fused_tokens, 2048), 0);
    small.adamw_sizes = {4096 * 1024, 5, 70001, 4096, 1};  // aligned, odd and tiny tensors
    const double bw = copy_bandwidth_gbs();
    std::printf("fused kernels vs their unfused sequences (one kernel per operation, f32 intermediates in memory)\n");
    std::printf("%s; copy bandwidth measured %.0f GB/s; model %s, %ld tokens (cross-entropy %ld rows), AdamW over 2 layers\n",
                gpu_header().c_str(), bw, model.c_str(), (long)big.tokens, (long)std::min<int64_t>(big.tokens, 4096));
    std::printf("GB/s = the bytes the operation must move / time; medians of %ld interleaved repeats\n", (long)opt.reps);
    std::printf("%-14s %9s %8s %7s | %9s %8s %9s | %8s  %s\n", "operation", "fused ms", "GB/s", "% copy", "unfused ms",
                "GB/s", "launches", "speed-up", "validation (fused, unfused)");
    bool all_valid = true;
    uint64_t seed = 500;
    for (FusedOp op : {FusedOp::rmsnorm_fwd, FusedOp::rmsnorm_bwd, FusedOp::rope, FusedOp::swiglu_fwd, FusedOp::swiglu_bwd,
                       FusedOp::cross_entropy, FusedOp::adamw}) {
        FusedShape check = small, timed = big;
        if (op == FusedOp::cross_entropy) check.tokens = 256, timed.tokens = std::min<int64_t>(big.tokens, 4096);
        const Reports f = check_fused(op, false, check, seed), u = check_fused(op, true, check, seed);
        all_valid &= all_ok(f) && all_ok(u);
        OpBench b = make_op(op, timed, seed++);
        std::vector<Candidate> c = {{"fused", b.fused}, {"unfused", b.unfused}};
        time_interleaved(c, opt.reps);
        const double tf = median_ms(c[0]), tu = median_ms(c[1]);
        std::printf("%-14s %9.3f %8.0f %6.1f%% | %9.3f %8.0f %9d | %7.2fx  %s, %s\n", fused_op_name(op), tf,
                    b.bytes / (tf * 1e-3) * 1e-9, 100 * b.bytes / (tf * 1e-3) * 1e-9 / bw, tu, b.bytes / (tu * 1e-3) * 1e-9,
                    b.unfused_launches, tu / tf, all_ok(f) ? "ok" : "FAILED", all_ok(u) ? "ok" : "FAILED");
        if (!all_ok(f) || !all_ok(u)) std::printf("%s%s", summary(f).c_str(), summary(u).c_str());
    }
    std::printf("validation: %s\n", all_valid ? "every fused kernel and unfused sequence matched" : "FAILED (see above)");
    return all_valid;
}

bool run_attention_bench(const GpuBenchOptions& opt) {
    const std::string why = gpu_unavailable();
    if (!why.empty()) {
        std::printf("flash attention: skipped: %s\n", why.c_str());
        return false;
    }
    const LlamaConfig c = preset(opt.model.empty() ? "llama3-8b" : opt.model);
    std::printf("flash attention (causal, GQA, bf16; mma.sync) vs the trainer's naive CUDA attention (f32, (T, T) in memory)\n");
    std::printf("%s; medians of %ld interleaved repeats; TFLOP/s with causal FLOPs (fwd 2·B·H·T²·D, bwd 2.5x)\n",
                gpu_header().c_str(), (long)opt.reps);
    bool all_valid = true;
    uint64_t seed = 900;
    for (int64_t D : opt.head_dims) {
        const std::string no = flash_bwd_unsupported(D);  // head dim 128: H100/H200 only (171 KB of shared memory)
        if (!no.empty()) {
            std::printf("D=%ld: not run: %s\n", (long)D, no.c_str());
            continue;
        }
        const int64_t H = c.hidden / D, Hkv = H / (c.n_heads / c.n_kv_heads);
        const FlashShape s{opt.attn_batch, opt.attn_seq, H, Hkv, D}, small{1, std::min<int64_t>(opt.attn_seq, 1024), H, Hkv, D};
        const Reports rep = check_flash(small, seed++, 2, true);
        all_valid &= all_ok(rep);
        std::printf("D=%ld: validation at B 1, T %ld, H %ld, Hkv %ld: %s\n%s", (long)D, (long)small.T, (long)H, (long)Hkv,
                    all_ok(rep) ? "ok" : "FAILED", summary(rep).c_str());
        const Shape qs{s.B, s.T, H, D}, ks{s.B, s.T, Hkv, D};
        Tensor q = dev(qs, DType::bf16, seed++), k = dev(ks, DType::bf16, seed++), v = dev(ks, DType::bf16, seed++);
        Tensor dout = dev(qs, DType::bf16, seed++), out = dev(qs, DType::bf16, 0), dq = dev(qs, DType::bf16, 0);
        Tensor dk = dev(ks, DType::bf16, 0), dv = dev(ks, DType::bf16, 0), lse = floats(s.B * H * s.T);
        Tensor work = floats(flash_bwd_workspace_floats(s));
        auto fwd = [&] { flash_fwd(b16(q), b16(k), b16(v), b16(out), f32(lse), s, 0); };
        auto bwd = [&] { flash_bwd(b16(q), b16(k), b16(v), b16(out), f32(lse), b16(dout), b16(dq), b16(dk), b16(dv), f32(work), s, 0); };
        std::vector<Candidate> cand = {{"flash fwd", fwd}, {"flash fwd+bwd", [&] { fwd(), bwd(); }}};
        // the trainer's naive kernel needs B·H·T² f32 probabilities: only where they fit in 8 GB
        const bool naive = (double)s.B * H * s.T * s.T * 4 <= 8e9;
        Tensor q32, k32, v32, o32, l32, do32, dq32, dk32, dv32;
        if (naive) {
            q32 = dev(qs, DType::f32, 1), k32 = dev(ks, DType::f32, 2), v32 = dev(ks, DType::f32, 3), do32 = dev(qs, DType::f32, 4);
            o32 = dev(qs, DType::f32, 0), l32 = floats(s.B * H * s.T), dq32 = dev(qs, DType::f32, 0);
            dk32 = dev(ks, DType::f32, 0), dv32 = dev(ks, DType::f32, 0);
            cand.push_back({"naive f32 fwd", [&] { attention_forward_naive(q32, k32, v32, o32, l32, nullptr); }});
            cand.push_back({"naive f32 fwd+bwd", [&] {
                                attention_forward_naive(q32, k32, v32, o32, l32, nullptr);
                                attention_backward_naive(do32, q32, k32, v32, o32, l32, nullptr, dq32, dk32, dv32);
                            }});
        }
        time_interleaved(cand, opt.reps);
        const double f_fwd = 2.0 * s.B * H * (double)s.T * s.T * D, f_all = 3.5 * f_fwd;
        for (const Candidate& x : cand) {
            const double ms = median_ms(x), fl = x.name.find("bwd") != std::string::npos ? f_all : f_fwd;
            std::printf("  D=%ld B %ld T %ld H %ld Hkv %ld  %-18s %9.3f ms %8.1f TFLOP/s\n", (long)D, (long)s.B, (long)s.T,
                        (long)H, (long)Hkv, x.name.c_str(), ms, fl / (ms * 1e-3) * 1e-12);
        }
        std::printf("RESULT attention D=%ld B=%ld T=%ld H=%ld Hkv=%ld fwd_ms=%.4f fwdbwd_ms=%.4f\n", (long)D, (long)s.B,
                    (long)s.T, (long)H, (long)Hkv, median_ms(cand[0]), median_ms(cand[1]));
    }
    std::printf("validation: %s\n", all_valid ? "flash attention matched the fp64 reference and the naive kernel" : "FAILED (see above)");
    return all_valid;
}

}  // namespace penta::lab
#endif
