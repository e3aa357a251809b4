// cpu_bench.cpp — the CPU GEMM ladder's benchmark (cpu_bench.hpp): validate every rung, then time the rungs
// and OpenBLAS in turn, REPS times, and print medians.
//
// Playbook: "Diving into the GPUs".
//   build/bin/10_kernels --part cpu-gemm        (scripts/bench_10_kernels.sh runs it under two OpenBLAS kernels)
#include "cpu_bench.hpp"

#include <cblas.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "../common/core.hpp"
#include "lab_util.hpp"
#include "reference.hpp"
#include "validate.hpp"

extern "C" char* openblas_get_corename();
extern "C" char* openblas_get_config();

namespace penta::lab {

OpenblasKernel openblas_kernel() {
    OpenblasKernel k{openblas_get_corename(), "other", openblas_get_config()};
    std::string c = k.core;
    std::transform(c.begin(), c.end(), c.begin(), [](unsigned char x) { return (char)std::tolower(x); });
    for (const char* n : {"skylakex", "cooperlake", "sapphirerapids"})
        if (c.find(n) != std::string::npos) k.isa = "avx512";
    for (const char* n : {"haswell", "zen"})
        if (c.find(n) != std::string::npos) k.isa = "avx2";
    return k;
}

namespace {

struct Row {
    std::string label;
    int64_t M, N, K;
};

// seconds per call: `inner` calls in a row (chosen so one measurement takes >= 50 ms)
template <class F>
double seconds_per_call(int64_t inner, F&& f) {
    const double t0 = now_seconds();
    for (int64_t i = 0; i < inner; i++) f();
    return (now_seconds() - t0) / (double)inner;
}

}  // namespace

double run_cpu_gemm_bench(const CpuBenchOptions& opt) {
    CHECK(opt.reps >= 1, "--reps %ld must be >= 1", (long)opt.reps);
    std::vector<CpuRung> rungs = opt.rungs;
    if (rungs.empty())
        for (const auto& r : cpu_rungs())
            if (cpu_rung_unsupported(r.rung).empty()) rungs.push_back(r.rung);
    for (CpuRung r : rungs) {
        const std::string why = cpu_rung_unsupported(r);
        CHECK(why.empty(), "--rungs %s: %s", cpu_rung_info(r).name, why.c_str());
    }
    std::vector<Row> rows;
    for (int64_t n : opt.sizes) {
        CHECK(n >= 1 && n <= 16384, "--sizes %ld: a square size must be in 1..16384", (long)n);
        rows.push_back({strfmt("%ld^3", (long)n), n, n, n});
    }
    if (!opt.model.empty())
        for (const auto& s : model_gemm_shapes(opt.model, opt.tokens))
            rows.push_back({opt.model + " " + s.name, s.M, s.N, s.K});

    const OpenblasKernel ob = openblas_kernel();
    const char* env = std::getenv("OPENBLAS_CORETYPE");
    std::printf("CPU GEMM ladder: C = A @ B, f32, row-major, one thread, %s\n", cpu_name().c_str());
    std::printf("OpenBLAS kernel: %s (%s; OPENBLAS_CORETYPE=%s), ISA class %s; load average %s; %s\n",
                ob.core.c_str(), ob.config.c_str(), env ? env : "<unset: auto-detected>", ob.isa.c_str(),
                load_average().c_str(), today().c_str());
    std::printf("GFLOP/s, medians of %ld interleaved repeats (each repeat times every rung and OpenBLAS in turn)\n",
                (long)opt.reps);
    std::printf("%-34s", "shape (M x N x K)");
    for (CpuRung r : rungs) std::printf(" %8s", cpu_rung_info(r).name);
    std::printf(" %9s  %s\n", "openblas", "speed / OpenBLAS's (median of per-repeat ratios)");

    double first_ratio = -1;
    bool all_valid = true;
    for (const Row& row : rows) {
        const int64_t M = row.M, N = row.N, K = row.K;
        const double flops = 2.0 * (double)M * (double)N * (double)K;
        std::vector<float> A = random_normal(M * K, 11 + (uint64_t)M), B = random_normal(K * N, 12 + (uint64_t)N);
        std::vector<float> C((size_t)(M * N));
        // the reference at a few rows (first, last, and spread between): every rung must match there
        std::vector<int64_t> sample;
        for (int64_t i = 0; i < std::min<int64_t>(M, 8); i++) sample.push_back(i * (M - 1) / std::max<int64_t>(1, 7));
        std::sort(sample.begin(), sample.end());
        sample.erase(std::unique(sample.begin(), sample.end()), sample.end());
        const std::vector<double> ref = gemm_ref(A.data(), B.data(), M, N, K, false, sample);

        std::vector<int64_t> inner(rungs.size() + 1, 1);
        std::vector<bool> timed(rungs.size() + 1, true);
        std::vector<std::vector<double>> t(rungs.size() + 1);
        auto run = [&](size_t i) {
            if (i < rungs.size())
                sgemm_cpu(rungs[i], M, N, K, A.data(), B.data(), C.data());
            else
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)M, (int)N, (int)K, 1.0f, A.data(), (int)K,
                            B.data(), (int)N, 0.0f, C.data(), (int)N);
        };
        // validation run (also the warm-up), which sets how many calls one measurement takes
        for (size_t i = 0; i <= rungs.size(); i++) {
            if (i < rungs.size() && rungs[i] == CpuRung::naive && (double)M * N * K > (double)opt.naive_limit) {
                timed[i] = false;
                continue;
            }
            std::fill(C.begin(), C.end(), NAN);
            const double s = seconds_per_call(1, [&] { run(i); });
            inner[i] = std::max<int64_t>(1, (int64_t)std::ceil(0.05 / std::max(s, 1e-9)));
            std::vector<float> got;
            for (int64_t r : sample) got.insert(got.end(), C.begin() + r * N, C.begin() + (r + 1) * N);
            const ErrorReport e = compare(got, ref, Check::gemm_f32);
            if (!e.ok) {
                all_valid = false;
                std::printf("  %s on %s: %s\n", i < rungs.size() ? cpu_rung_info(rungs[i]).name : "openblas",
                            row.label.c_str(), e.str().c_str());
            }
        }
        for (int64_t rep = 0; rep < opt.reps; rep++)
            for (size_t i = 0; i <= rungs.size(); i++)
                if (timed[i]) t[i].push_back(seconds_per_call(inner[i], [&] { run(i); }));

