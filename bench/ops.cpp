// bench/ops.cpp — op micro-benchmarks: prints figures, asserts nothing.
//
//   make bench                      (runs this via scripts/run_bench.sh, one BLAS thread)
//   build/bin/bench_ops [--device cpu|cuda] [--reps N]
//
// 1. GEMM: our matmul (the op the trainer calls, through ops.hpp's checks and dispatch) beside a raw
//    cblas_sgemm on the same shapes — the difference is our overhead, which should be ~0.
//    Then one 32 x 32 x 32 tile product both ways, A @ B and A @ B^T: OpenBLAS's small-matrix kernel for
//    the second is much slower, which is why the CPU attention transposes K and V tiles first.
//    On a GPU: larger shapes (a ~1B Llama's linears), fp32 beside TF32 (Tf32Scope, what --tf32 runs).
// 2. Attention: the naive version (materialises the T x T probabilities) vs the tiled online-softmax
//    version (playbook: "Flash attention"), forward and backward, at a few sequence lengths, and at the
//    shape chapter 01 trains `small` with (16 sequences of 32 tokens, 8 heads of 32). On a GPU also the
//    tensor-core (bf16) kernels beside the f32 ones at ~1B / ~8B Llama attention shapes, in TFLOP/s.
// 3. The other ops of one training step of `small` on the CPU (16 x 32 tokens, hidden 256, ffn 704,
//    vocab 256, 3.0M parameters): where a step spends the time its GEMMs do not.
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>

#include "../common/data.hpp"          // kIgnoreTarget
#include "../common/model_config.hpp"  // preset
#include "../common/ops.hpp"
#include "../common/runtime.hpp"

using namespace penta;

static double best_seconds(int reps, Device dev, const std::function<void()>& fn) {
    fn();  // warm-up
    device_synchronize(dev);
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        auto t0 = std::chrono::steady_clock::now();
        fn();
        device_synchronize(dev);
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return best;
}

static Tensor rnd(const Shape& s, uint64_t seed, Device dev) {
    Tensor t = Tensor::empty(s, DType::f32, Device::cpu, Tag::workspace);
    init_normal(t, seed, 1, 1.0f);
    return dev == Device::cpu ? t : t.clone(dev, Tag::workspace);
}

static void bench_gemm(Device dev, int reps) {
    const bool gpu = dev != Device::cpu;
    std::printf("\nGEMM (f32, C = A @ B^T as in a linear layer), best of %d\n", reps);
    std::printf("%-24s %14s %14s\n", "M x N x K", "ours GFLOP/s", gpu ? "ours TF32" : "cblas GFLOP/s");
    // GPU shapes: a ~1B Llama's linears at 4096 tokens (hidden 2048, ffn 8192, vocab 128256), and a square one
    const int cpu_shapes[][3] = {{256, 256, 256}, {512, 768, 256}, {1024, 1024, 1024}, {2048, 704, 256}, {512, 4096, 1024}};
    const int gpu_shapes[][3] = {{4096, 4096, 4096}, {8192, 2048, 2048}, {4096, 8192, 2048}, {4096, 128256, 2048}};
    const int n_shapes = gpu ? 4 : 5;
    for (int i = 0; i < n_shapes; i++) {
        const int* s = gpu ? gpu_shapes[i] : cpu_shapes[i];
        int M = s[0], N = s[1], K = s[2];
        Tensor A = rnd({M, K}, 1, dev), B = rnd({N, K}, 2, dev), C = Tensor::empty({M, N}, DType::f32, dev, Tag::workspace);
        double flops = 2.0 * M * N * K;
        double ours = best_seconds(reps, dev, [&] { matmul(A, B, C, false, true); });
        char label[64];
        std::snprintf(label, sizeof label, "%d x %d x %d", M, N, K);
        if (!gpu) {
            double raw = best_seconds(reps, dev, [&] {
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, A.ptr<float>(), K,
                            B.ptr<float>(), K, 0.0f, C.ptr<float>(), N);
            });
            std::printf("%-24s %14.1f %14.1f\n", label, flops / ours * 1e-9, flops / raw * 1e-9);
        } else {
            const Tf32Scope tf32(true);  // what --tf32 runs: the same call on TF32 tensor cores
            double t = best_seconds(reps, dev, [&] { matmul(A, B, C, false, true); });
            std::printf("%-24s %14.1f %14.1f\n", label, flops / ours * 1e-9, flops / t * 1e-9);
        }
    }
    if (dev != Device::cpu) return;
    // one attention tile: 32 queries x 32 keys x head dim 32, rows strided as in a (B, T, nh, hd) tensor
    Tensor Q = rnd({32, 256}, 3, dev), Kt = rnd({32, 32}, 4, dev), S = rnd({32, 32}, 5, dev);
    const float* q = Q.ptr<float>();
    const float* kt = Kt.ptr<float>();
    float* sc = S.ptr<float>();
    double nn = best_seconds(reps, dev, [&] {
        for (int i = 0; i < 100; i++)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 32, 32, 32, 1.0f, q, 256, kt, 32, 0.0f, sc, 32);
    });
    double nt = best_seconds(reps, dev, [&] {
        for (int i = 0; i < 100; i++)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, 32, 32, 32, 1.0f, q, 256, kt, 32, 0.0f, sc, 32);
    });
    std::printf("%-22s %14s %14.1f   (cblas, A @ B)\n", "32 x 32 x 32 tile", "", 2.0 * 32 * 32 * 32 * 100 / nn * 1e-9);
    std::printf("%-22s %14s %14.1f   (cblas, A @ B^T)\n", "32 x 32 x 32 tile", "", 2.0 * 32 * 32 * 32 * 100 / nt * 1e-9);
}

