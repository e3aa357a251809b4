// bench/ops.cpp — op micro-benchmarks: prints figures, asserts nothing.
//
//   make bench                      (runs this via scripts/run_bench.sh, one BLAS thread)
//   build/bin/bench_ops [--device cpu|cuda] [--reps N]
//
// 1. GEMM: our matmul (the op the trainer calls, through ops.hpp's checks and dispatch) beside a raw
//    cblas_sgemm on the same shapes — the difference is our overhead, which should be ~0.
// 2. Attention: the naive version (materialises the T x T probabilities) vs the tiled online-softmax
//    version (playbook: "Flash attention"), forward and backward, at a few sequence lengths.
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>

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
    std::printf("\nGEMM (f32, C = A @ B^T as in a linear layer), best of %d\n", reps);
    std::printf("%-22s %14s %14s\n", "M x N x K", "ours GFLOP/s", dev == Device::cpu ? "cblas GFLOP/s" : "");
    const int shapes[][3] = {{256, 256, 256}, {512, 768, 256}, {1024, 1024, 1024}, {2048, 704, 256}, {512, 4096, 1024}};
    for (auto& s : shapes) {
        int M = s[0], N = s[1], K = s[2];
        Tensor A = rnd({M, K}, 1, dev), B = rnd({N, K}, 2, dev), C = Tensor::empty({M, N}, DType::f32, dev, Tag::workspace);
        double flops = 2.0 * M * N * K;
        double ours = best_seconds(reps, dev, [&] { matmul(A, B, C, false, true); });
        char label[64];
        std::snprintf(label, sizeof label, "%d x %d x %d", M, N, K);
        if (dev == Device::cpu) {
            double raw = best_seconds(reps, dev, [&] {
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, A.ptr<float>(), K,
                            B.ptr<float>(), K, 0.0f, C.ptr<float>(), N);
            });
            std::printf("%-22s %14.1f %14.1f\n", label, flops / ours * 1e-9, flops / raw * 1e-9);
        } else {
            std::printf("%-22s %14.1f\n", label, flops / ours * 1e-9);
        }
    }
}

static void bench_attention(Device dev, int reps) {
    std::printf("\nCausal attention, B=1, 8 heads (4 kv heads), head dim 64, best of %d, milliseconds\n", reps);
    std::printf("%-6s %12s %12s %12s %12s %16s\n", "T", "naive fwd", "tiled fwd", "naive bwd", "tiled bwd",
                "naive P bytes");
    for (int T : {128, 256, 512, 1024}) {
        int64_t B = 1, nh = 8, nkv = 4, hd = 64;
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
        std::printf("%-6d %12.3f %12.3f %12.3f %12.3f %16ld\n", T, nf * 1e3, tf * 1e3, nb * 1e3, tb * 1e3,
                    (long)probs.nbytes());
    }
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
        return 0;
    });
}