        std::printf("%-34s", strfmt("%s %ldx%ldx%ld", row.label.c_str(), (long)M, (long)N, (long)K).c_str());
        std::vector<double> gf(rungs.size() + 1, 0);
        for (size_t i = 0; i <= rungs.size(); i++) {
            gf[i] = timed[i] ? flops / median(t[i]) * 1e-9 : 0;
            if (i < rungs.size()) std::printf(" %8s", timed[i] ? strfmt("%.1f", gf[i]).c_str() : "-");
        }
        std::printf(" %9.1f ", gf.back());
        std::string cmp;
        for (size_t i = 0; i < rungs.size(); i++) {
            const bool same = (rungs[i] == CpuRung::avx2 && ob.isa == "avx2") || (rungs[i] == CpuRung::avx512 && ob.isa == "avx512");
            if (rungs[i] != CpuRung::avx2 && rungs[i] != CpuRung::avx512) continue;
            // the median of the per-repeat ratios: both sides of one ratio ran within a fraction of a second of
            // each other, so the machine's drift (other jobs coming and going) cancels, as in medians it does not
            std::vector<double> ratios;
            for (int64_t r = 0; r < opt.reps; r++) ratios.push_back(t.back()[r] / t[i][r]);
            const double ratio = median(ratios);
            cmp += strfmt(" %s %.2f%s", cpu_rung_info(rungs[i]).name, ratio, same ? " (same ISA)" : "");
            if (same && first_ratio < 0 && row.M == row.N && row.N == row.K) first_ratio = ratio;
        }
        std::printf("%s\n", cmp.c_str());
    }
    std::printf("validation: %s (gemm f32 bound: rel %.0e; rows sampled from the fp64 reference); load average at the end %s\n",
                all_valid ? "every rung and OpenBLAS matched" : "FAILED (see above)", bound_of(Check::gemm_f32).rel_fro,
                load_average().c_str());
    if (first_ratio >= 0)
        std::printf("best rung of OpenBLAS's ISA (%s) at %s: %.0f%% of OpenBLAS (target >= 70%%)\n", ob.isa.c_str(),
                    rows.front().label.c_str(), 100 * first_ratio);
    CHECK(all_valid, "a CPU rung failed its validation (above)");
    return first_ratio;
}

}  // namespace penta::lab
