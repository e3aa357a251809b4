// gpu_ladder.cpp — the GPU GEMM ladder's table of rungs and its dispatch (gpu_kernels.hpp): which types each
// rung is built for, which layout of B it reads, what it needs of the device.
//
// Playbook: "Diving into the GPUs". Only in a CUDA build.
//   build/bin/10_kernels --part gpu-gemm
#if defined(PENTA_CUDA)
#include <cuda_runtime_api.h>

#include "../common/core.hpp"
#include "gpu_kernels.hpp"

namespace penta::lab {

const std::vector<GpuRungInfo>& gpu_rungs() {
    static const std::vector<GpuRungInfo> r = {
        {GpuRung::naive, "naive", true, true, false, "one thread per output, lanes down a column: uncoalesced"},
        {GpuRung::coalesced, "coalesced", true, true, false, "lanes along a row: coalesced B and C, A broadcast"},
        {GpuRung::smem, "smem", true, true, false, "32x32 tiles in shared memory: each load reused 32 times"},
        {GpuRung::regtile, "regtile", true, true, false, "128x128 tile, 8x8 per thread in registers, 16-byte loads"},
        {GpuRung::mma, "mma", false, true, true, "mma.sync m16n8k16 + ldmatrix, 4-stage cp.async pipeline"},
        {GpuRung::wgmma, "wgmma", false, true, true, "TMA + mbarriers, warp-specialised wgmma m64n256k16"},
    };
    return r;
}

const GpuRungInfo& gpu_rung_info(GpuRung r) {
    for (const auto& i : gpu_rungs())
        if (i.rung == r) return i;
    FAIL("unknown GPU rung %d", (int)r);
}

GpuRung parse_gpu_rung(const std::string& s) {
    std::string valid;
    for (const auto& i : gpu_rungs()) {
        if (s == i.name) return i.rung;
        valid += std::string(valid.empty() ? "" : ",") + i.name;
    }
    FAIL("--rungs %s: not a GPU rung (valid: %s)", s.c_str(), valid.c_str());
}

int device_capability() {
    static int cc = -1;  // asked once: every launcher checks it, and a timed loop must not pay for the query
    if (cc >= 0) return cc;
    int dev = 0, major = 0, minor = 0, n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        cudaGetLastError();  // clear the "no device" error
        return cc = 0;
    }
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
    return cc = major * 10 + minor;
}

std::string gpu_rung_unsupported(GpuRung r, GemmType t) {
    const GpuRungInfo& i = gpu_rung_info(r);
    if (t == GemmType::f32 && !i.f32) return strfmt("%s is built for bf16 only (tensor cores)", i.name);
    if (t == GemmType::bf16 && !i.bf16) return strfmt("%s is built for f32 only", i.name);
    const int cc = device_capability();
    if (cc == 0) return "no GPU visible";
    if (r == GpuRung::mma && cc < 80) return strfmt("mma.sync with bf16 needs sm_80+, this GPU is sm_%d", cc);
    if (r == GpuRung::wgmma && cc != 90)
        return strfmt("wgmma is compiled for sm_90a (Hopper) only, this GPU is sm_%d", cc);
    return "";
}

void gpu_gemm(GpuRung r, GemmType t, int64_t M, int64_t N, int64_t K, const void* A, const void* B, void* C,
              cudaStream_t stream) {
    CHECK(M >= 1 && N >= 1 && K >= 1, "gpu_gemm: M %ld, N %ld, K %ld must be >= 1", (long)M, (long)N, (long)K);
    CHECK(N % 8 == 0 && K % 8 == 0, "gpu_gemm %s: N %ld and K %ld must be multiples of 8 (rows load in 16-byte pieces)",
          gpu_rung_info(r).name, (long)N, (long)K);
    const std::string why = gpu_rung_unsupported(r, t);
    CHECK(why.empty(), "GPU rung %s cannot run: %s", gpu_rung_info(r).name, why.c_str());
    switch (r) {
        case GpuRung::mma: return gemm_mma_bf16(M, N, K, (const uint16_t*)A, (const uint16_t*)B, (uint16_t*)C, stream);
        case GpuRung::wgmma: return gemm_wgmma_bf16(M, N, K, (const uint16_t*)A, (const uint16_t*)B, (uint16_t*)C, stream);
        default: return gemm_simt(r, t, M, N, K, A, B, C, stream);
    }
}

}  // namespace penta::lab
#endif