static void bench_attention(Device dev, int reps) {
    std::printf("\nCausal attention, 8 heads (4 kv heads), best of %d, milliseconds\n", reps);
    std::printf("%-14s %12s %12s %12s %12s %16s\n", "B x T, hd", "naive fwd", "tiled fwd", "naive bwd",
                "tiled bwd", "naive P bytes");
    const int64_t shapes[][3] = {{1, 128, 64}, {1, 256, 64}, {1, 512, 64}, {1, 1024, 64}, {16, 32, 32}};
    for (auto& shape : shapes) {
        const int64_t B = shape[0], T = shape[1], hd = shape[2], nh = 8, nkv = 4;
        Tensor q = rnd({B, T, nh, hd}, 3, dev), k = rnd({B, T, nkv, hd}, 4, dev), v = rnd({B, T, nkv, hd}, 5, dev);
        Tensor o = Tensor::empty(q.shape, DType::f32, dev, Tag::workspace), lse = Tensor::empty({B, nh, T}, DType::f32, dev, Tag::workspace);
        Tensor dout = rnd(q.shape, 6, dev);
        Tensor dq = Tensor::zeros(q.shape, DType::f32, dev, Tag::workspace), dk = Tensor::zeros(k.shape, DType::f32, dev, Tag::workspace),
               dv = Tensor::zeros(k.shape, DType::f32, dev, Tag::workspace);
        Tensor probs = Tensor::empty({B, nh, T, T}, DType::f32, dev, Tag::workspace);
        double nf = best_seconds(reps, dev, [&] { attention_forward_naive(q, k, v, o, lse, &probs); });
        double nb = best_seconds(reps, dev, [&] { attention_backward_naive(dout, q, k, v, o, lse, &probs, dq, dk, dv); });
        double tf = best_seconds(reps, dev, [&] { attention_forward_tiled(q, k, v, o, lse); });
        double tb = best_seconds(reps, dev, [&] { attention_backward_tiled(dout, q, k, v, o, lse, dq, dk, dv); });
        char label[32];
        std::snprintf(label, sizeof label, "%ld x %ld, %ld", (long)B, (long)T, (long)hd);
        std::printf("%-14s %12.3f %12.3f %12.3f %12.3f %16ld\n", label, nf * 1e3, tf * 1e3, nb * 1e3, tb * 1e3,
                    (long)probs.nbytes());
    }
}

