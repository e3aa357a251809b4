// gpu_bench_gemm.cpp — the GPU GEMM ladder's table: every rung validated against the fp64 reference (rows
// sampled) at every shape, then timed with cuBLAS (f32: cublasSgemm; bf16: cuBLASLt, f32 accumulation) in
// interleaved repeats: ms, TFLOP/s, % of cuBLAS in the same layout, and the roofline position (achieved over
// min(peak, intensity · copy bandwidth)).
//
// Playbook: "Diving into the GPUs".
//   build/bin/10_kernels --part gpu-gemm [--gpu-sizes 1024,2048,4096,8192] [--model llama3-8b --tokens 4096]
#if defined(PENTA_CUDA)
#include <cublasLt.h>
#include <cublas_v2.h>

#include <cstdio>
#include <map>
#include <tuple>

#include "../common/core.hpp"
#include "../common/metrics.hpp"
#include "../common/tensor.hpp"
#include "gpu_bench.hpp"
#include "gpu_checks.hpp"
#include "gpu_kernels.hpp"
#include "gpu_timing.hpp"
#include "lab_util.hpp"

#define LAB_CUBLAS(call)                                                                           \
    do {                                                                                           \
        cublasStatus_t st_ = (call);                                                               \
        CHECK(st_ == CUBLAS_STATUS_SUCCESS, #call " failed: %s", cublasGetStatusString(st_));      \
    } while (0)

namespace penta::lab {

namespace {

cublasHandle_t blas() {
    static cublasHandle_t h = nullptr;
    if (!h) LAB_CUBLAS(cublasCreate(&h));  // default math mode: f32 stays f32 (no TF32)
    return h;
}

// row-major C (M, N) = A (M, K) @ B (K, N) as cuBLAS's column-major C^T = B^T A^T
void sgemm_nn(int64_t M, int64_t N, int64_t K, const float* A, const float* B, float* C) {
    const float one = 1, zero = 0;
    LAB_CUBLAS(cublasSgemm(blas(), CUBLAS_OP_N, CUBLAS_OP_N, (int)N, (int)M, (int)K, &one, B, (int)N, A, (int)K, &zero, C, (int)N));
}

// one cuBLASLt bf16 GEMM, planned once per (layout, shape): the descriptors and the heuristic's first algorithm
struct LtPlan {
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulAlgo_t algo;
};
constexpr size_t kLtWorkspace = 32u << 20;

cublasLtHandle_t lt() {
    static cublasLtHandle_t h = nullptr;
    if (!h) LAB_CUBLAS(cublasLtCreate(&h));
    return h;
}

const LtPlan& lt_plan(bool b_nk, int64_t M, int64_t N, int64_t K) {
    static std::map<std::tuple<bool, int64_t, int64_t, int64_t>, LtPlan> plans;
    auto key = std::make_tuple(b_nk, M, N, K);
    auto it = plans.find(key);
    if (it != plans.end()) return it->second;
    LtPlan p;
    // column-major view: C^T (N, M) = op(B^T) (N, K) @ A^T (K, M); B (K, N) row-major is B^T (N, K) column-major
    // with ld N (no transpose); B stored (N, K) row-major is (K, N) column-major with ld K, transposed
    const cublasOperation_t ta = b_nk ? CUBLAS_OP_T : CUBLAS_OP_N, tb = CUBLAS_OP_N;
    LAB_CUBLAS(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    LAB_CUBLAS(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    LAB_CUBLAS(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    LAB_CUBLAS(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_16BF, b_nk ? K : N, b_nk ? N : K, b_nk ? K : N));
    LAB_CUBLAS(cublasLtMatrixLayoutCreate(&p.b, CUDA_R_16BF, K, M, K));
    LAB_CUBLAS(cublasLtMatrixLayoutCreate(&p.c, CUDA_R_16BF, N, M, N));
    cublasLtMatmulPreference_t pref;
    LAB_CUBLAS(cublasLtMatmulPreferenceCreate(&pref));
    LAB_CUBLAS(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &kLtWorkspace,
                                                    sizeof kLtWorkspace));
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    LAB_CUBLAS(cublasLtMatmulAlgoGetHeuristic(lt(), p.op, p.a, p.b, p.c, p.c, pref, 1, &res, &found));
    CHECK(found == 1, "cuBLASLt has no bf16 algorithm for %ld x %ld x %ld", (long)M, (long)N, (long)K);
    p.algo = res.algo;
    LAB_CUBLAS(cublasLtMatmulPreferenceDestroy(pref));
    return plans[key] = p;
}

void lt_gemm(bool b_nk, int64_t M, int64_t N, int64_t K, const void* A, const void* B, void* C, void* workspace) {
    const LtPlan& p = lt_plan(b_nk, M, N, K);
    const float one = 1, zero = 0;
    LAB_CUBLAS(cublasLtMatmul(lt(), p.op, &one, B, p.a, A, p.b, &zero, C, p.c, C, p.c, &p.algo, workspace, kLtWorkspace, 0));
}

struct Row {
    std::string label;
    int64_t M, N, K;
    bool f32;  // also time the f32 ladder (square sizes; the model's shapes are bf16 only)
};

}  // namespace

bool run_gpu_gemm_bench(const GpuBenchOptions& opt) {
    const std::string why = gpu_unavailable();
    if (!why.empty()) {
        std::printf("GPU GEMM ladder: skipped: %s\n", why.c_str());
        return false;
    }
    std::vector<GpuRung> rungs;
    for (const std::string& r : opt.rungs) rungs.push_back(parse_gpu_rung(r));
    if (rungs.empty())
        for (const auto& i : gpu_rungs()) rungs.push_back(i.rung);
    const std::string name = device_name();
    const double bw = copy_bandwidth_gbs() * 1e9;
    const double peak_bf16 = gpu_peak_flops(name, DType::bf16), peak_f32 = gpu_peak_flops(name, DType::f32);
    std::printf("GPU GEMM ladder: C = A @ B (B stored (N, K) for mma/wgmma and their cuBLASLt TN), f32 accumulation\n");
    std::printf("%s; copy bandwidth measured %.0f GB/s; datasheet peaks bf16 %.0f, f32 %.0f TFLOP/s; load average %s\n",
                gpu_header().c_str(), bw * 1e-9, peak_bf16 * 1e-12, peak_f32 * 1e-12, load_average().c_str());
    std::printf("medians of %ld interleaved repeats (CUDA events); every rung validated first (16 rows vs fp64)\n",
                (long)opt.reps);
    std::printf("%-28s %-5s %-14s %9s %9s %10s %7s  %s\n", "shape (M x N x K)", "type", "kernel", "ms", "TFLOP/s",
                "% cuBLAS", "% roof", "validation");
    std::vector<Row> rows;
    for (int64_t n : opt.sizes) rows.push_back({strfmt("%ld^3", (long)n), n, n, n, true});
    if (!opt.model.empty())
        for (const auto& s : model_gemm_shapes(opt.model, opt.tokens))
            rows.push_back({opt.model + " " + s.name, s.M, s.N, s.K, false});
    Tensor workspace = Tensor::empty({(int64_t)kLtWorkspace / 4}, DType::f32, Device::cuda, Tag::workspace);
    std::map<std::pair<GpuRung, bool>, double> rate;  // the last measured FLOP/s of (rung, f32)
    bool all_valid = true;
    uint64_t seed = 1000;
    for (const Row& row : rows) {
        const double flops = 2.0 * row.M * row.N * row.K;
        for (bool f32 : {true, false}) {
            if (f32 && !row.f32) continue;
            const GemmType t = f32 ? GemmType::f32 : GemmType::bf16;
            const DType dt = f32 ? DType::f32 : DType::bf16;
            Tensor A = Tensor::empty({row.M, row.K}, dt, Device::cuda, Tag::workspace);
            Tensor B = Tensor::empty({row.K, row.N}, dt, Device::cuda, Tag::workspace);
            Tensor Bt = Tensor::empty({row.N, row.K}, dt, Device::cuda, Tag::workspace);
            Tensor C = Tensor::empty({row.M, row.N}, dt, Device::cuda, Tag::workspace);
            fill_normal(A.data(), A.numel(), !f32, seed++, 1.0f, 0);
            fill_normal(B.data(), B.numel(), !f32, seed++, 1.0f, 0);
            fill_normal(Bt.data(), Bt.numel(), !f32, seed++, 1.0f, 0);
            std::vector<Candidate> cands;
            std::vector<std::string> checks, layouts;
            bool any_tn = false;
            for (GpuRung r : rungs) {
                const GpuRungInfo& info = gpu_rung_info(r);
                if (!gpu_rung_unsupported(r, t).empty()) continue;
                auto it = rate.find({r, f32});
                if (it != rate.end() && flops / it->second > opt.slow_limit_s) {
                    std::printf("%-28s %-5s %-14s skipped: ~%.1f s per call at its last rate\n", row.label.c_str(),
                                f32 ? "f32" : "bf16", info.name, flops / it->second);
                    continue;
                }
                const Reports rep = check_gpu_gemm(r, t, row.M, row.N, row.K, seed++, 16);
                all_valid &= all_ok(rep);
                checks.push_back(rep.front().r.str());
                layouts.push_back(info.b_nk ? "TN" : "NN");
                any_tn |= info.b_nk;
                const void* b = info.b_nk ? Bt.data() : B.data();
                cands.push_back({info.name, [=, &A, &C] { gpu_gemm(r, t, row.M, row.N, row.K, A.data(), b, C.data(), 0); }});
            }
            const size_t n_rungs = cands.size();
            if (f32) {
                cands.push_back({"cublas sgemm", [&] { sgemm_nn(row.M, row.N, row.K, A.ptr<float>(), B.ptr<float>(), C.ptr<float>()); }});
            } else {
                cands.push_back({"cublasLt NN", [&] { lt_gemm(false, row.M, row.N, row.K, A.data(), B.data(), C.data(), workspace.data()); }});
                if (any_tn)
                    cands.push_back({"cublasLt TN", [&] { lt_gemm(true, row.M, row.N, row.K, A.data(), Bt.data(), C.data(), workspace.data()); }});
            }
            time_interleaved(cands, opt.reps);
            const double bytes = (double)(row.M * row.K + row.K * row.N + row.M * row.N) * (f32 ? 4 : 2);
            const double attainable = std::min(f32 ? peak_f32 : peak_bf16, flops / bytes * bw);
            auto base_ms = [&](const std::string& layout) {
                const std::string want = f32 ? "cublas sgemm" : "cublasLt " + layout;
                for (const Candidate& c : cands)
                    if (c.name == want) return median_ms(c);
                return 0.0;
            };
            for (size_t i = 0; i < cands.size(); i++) {
                const double ms = median_ms(cands[i]), achieved = flops / (ms * 1e-3);
                const bool rung = i < n_rungs;
                if (rung) rate[{parse_gpu_rung(cands[i].name), f32}] = achieved;
                const double base = rung ? base_ms(layouts[i]) : ms;
                std::printf("%-28s %-5s %-14s %9.3f %9.1f %9.1f%% %6.1f%%  %s\n",
                            strfmt("%s %ldx%ldx%ld", row.label.c_str(), (long)row.M, (long)row.N, (long)row.K).c_str(),
                            f32 ? "f32" : "bf16", cands[i].name.c_str(), ms, achieved * 1e-12, 100 * base / ms,
                            attainable > 0 ? 100 * achieved / attainable : 0.0, rung ? checks[i].c_str() : "(the yardstick)");
            }
        }
    }
    std::printf("validation: %s; load average at the end %s\n", all_valid ? "every rung matched" : "FAILED (see above)",
                load_average().c_str());
    return all_valid;
}

}  // namespace penta::lab
#endif
