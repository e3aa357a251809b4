// gpu_checks.hpp — the GPU kernels of the lab validated against the fp64 CPU reference, shared by the tests
// (tests/10_kernels/test_gpu_*.cpp, small shapes) and the driver (gpu_bench.cpp, before timing, at the timed
// shapes). Each check draws fresh random inputs from its seed, poisons every output with NaN, runs the
// kernel, and compares each output with its bound (validate.hpp).
//
// Playbook: "Diving into the GPUs" — correct first, then fast.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "validate.hpp"
#if defined(PENTA_CUDA)
#include "gpu_kernels.hpp"
#endif

namespace penta::lab {

struct NamedReport {
    std::string what;  // "dq of batch 0, kv head 1"
    ErrorReport r;
};
using Reports = std::vector<NamedReport>;
bool all_ok(const Reports& r);
std::string summary(const Reports& r);  // one line per report

// "" when this build has CUDA and a GPU is visible; else why not (for SKIP_TEST and the tables)
std::string gpu_unavailable();

#if defined(PENTA_CUDA)
// C of rung r against the reference at `sample_rows` rows spread over M (0: every row)
Reports check_gpu_gemm(GpuRung r, GemmType t, int64_t M, int64_t N, int64_t K, uint64_t seed, int64_t sample_rows = 0);

// The shapes of the fused kernels' inputs: RMSNorm (tokens, hidden); RoPE q (batch, tokens/batch, heads,
// head_dim) and k with kv_heads; SwiGLU (tokens, ffn); cross-entropy (tokens, vocab); AdamW the tensors `sizes`.
struct FusedShape {
    int64_t tokens, hidden, ffn, vocab, batch, heads, kv_heads, head_dim;
    std::vector<int64_t> adamw_sizes;
    int32_t first_position = 0;  // RoPE positions first_position + t
};
FusedShape fused_shape_of(const std::string& model, int64_t tokens, int64_t adamw_layers);
const char* fused_op_name(FusedOp op);
// the fused kernel (unfused: the sequence of unfused.cu) of `op` on fresh inputs
Reports check_fused(FusedOp op, bool unfused, const FusedShape& s, uint64_t seed);

// flash attention forward and backward; the reference for `groups` (batch, kv head) groups (the first and
// the last), and out against the trainer's naive CUDA attention (f32, the probabilities materialised)
Reports check_flash(const FlashShape& s, uint64_t seed, int groups = 2, bool against_naive = true);
#endif

}  // namespace penta::lab