// The tensor-core kernels (bf16) beside the f32 thread-per-row ones at the attention shapes of ~1B and ~8B
// Llamas (32 query heads, 8 kv heads, head dim 64 / 128), causal: FLOPs 4·B·nh·T²·hd / 2 forward, 2.5x that
// backward. tools/torch_gpu_bench.py times scaled_dot_product_attention at the same shapes.
static void bench_attention_tc(int reps) {
    std::printf("\nCausal attention on the GPU, tiled: f32 (thread per row) vs bf16 (tensor cores), best of %d\n", reps);
    std::printf("%-22s %10s %10s %10s %10s %10s %10s\n", "B x T, nh/nkv, hd", "f32 fwd ms", "f32 bwd ms", "bf16 fwd",
                "bf16 bwd", "fwd TF/s", "bwd TF/s");
    const int64_t shapes[][5] = {{4, 1024, 32, 8, 64}, {2, 2048, 32, 8, 128}, {1, 4096, 32, 8, 64}};
    const Device dev = Device::cuda;
    for (auto& s : shapes) {
        const int64_t B = s[0], T = s[1], nh = s[2], nkv = s[3], hd = s[4];
        double ms[2][2];
        for (int low = 0; low < 2; low++) {
            const DType dt = low ? DType::bf16 : DType::f32;
            auto as = [&](const Tensor& x) {
                if (dt == DType::f32) return x;
                Tensor y = Tensor::empty(x.shape, dt, dev, Tag::workspace);
                convert(y, x);
                return y;
            };
            Tensor q = as(rnd({B, T, nh, hd}, 3, dev)), k = as(rnd({B, T, nkv, hd}, 4, dev)), v = as(rnd({B, T, nkv, hd}, 5, dev));
            Tensor dout = as(rnd(q.shape, 6, dev)), o = Tensor::empty(q.shape, dt, dev, Tag::workspace);
            Tensor lse = Tensor::empty({B, nh, T}, DType::f32, dev, Tag::workspace);
            Tensor dq = Tensor::zeros(q.shape, dt, dev, Tag::workspace), dk = Tensor::zeros(k.shape, dt, dev, Tag::workspace),
                   dv = Tensor::zeros(k.shape, dt, dev, Tag::workspace);
            ms[low][0] = 1e3 * best_seconds(reps, dev, [&] { attention_forward_tiled(q, k, v, o, lse); });
            ms[low][1] = 1e3 * best_seconds(reps, dev, [&] { attention_backward_tiled(dout, q, k, v, o, lse, dq, dk, dv); });
        }
        const double flops = 4.0 * B * nh * T * T * hd / 2;
        char label[48];
        std::snprintf(label, sizeof label, "%ld x %ld, %ld/%ld, %ld", (long)B, (long)T, (long)nh, (long)nkv, (long)hd);
        std::printf("%-22s %10.3f %10.3f %10.3f %10.3f %10.1f %10.1f\n", label, ms[0][0], ms[0][1], ms[1][0], ms[1][1],
                    flops / ms[1][0] * 1e-9, 2.5 * flops / ms[1][1] * 1e-9);
    }
}

