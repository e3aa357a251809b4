// lab_util.hpp — what the kernels lab's tables share: medians, a wall clock, the machine's name and load,
// and the GEMM shapes of a model's layers.
//
// Playbook: "Diving into the GPUs" — figures from a shared machine are noisy: the lab runs the variants it
// compares in turn, several times, and prints medians beside the load average.
#pragma once
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace penta::lab {

inline double median(std::vector<double> v) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

inline double now_seconds() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string load_average();  // "4.81 5.02 4.95" (1, 5, 15 minutes), from /proc/loadavg
std::string cpu_name();      // /proc/cpuinfo's model name, the core count and the ISA extensions that matter here
std::string today();         // "2026-05-04"

// One GEMM of a model's training step: C (M, N) = A (M, K) @ B (K, N) for M tokens.
struct GemmShape {
    std::string name;
    int64_t M, N, K;
};
// The forward linears of one layer of preset `model` (q, kv, o, gate/up, down) and the LM head, at `tokens`
// tokens: what a training step multiplies (backward runs the same shapes transposed).
std::vector<GemmShape> model_gemm_shapes(const std::string& model, int64_t tokens);

}  // namespace penta::lab
