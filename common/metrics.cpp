// metrics.cpp — FLOPs per token, peak FLOP/s per device, the step log and the memory table (metrics.hpp).
//
// Playbook: "Memory usage in Transformers" and MFU (PaLM appendix B).
// Tested by tests/01_single_gpu/test_optim.cpp: `build/bin/tests_01 -ts='ch01 np1'`.
#include "metrics.hpp"

#include <cblas.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>

#include "ops.hpp"
#if defined(PENTA_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace penta {

double model_flops_per_token(int64_t n_matmul_params, int64_t n_layers, int64_t attn_width, int64_t seq_len) {
    return 6.0 * (double)n_matmul_params + 12.0 * (double)n_layers * (double)attn_width * (double)seq_len;
}

double recompute_flops_per_token(Recompute r, bool kernel_keeps_probs, int64_t layer_matmul_params, int64_t n_layers,
                                 int64_t attn_width, int64_t seq_len) {
    const double L = (double)n_layers, hT = (double)attn_width * (double)seq_len;
    double f = 0;
    if (r == Recompute::full) f += L * (2.0 * (double)layer_matmul_params + 4.0 * hT);
    const bool rebuilt = r == Recompute::selective || !kernel_keeps_probs;
    if (rebuilt) f += L * 2.0 * hT;
    return f;
}

// ---------------------------------------------------------------------------------------------------
// peak FLOP/s

namespace {

// NVIDIA datasheet figures, dense (the datasheets' headline tensor numbers are 2x: structured sparsity).
// Searched in order, so a more specific name comes before a name it contains (H100 PCIe before H100).
struct GpuPeak {
    const char* name;
    double half, tf32, fp32, fp8;  // FLOP/s; half = bf16/fp16 tensor cores; 0 = not supported
};
const GpuPeak kGpuPeaks[] = {
    {"H100 PCIe", 756e12, 378e12, 51e12, 1513e12},
    {"H100 NVL", 835e12, 418e12, 60e12, 1671e12},
    {"H200", 989e12, 494e12, 67e12, 1979e12},  // same SM count and clocks as H100 SXM, more HBM
    {"H100", 989e12, 494e12, 67e12, 1979e12},  // SXM
    {"A100", 312e12, 156e12, 19.5e12, 0},
    {"L40S", 362e12, 183e12, 91.6e12, 733e12},
    {"L40", 181e12, 90.5e12, 90.5e12, 362e12},
    {"L4", 121e12, 60e12, 30.3e12, 242e12},
    {"V100", 125e12, 0, 15.7e12, 0},  // fp16 tensor cores only (no bf16)
    {"RTX 4090", 165e12, 82.6e12, 82.6e12, 330e12},  // with fp32 accumulation
    {"RTX 3090", 71e12, 35.6e12, 35.6e12, 0},
};

std::string gpu_name() {
#if defined(PENTA_CUDA)
    int dev = 0;
    cudaDeviceProp prop;
    if (cudaGetDevice(&dev) == cudaSuccess && cudaGetDeviceProperties(&prop, dev) == cudaSuccess)
        return prop.name;
#endif
    return "unknown GPU";
}

}  // namespace

double gpu_peak_flops(const std::string& name, DType dtype, bool tf32) {
    for (const auto& g : kGpuPeaks) {
        if (name.find(g.name) == std::string::npos) continue;
        switch (dtype) {
            case DType::f32: return tf32 ? g.tf32 : g.fp32;
            case DType::bf16: case DType::f16: return g.half;
            case DType::e4m3: case DType::e5m2: return g.fp8;
            case DType::i32: return 0;
        }
    }
    return 0;
}

double cpu_sgemm_peak_flops() {
    static std::map<int, double> measured;  // by OpenBLAS thread count
    const int threads = openblas_get_num_threads();
    auto it = measured.find(threads);
    if (it != measured.end()) return it->second;
    // plain vectors, not Tensors: the measurement must not show up in the memory table
    const int n = 1024;
    std::vector<float> a((size_t)n * n), b((size_t)n * n), c((size_t)n * n);
    for (size_t i = 0; i < a.size(); i++) {
        a[i] = 1e-3f * (float)(i % 97);
        b[i] = 1e-3f * (float)(i % 89);
    }
    double best = 0;
    // the first call warms caches and starts BLAS threads; the best of the other 11 (~0.15 s in all), since a
    // shared machine's speed drifts and a peak caught in a slow moment would overstate every MFU after it
    for (int rep = 0; rep < 12; rep++) {
        Timer t;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f,
                    c.data(), n);
        double s = t.seconds();
        if (rep > 0 && s > 0) best = std::max(best, 2.0 * n * n * n / s);
    }
    measured[threads] = best;
    return best;
}