// One call of each non-GEMM op at the shapes of a chapter-01 step of `small` (N = 16 x 32 tokens); the
// last column multiplies by the calls per step (4 layers; the optimizer ops run once over all parameters).
static void bench_step_ops(Device dev, int reps) {
    const int64_t N = 512, h = 256, f = 704, V = 256, B = 16, T = 32, nh = 8, nkv = 4, hd = 32;
    const int64_t P = preset("small").n_params();
    std::printf("\nThe other ops of one step of `small` (N = %ld tokens), best of %d, milliseconds\n", (long)N, reps);
    std::printf("%-34s %10s %8s %12s\n", "op", "one call", "calls", "per step");
    auto row = [&](const char* name, int calls, const std::function<void()>& fn) {
        double t = best_seconds(reps, dev, fn);
        std::printf("%-34s %10.3f %8d %12.3f\n", name, t * 1e3, calls, t * calls * 1e3);
    };
    auto empty = [&](const Shape& s) { return Tensor::empty(s, DType::f32, dev, Tag::workspace); };
    Tensor x = rnd({N, h}, 1, dev), w = rnd({h}, 2, dev), y = empty({N, h}), rstd = empty({N}), dx = empty({N, h});
    Tensor dw = Tensor::zeros({h}, DType::f32, dev, Tag::workspace);
    row("rmsnorm forward (N, h)", 9, [&] { rmsnorm_forward(x, w, y, rstd, 1e-5f); });
    row("rmsnorm backward (N, h)", 9, [&] { rmsnorm_backward(y, x, w, rstd, dx, dw); });
    Tensor g = rnd({N, f}, 3, dev), u = rnd({N, f}, 4, dev), act = empty({N, f}), dg = empty({N, f}), du = empty({N, f});
    row("swiglu forward (N, f)", 4, [&] { swiglu_forward(g, u, act); });
    row("swiglu backward (N, f)", 4, [&] { swiglu_backward(act, g, u, dg, du); });
    Tensor q = rnd({B, T, nh, hd}, 5, dev), qr = empty(q.shape);
    std::vector<int32_t> ids(T);
    for (int64_t t = 0; t < T; t++) ids[t] = (int32_t)t;
    Tensor pos = Tensor::from_host_i32(ids, {T}, dev);
    std::vector<float> freqs(hd / 2);  // the default table of rope.hpp
    for (int64_t i = 0; i < hd / 2; i++) freqs[i] = 1.0f / powf(10000.0f, (float)(2 * i) / (float)hd);
    Tensor freq = Tensor::from_host(freqs, {hd / 2}, dev);
    row("rope (B, T, nh, hd), q or dq", 8, [&] { rope_forward(q, pos, freq, qr); });
    Tensor k = rnd({B, T, nkv, hd}, 6, dev), kr = empty(k.shape);
    row("rope (B, T, nkv, hd), k or dk", 8, [&] { rope_forward(k, pos, freq, kr); });
    row("residual add (N, h)", 8, [&] { add(x, y, dx); });
    Tensor logits = rnd({N, V}, 7, dev), dlogits = empty({N, V}), no_losses;
    std::vector<int32_t> tg(N);
    for (int64_t n = 0; n < N; n++) tg[n] = (int32_t)(n % V);
    Tensor targets = Tensor::from_host_i32(tg, {N}, dev);
    row("cross-entropy fwd + bwd (N, V)", 1,
        [&] { cross_entropy_forward_backward(logits, targets, dlogits, 1.0f, kIgnoreTarget, no_losses); });
    Tensor p = rnd({P}, 8, dev), grad = rnd({P}, 9, dev);
    Tensor m = Tensor::zeros({P}, DType::f32, dev, Tag::workspace), v = Tensor::zeros({P}, DType::f32, dev, Tag::workspace);
    int step = 1;
    row("sum of squares of the grads", 1, [&] { sum_squares(grad); });
    row("AdamW step over all parameters", 1, [&] { adamw_step(p, grad, m, v, AdamWConfig{}, step++); });
    row("zero the grads", 1, [&] { fill(grad, 0.0f); });
}

int main(int argc, char** argv) {
    return run_main(argc, argv, [](int argc, char** argv) {
        std::string device = "cpu";
        int reps = 5;
        for (int i = 1; i < argc; i++) {
            std::string a = argv[i];
            if (a == "--device" && i + 1 < argc) device = argv[++i];
            else if (a == "--reps" && i + 1 < argc) reps = std::atoi(argv[++i]);
            else FAIL("bench_ops: unknown argument %s (accepted: --device cpu|cuda, --reps N)", a.c_str());
        }
        CHECK(device == "cpu" || device == "cuda", "--device %s must be cpu or cuda", device.c_str());
        CHECK(reps >= 1, "--reps %d must be >= 1", reps);
        Device dev = device == "cpu" ? Device::cpu : Device::cuda;
        if (dev == Device::cuda && !cuda_available()) FAIL("--device cuda: no CUDA device visible");
        std::printf("bench_ops on %s\n", device.c_str());
        bench_gemm(dev, reps);
        bench_attention(dev, reps);
        if (dev == Device::cuda) bench_attention_tc(reps);
        bench_step_ops(dev, reps);
        return 0;
    });
}
