// metrics.hpp — what a training step reports: loss, lr, grad norm, tokens/s, TFLOP/s per device, MFU and
// memory by tag, as one printed line and (optionally) one JSON object per line in a file.
//
// Playbook: "Memory usage in Transformers" (params, grads, optimizer states, activations — read from the
// tagged allocator, not predicted) and the MFU definition of the PaLM paper (appendix B), which the
// playbook uses to compare setups:
//     model FLOPs per token = 6N + 12·L·h·T
// N = parameters that take part in matmuls (everything but the input embedding table, whose lookup is
// not a matmul, and the norms' weights; the LM head counts), L layers, h = n_heads·head_dim, T the sequence length. 6N is
// forward (2N) plus backward (4N); 12·L·h·T is QK^T and PV, forward and backward. Like PaLM, nanoGPT and
// llm.c we do NOT halve the attention term for the causal mask, so our MFU compares with published
// figures (a causal kernel really does about half of that attention work). Activation recomputation is
// not counted: MFU counts the model's FLOPs, not the hardware's.
// MFU = achieved model FLOP/s per device / peak FLOP/s of that device (a table for GPUs; on CPU the
// best sgemm rate measured on this machine).
// Tested by tests/01_single_gpu/test_optim.cpp: `build/bin/tests_01 -ts='ch01 np1' -tc='*StepLog*,*FLOP*,*memory*'`;
// against the FLOPs the ops count in a real step (ops.hpp counted_flops) by test_hfu.cpp (-tc='HFU*').
#pragma once
#include <chrono>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "model_config.hpp"
#include "tensor.hpp"

namespace penta {

double model_flops_per_token(int64_t n_matmul_params, int64_t n_layers, int64_t attn_width, int64_t seq_len);

// HFU (hardware FLOPs utilisation) counts what the hardware runs, recomputation included; MFU only the model's
// FLOPs, so recomputation raises HFU and lowers MFU (seeds 000 and 003). The FLOPs per token recomputation adds,
// as model.cpp runs it (P_l a decoder layer's matmul weights, h = n_heads·head_dim, T the sequence length):
//   full: each block's forward again before its backward            2 P_l + 4 h T   a layer
//   the probabilities rebuilt from q, k and the lse in the backward  2 h T          a layer (Q K^T again)
//     — under selective, and under any mode with a kernel that keeps no probabilities (flash); full with the naive
//     kernel keeps the rerun's probabilities, so only the forward is counted there.
double recompute_flops_per_token(Recompute r, bool kernel_keeps_probs, int64_t layer_matmul_params, int64_t n_layers,
                                 int64_t attn_width, int64_t seq_len);

// Dense (no sparsity) peak of a GPU whose name contains a table entry ("NVIDIA H100 80GB HBM3" -> H100
// SXM). f32 -> the plain fp32 rate (or TF32 tensor cores with tf32), bf16/f16 -> tensor cores,
// e4m3/e5m2 -> fp8 tensor cores. 0 when the GPU or the dtype is not in the table.
double gpu_peak_flops(const std::string& gpu_name, DType dtype, bool tf32 = false);

// best of a few cblas_sgemm calls of 1024^3 with OpenBLAS's current thread count; measured once per
// process (per thread count) and cached
double cpu_sgemm_peak_flops();

struct PeakFlops {
    double flops = 0;    // <= 0: unknown, no MFU
    std::string source;  // says where the figure comes from, for the run's header
};
PeakFlops device_peak_flops(Device d, DType dtype, bool tf32 = false);  // tf32: f32 on TF32 tensor cores

std::string human_bytes(int64_t bytes);  // "512B", "4.1KiB", "16.0MiB", "1.20GiB"
std::string human_count(double x);       // "950", "12.3k", "4.5M", "1.2G"

// per tag: current and peak bytes on device d, and the totals, one line each
std::string memory_table(Device d);

class Timer {  // wall clock (steady_clock); call device_synchronize first when timing GPU work
   public:
    Timer() : t0_(std::chrono::steady_clock::now()) {}
    double seconds() const {
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    }
    double lap() {  // seconds since construction or the previous lap, and restart
        double s = seconds();
        t0_ = std::chrono::steady_clock::now();
        return s;
    }

   private:
    std::chrono::steady_clock::time_point t0_;
};

struct StepRecord {
    int64_t step = 0, total_steps = 0;
    double loss = 0, grad_norm = 0;
    float lr = 0;
    int64_t tokens = 0;         // tokens processed by the step, all ranks together
    double seconds = 0;         // wall time of the step
    double task_accuracy = -1;  // the built-in task's exact-match accuracy in [0, 1]; < 0: not measured
    std::vector<std::pair<std::string, double>> extra;  // more "name value" fields a chapter wants shown
    std::vector<std::pair<std::string, std::vector<double>>> arrays;  // lists for the JSON line only (per expert, ...)
    std::string detail;  // printed under the step line when it is printed (a chapter's histogram); not in JSON
    double hardware_flops = -1;  // this rank's FLOPs in the step, counted by the op layer (ops.hpp counted_flops)
};

struct StepLogConfig {
    double flops_per_token = 0;  // model_flops_per_token(...)
    // + recompute_flops_per_token(...); > 0: HFU printed beside MFU — from the record's counted hardware_flops
    // (this rank's device) when it has them, else by the ratio hardware / model FLOPs per token
    double hardware_flops_per_token = 0;
    double peak_flops = 0;       // per device; <= 0: MFU is not reported
    int num_devices = 1;         // devices sharing the step's tokens
    Device device = Device::cpu;  // whose memory is reported
    std::string jsonl_path;      // --log-jsonl FILE; empty: no file
    bool print = true;           // usually rank 0 only
};

class StepLog {
   public:
    explicit StepLog(StepLogConfig cfg);
    ~StepLog();
    StepLog(const StepLog&) = delete;
    StepLog& operator=(const StepLog&) = delete;

    // prints line(r) (when print_line: programs print every Nth step), appends json_line(r) (flushed)
    void log(const StepRecord& r, bool print_line = true);
    std::string line(const StepRecord& r) const;  // "step   10/200 | loss 1.2345 | ..."
    std::string json_line(const StepRecord& r) const;  // one JSON object, no newline

   private:
    StepLogConfig cfg_;
    FILE* jsonl_ = nullptr;
};

}  // namespace penta