PeakFlops device_peak_flops(Device d, DType dtype, bool tf32) {
    if (d == Device::cpu) {
        double f = cpu_sgemm_peak_flops();
        return {f, strfmt("cpu: sgemm 1024^3 measured %.1f GFLOP/s with %d OpenBLAS thread(s)", f / 1e9,
                          openblas_get_num_threads())};
    }
    std::string name = gpu_name();
    double f = gpu_peak_flops(name, dtype, tf32 && dtype == DType::f32);
    const char* kind = tf32 && dtype == DType::f32 ? "tf32" : dtype_name(dtype);
    if (f <= 0) return {0, strfmt("%s: no %s peak in the table of metrics.cpp, MFU not reported", name.c_str(), kind)};
    return {f, strfmt("%s: %.0f TFLOP/s %s dense (datasheet)", name.c_str(), f / 1e12, kind)};
}

// ---------------------------------------------------------------------------------------------------
// units and the memory table

std::string human_bytes(int64_t bytes) {
    double b = (double)bytes;
    if (std::fabs(b) < 1024) return strfmt("%ldB", (long)bytes);
    if (std::fabs(b) < 1024.0 * 1024) return strfmt("%.1fKiB", b / 1024);
    if (std::fabs(b) < 1024.0 * 1024 * 1024) return strfmt("%.1fMiB", b / (1024.0 * 1024));
    return strfmt("%.2fGiB", b / (1024.0 * 1024 * 1024));
}

std::string human_count(double x) {
    if (std::fabs(x) < 1e3) return strfmt("%.0f", x);
    if (std::fabs(x) < 1e6) return strfmt("%.1fk", x / 1e3);
    if (std::fabs(x) < 1e9) return strfmt("%.1fM", x / 1e6);
    return strfmt("%.1fG", x / 1e9);
}

std::string memory_table(Device d) {
    const MemStats& m = mem_stats(d);
    std::string s = strfmt("memory on %-6s %12s %12s\n", device_name(d), "current", "peak");
    for (int t = 0; t < kNumTags; t++) {
        if ((Tag)t == Tag::offloaded && m.peak[t] == 0) continue;  // only --recompute offload uses it
        s += strfmt("  %-14s %12s %12s\n", tag_name((Tag)t), human_bytes(m.current[t]).c_str(),
                    human_bytes(m.peak[t]).c_str());
    }
    s += strfmt("  %-14s %12s %12s\n", "total", human_bytes(m.total_current).c_str(),
                human_bytes(m.total_peak).c_str());
    if (d == Device::cpu)
        s += strfmt("  (+ %s of freed blocks the allocator keeps for reuse)\n", human_bytes(host_cached_bytes()).c_str());
    if (d == Device::cuda) {
        const DevicePoolStats p = device_pool_stats();
        s += strfmt("  (the device pool holds %s, %s of it freed blocks kept for reuse; at its peak %s)\n",
                    human_bytes(p.reserved).c_str(), human_bytes(p.cached()).c_str(),
                    human_bytes(p.reserved_peak).c_str());
    }
    return s;
}

// ---------------------------------------------------------------------------------------------------
// the step log

namespace {

struct Rates {
    double tokens_per_s, flops_per_device, mfu;  // mfu < 0: unknown
    double hfu = -1;                              // < 0: not reported
};

Rates rates(const StepLogConfig& cfg, const StepRecord& r) {
    double tps = r.seconds > 0 ? (double)r.tokens / r.seconds : 0;
    double fpd = tps * cfg.flops_per_token / std::max(cfg.num_devices, 1);
    Rates x{tps, fpd, cfg.peak_flops > 0 ? fpd / cfg.peak_flops : -1};
    if (x.mfu >= 0 && cfg.hardware_flops_per_token > 0 && cfg.flops_per_token > 0)
        x.hfu = r.hardware_flops >= 0 && r.seconds > 0
                    ? r.hardware_flops / r.seconds / cfg.peak_flops  // what this rank's ops counted (ops.hpp)
                    : x.mfu * cfg.hardware_flops_per_token / cfg.flops_per_token;  // the same tokens/s, more FLOPs each
    return x;
}

}  // namespace

