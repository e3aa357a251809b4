// gpu_kernels.hpp — the host entry points of the kernels lab's CUDA code: the GEMM ladder, the fused kernels
// and their unfused sequences, flash attention. Every launcher checks its shapes and the device (naming the
// rule), launches on `stream` and checks the launch.
//
// Playbook: "Diving into the GPUs – fusing, threading, mixing". Only in a CUDA build (PENTA_CUDA). bf16
// buffers are passed as uint16_t (their bits), f32 as float; all row-major and contiguous.
// Validated by gpu_checks.hpp (tests/10_kernels/test_gpu_*.cpp), timed by gpu_bench.hpp.
#pragma once
#if defined(PENTA_CUDA)
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <vector>

namespace penta::lab {

// ---- the GEMM ladder -----------------------------------------------------------------------------------
//   naive      one thread per C element, consecutive threads on consecutive ROWS: A and C strided (uncoalesced)
//   coalesced  the same, consecutive threads on consecutive COLUMNS: B and C reads/writes coalesced
//   smem       32 x 32 tiles of A and B staged in shared memory: each global load reused 32 times
//   regtile    128 x 128 block tile, 8 x 8 outputs per thread from registers, 16-byte loads
//   mma        tensor cores: mma.sync m16n8k16 fed by ldmatrix, a 4-stage cp.async pipeline (sm_80+)
//   wgmma      Hopper: a producer warp drives TMA into a 4-stage ring guarded by mbarriers, two consumer
//              warpgroups issue wgmma m64n256k16 from shared memory (sm_90a)
enum class GpuRung : uint8_t { naive, coalesced, smem, regtile, mma, wgmma };
enum class GemmType : uint8_t { f32, bf16 };  // inputs and output; accumulation is f32 in every rung

struct GpuRungInfo {
    GpuRung rung;
    const char* name;
    bool f32, bf16;  // the types it is built for
    bool b_nk;       // B stored (N, K) (K-major, a linear layer's weight): C = A @ B^T; else B (K, N)
    const char* teaches;
};
const std::vector<GpuRungInfo>& gpu_rungs();
const GpuRungInfo& gpu_rung_info(GpuRung r);
GpuRung parse_gpu_rung(const std::string& s);  // throws listing the valid names
// why this rung cannot run here ("" when it can): the type it is not built for, the device's capability
std::string gpu_rung_unsupported(GpuRung r, GemmType t);

// C (M, N) = A (M, K) @ B with B as gpu_rung_info(r).b_nk says. K and N must be multiples of 8 (rows are
// loaded in 16-byte pieces); M, N, K >= 1. Asynchronous on `stream`.
void gpu_gemm(GpuRung r, GemmType t, int64_t M, int64_t N, int64_t K, const void* A, const void* B, void* C,
              cudaStream_t stream);
// the rungs' own launchers (gemm_simt.cu, gemm_mma.cu, gemm_wgmma_sm90a.cu), called by gpu_gemm
void gemm_simt(GpuRung r, GemmType t, int64_t M, int64_t N, int64_t K, const void* A, const void* B, void* C,
               cudaStream_t stream);
void gemm_mma_bf16(int64_t M, int64_t N, int64_t K, const uint16_t* A, const uint16_t* Bt, uint16_t* C, cudaStream_t stream);
void gemm_wgmma_bf16(int64_t M, int64_t N, int64_t K, const uint16_t* A, const uint16_t* Bt, uint16_t* C,
                     cudaStream_t stream);

// ---- fused kernels (fused_norm_rope.cu, fused_swiglu_ce.cu, fused_adamw.cu) -----------------------------
// bf16 activations, f32 math inside. RMSNorm: x, y (N, h), w (h), rstd (N) f32; h a multiple of 8, <= 8192.
void rmsnorm_fwd(const uint16_t* x, const uint16_t* w, uint16_t* y, float* rstd, int64_t N, int64_t h, float eps,
                 cudaStream_t stream);
// dx (N, h) bf16 overwritten, dw (h) f32 overwritten; `partial` holds rmsnorm_bwd_partials(N, h) floats
int64_t rmsnorm_bwd_partials(int64_t N, int64_t h);
void rmsnorm_bwd(const uint16_t* dy, const uint16_t* x, const uint16_t* w, const float* rstd, uint16_t* dx, float* dw,
                 float* partial, int64_t N, int64_t h, cudaStream_t stream);
// RoPE on q (B, T, H, D) and k (B, T, Hkv, D) in place, one launch (inverse: the backward); D % 16 == 0
void rope(uint16_t* q, uint16_t* k, const int32_t* pos, int64_t B, int64_t T, int64_t H, int64_t Hkv, int64_t D,
          float theta, bool inverse, cudaStream_t stream);
// out = silu(g)·u; n % 8 == 0
void swiglu_fwd(const uint16_t* g, const uint16_t* u, uint16_t* out, int64_t n, cudaStream_t stream);
void swiglu_bwd(const uint16_t* dout, const uint16_t* g, const uint16_t* u, uint16_t* dg, uint16_t* du, int64_t n,
                cudaStream_t stream);
// loss (N) f32 and dlogits (N, V) bf16 = (softmax - onehot)·scale, rows with target < 0 zero; V % 8 == 0.
// The probabilities are never stored: one pass finds max and sum (online), a second writes the gradient.
void cross_entropy(const uint16_t* logits, const int32_t* targets, float* loss, uint16_t* dlogits, int64_t N,
                   int64_t V, float scale, cudaStream_t stream);
// AdamW over a list of f32 tensors in ONE launch (blocks map to (tensor, chunk) through a table on the device)
struct AdamWTensor {
    float* p;
    const float* g;
    float* m;
    float* v;
    int64_t n;
};
struct AdamWParams {
    float lr, beta1, beta2, eps, weight_decay;
    int step;
};
// the device table: adamw_table_bytes(tensors) bytes of device memory, filled by adamw_multi_tensor
int64_t adamw_table_bytes(const std::vector<AdamWTensor>& t);
void adamw_multi_tensor(const std::vector<AdamWTensor>& t, const AdamWParams& a, void* table, cudaStream_t stream);

// ---- the unfused sequences (unfused.cu): the same functions as one small kernel per operation, every
// intermediate written to and read back from device memory in f32 (scratch: unfused_scratch_floats)
enum class FusedOp : uint8_t { rmsnorm_fwd, rmsnorm_bwd, rope, swiglu_fwd, swiglu_bwd, cross_entropy, adamw };
int64_t unfused_scratch_floats(FusedOp op, int64_t rows, int64_t cols);
void rmsnorm_fwd_unfused(const uint16_t* x, const uint16_t* w, uint16_t* y, float* rstd, int64_t N, int64_t h,
                         float eps, float* scratch, cudaStream_t stream);
void rmsnorm_bwd_unfused(const uint16_t* dy, const uint16_t* x, const uint16_t* w, const float* rstd, uint16_t* dx,
                         float* dw, int64_t N, int64_t h, float* scratch, cudaStream_t stream);
void rope_unfused(uint16_t* x, const int32_t* pos, int64_t B, int64_t T, int64_t H, int64_t D, float theta,
                  bool inverse, float* scratch, cudaStream_t stream);
void swiglu_fwd_unfused(const uint16_t* g, const uint16_t* u, uint16_t* out, int64_t n, float* scratch,
                        cudaStream_t stream);
void swiglu_bwd_unfused(const uint16_t* dout, const uint16_t* g, const uint16_t* u, uint16_t* dg, uint16_t* du,
                        int64_t n, float* scratch, cudaStream_t stream);
void cross_entropy_unfused(const uint16_t* logits, const int32_t* targets, float* loss, uint16_t* dlogits, int64_t N,
                           int64_t V, float scale, float* scratch, cudaStream_t stream);
// one launch per operation per tensor: m, v, then p (3 launches per tensor)
void adamw_unfused(const std::vector<AdamWTensor>& t, const AdamWParams& a, cudaStream_t stream);

// ---- flash attention (flash_fwd.cu, flash_bwd.cu) --------------------------------------------------------
// Causal, GQA. q, out (B, T, H, D), k, v (B, T, Hkv, D) bf16; lse (B, H, T) f32 (natural log); D 64 or 128;
// T a multiple of 128; H a multiple of Hkv.
struct FlashShape {
    int64_t B, T, H, Hkv, D;
};
void flash_fwd(const uint16_t* q, const uint16_t* k, const uint16_t* v, uint16_t* out, float* lse,
               const FlashShape& s, cudaStream_t stream);
// dq, dk, dv (bf16) overwritten; `work` holds flash_bwd_workspace_floats(s) floats (dq in f32, rowsum(dO∘O))
int64_t flash_bwd_workspace_floats(const FlashShape& s);
// The backward kernel's dynamic shared memory for head dim D: 107 KB at 64, 171 KB at 128. A block may opt in
// to 227 KB on the H100 and H200 (sm_90), 163 KB on the A100 (sm_80), 99 KB on sm_86/89: head dim 128 runs on
// Hopper only. "" when this GPU can run head dim D, else why not, naming the GPU and both figures.
int64_t flash_bwd_smem_bytes(int64_t D);
std::string flash_bwd_unsupported(int64_t D);
void flash_bwd(const uint16_t* q, const uint16_t* k, const uint16_t* v, const uint16_t* out, const float* lse,
               const uint16_t* dout, uint16_t* dq, uint16_t* dk, uint16_t* dv, float* work, const FlashShape& s,
               cudaStream_t stream);

// the device's compute capability as major*10 + minor (0: no device)
int device_capability();
// std·N(0,1) from the counter RNG straight into device memory (f32 or bf16 by `bf16`): the benchmarks' inputs,
// gigabytes of them, without a trip through the host (gpu_fill.cu)
void fill_normal(void* p, int64_t n, bool bf16, uint64_t seed, float std, cudaStream_t stream);
// n ints uniform in [0, bound) (cross-entropy targets)
void fill_uniform_int(int32_t* p, int64_t n, int32_t bound, uint64_t seed, cudaStream_t stream);

}  // namespace penta::lab
#endif