StepLog::StepLog(StepLogConfig cfg) : cfg_(std::move(cfg)) {
    if (cfg_.jsonl_path.empty()) return;
    jsonl_ = std::fopen(cfg_.jsonl_path.c_str(), "w");
    CHECK(jsonl_, "--log-jsonl %s: cannot open for writing: %s", cfg_.jsonl_path.c_str(), std::strerror(errno));
}

StepLog::~StepLog() {
    if (jsonl_) std::fclose(jsonl_);
}

std::string StepLog::line(const StepRecord& r) const {
    const Rates x = rates(cfg_, r);
    const int width = (int)std::to_string(r.total_steps).size();
    std::string s = strfmt("step %*ld/%ld | loss %.4f | lr %.2e | grad norm %.3f | %.0f ms | %s tok/s", width,
                           (long)r.step, (long)r.total_steps, r.loss, r.lr, r.grad_norm, r.seconds * 1e3,
                           human_count(x.tokens_per_s).c_str());
    // CPU runs reach GFLOP/s, GPU runs TFLOP/s: print the unit that gives a readable number
    if (x.flops_per_device >= 1e12) s += strfmt(" | %.2f TFLOP/s/dev", x.flops_per_device / 1e12);
    else s += strfmt(" | %.1f GFLOP/s/dev", x.flops_per_device / 1e9);
    if (x.mfu >= 0) s += strfmt(" | MFU %.1f%%", 100 * x.mfu);
    // counted FLOPs are the printing rank's own (no extra reduction in a step): under --pp or uneven MoE routing
    // another rank's differ, so a job of several devices says whose
    if (x.hfu >= 0)
        s += strfmt(" | HFU %.1f%%%s", 100 * x.hfu, r.hardware_flops >= 0 && cfg_.num_devices > 1 ? " (rank 0's ops)" : "");
    if (r.task_accuracy >= 0) s += strfmt(" | acc %.1f%%", 100 * r.task_accuracy);
    for (const auto& kv : r.extra) s += strfmt(" | %s %g", kv.first.c_str(), kv.second);
    // model state at its current size; activations at their peak, which is what limits the batch
    const MemStats& m = mem_stats(cfg_.device);
    s += " | mem";
    for (Tag t : {Tag::params, Tag::grads, Tag::master, Tag::optim, Tag::comm}) {
        int64_t b = m.current[(int)t];
        if (b > 0 || t == Tag::params) s += strfmt(" %s %s", tag_name(t), human_bytes(b).c_str());
    }
    s += strfmt(" act %s", human_bytes(m.peak[(int)Tag::activations]).c_str());
    return s;
}

std::string StepLog::json_line(const StepRecord& r) const {
    const Rates x = rates(cfg_, r);
    nlohmann::json j;
    j["step"] = r.step;
    j["total_steps"] = r.total_steps;
    j["loss"] = r.loss;
    j["lr"] = r.lr;
    j["grad_norm"] = r.grad_norm;
    j["tokens"] = r.tokens;
    j["seconds"] = r.seconds;
    j["tokens_per_s"] = x.tokens_per_s;
    j["flops_per_token"] = cfg_.flops_per_token;
    j["tflops_per_device"] = x.flops_per_device / 1e12;
    j["mfu"] = x.mfu >= 0 ? nlohmann::json(x.mfu) : nlohmann::json(nullptr);
    if (x.hfu >= 0) j["hfu"] = x.hfu;
    if (r.hardware_flops >= 0) j["flops_counted"] = r.hardware_flops;  // this rank's, the step's matmuls and attention
    if (r.task_accuracy >= 0) j["task_accuracy"] = r.task_accuracy;
    for (const auto& kv : r.extra) j[kv.first] = kv.second;
    for (const auto& kv : r.arrays) j[kv.first] = kv.second;
    const MemStats& m = mem_stats(cfg_.device);
    nlohmann::json mem;
    for (int t = 0; t < kNumTags; t++) mem[tag_name((Tag)t)] = {{"current", m.current[t]}, {"peak", m.peak[t]}};
    j["mem"] = mem;
    return j.dump();
}

void StepLog::log(const StepRecord& r, bool print_line) {
    if (cfg_.print && print_line) {
        std::printf("%s\n", line(r).c_str());
        if (!r.detail.empty()) std::printf("%s\n", r.detail.c_str());
        std::fflush(stdout);
    }
    if (jsonl_) {
        std::fprintf(jsonl_, "%s\n", json_line(r).c_str());
        std::fflush(jsonl_);  // a crash loses at most the step being written
    }
}

}  // namespace penta
