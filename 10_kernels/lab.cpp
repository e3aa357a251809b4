// 10_kernels/lab.cpp — chapter 10, the kernels lab's driver. It trains nothing: it validates every kernel of
// the lab against the fp64 CPU reference and times it against the library a trainer would otherwise call.
//
// Playbook: "Diving into the GPUs – fusing, threading, mixing" (memory hierarchy, coalescing, tiling, thread
// coarsening, fusion, flash attention). Parts:
//   cpu-gemm   the CPU ladder (naive, blocked, packed, avx2, avx512) vs OpenBLAS sgemm, one thread
//   gpu-gemm   the GPU ladder (naive, coalesced, smem, regtile; f32 and bf16; mma.sync; wgmma) vs cuBLAS/Lt
//   fused      RMSNorm fwd+bwd, RoPE, SwiGLU, softmax-cross-entropy, multi-tensor AdamW vs their unfused
//              sequences, in GB/s beside the measured copy bandwidth
//   attention  flash attention fwd+bwd (causal, GQA, bf16, head dims 64 and 128) vs the naive kernel
//   bounds     the validation bounds per dtype and where they come from
//
//   build/bin/10_kernels                                   (every part; the GPU ones say why when they cannot run)
//   build/bin/10_kernels --part cpu-gemm --sizes 1024 --model small --tokens 512 --reps 5
//   build/bin/10_kernels --part gpu-gemm --gpu-sizes 1024,4096 --model llama3-8b --tokens 4096
//   bash scripts/gpu_lab.sh OUT                           (on a GPU machine: build, tests, every part, SDPA)
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "../common/config.hpp"
#include "../common/core.hpp"
#include "../common/model_config.hpp"
#include "../common/runtime.hpp"
#include "cpu_bench.hpp"
#include "gpu_bench.hpp"
#include "validate.hpp"

using namespace penta;
using namespace penta::lab;

namespace {

std::vector<std::string> split(const std::string& s, const std::string& flag) {
    std::vector<std::string> out;
    std::stringstream ss(s);
    for (std::string item; std::getline(ss, item, ',');) {
        if (item.empty()) FAIL("%s '%s': an empty item in the comma-separated list", flag.c_str(), s.c_str());
        out.push_back(item);
    }
    return out;
}

std::vector<int64_t> split_ints(const std::string& s, const std::string& flag, int64_t lo, int64_t hi) {
    std::vector<int64_t> out;
    for (const std::string& item : split(s, flag)) {
        char* end = nullptr;
        const long long v = std::strtoll(item.c_str(), &end, 10);
        if (*end != '\0' || v < lo || v > hi)
            FAIL("%s '%s': '%s' must be a whole number in %ld..%ld", flag.c_str(), s.c_str(), item.c_str(), (long)lo,
                 (long)hi);
        out.push_back(v);
    }
    return out;
}

void print_bounds() {
    std::printf("validation bounds (validate.hpp): rel = ||out - ref|| / ||ref||, and every element within "
                "el_rel·|ref| + el_abs·rms(ref)\n");
    std::printf("%-16s %8s %8s %8s  %s\n", "check", "rel", "el_rel", "el_abs", "why");
    for (const Bound& b : bounds())
        std::printf("%-16s %8.0e %8.0e %8.0e  %s\n", b.name, b.rel_fro, b.el_rel, b.el_abs, b.why);
}

int run_lab(int argc, char** argv) {
    std::string part = "all", sizes = "1024", gpu_sizes = "1024,2048,4096,8192", model, rungs, head_dims = "64,128";
    int64_t tokens = 0, reps = 5, fused_tokens = 8192, attn_batch = 2, attn_seq = 4096;
    Flags f("10_kernels", "the kernels lab: every kernel validated against the fp64 CPU reference, then timed");
    f.chapter("Kernels lab (chapter 10)");
    f.add("part", &part, "all | cpu-gemm | gpu-gemm | fused | attention | bounds");
    f.add("sizes", &sizes, "square sizes of the CPU GEMM table, comma-separated");
    f.add("gpu-sizes", &gpu_sizes, "square sizes of the GPU GEMM table");
    f.add("model", &model, "preset whose layer shapes are timed too, or none (default: small on CPU, llama3-8b on GPU)");
    f.add("tokens", &tokens, "tokens (M) of those shapes (default: 512 on CPU, 4096 on GPU)");
    f.add("reps", &reps, "interleaved repeats; tables print medians");
    f.add("rungs", &rungs, "comma-separated rungs to run (CPU: naive,blocked,packed,avx2,avx512; GPU: see --part gpu-gemm)");
    f.add("fused-tokens", &fused_tokens, "rows of the fused-kernel table");
    f.add("attn-batch", &attn_batch, "sequences of the attention table");
    f.add("attn-seq", &attn_seq, "tokens per sequence of the attention table");
    f.add("head-dims", &head_dims, "head dims of the attention table (64 and/or 128)");
    if (!f.parse(argc, argv)) return 0;

    const std::vector<std::string> parts = {"all", "cpu-gemm", "gpu-gemm", "fused", "attention", "bounds"};
    if (std::find(parts.begin(), parts.end(), part) == parts.end())
        FAIL("--part '%s' is none of all|cpu-gemm|gpu-gemm|fused|attention|bounds", part.c_str());
    if (reps < 1 || reps > 1000) FAIL("--reps %ld must be in 1..1000", (long)reps);
    if (tokens < 0 || tokens > (1 << 20)) FAIL("--tokens %ld must be in 1..1048576 (0: the part's default)", (long)tokens);
    if (fused_tokens < 1 || fused_tokens > (1 << 20)) FAIL("--fused-tokens %ld must be in 1..1048576", (long)fused_tokens);
    if (attn_batch < 1 || attn_batch > 256) FAIL("--attn-batch %ld must be in 1..256", (long)attn_batch);
    if (attn_seq < 128 || attn_seq % 128 != 0 || attn_seq > 65536)
        FAIL("--attn-seq %ld must be a multiple of 128 in 128..65536 (the kernels' query and key tiles)", (long)attn_seq);
    CpuBenchOptions cpu;
    cpu.sizes = split_ints(sizes, "--sizes", 1, 16384);
    cpu.model = model.empty() ? "small" : model == "none" ? "" : model;
    cpu.tokens = tokens ? tokens : 512;
    cpu.reps = reps;
    GpuBenchOptions gpu;
    gpu.sizes = split_ints(gpu_sizes, "--gpu-sizes", 128, 16384);
    gpu.model = model.empty() ? "llama3-8b" : model == "none" ? "" : model;
    gpu.tokens = tokens ? tokens : 4096;
    const bool gpu_part = part != "cpu-gemm" && part != "bounds";
    for (int64_t n : gpu.sizes)
        if (gpu_part && n % 8 != 0)
            FAIL("--gpu-sizes %ld: K must be a multiple of 8 (the GPU rungs load rows in 16-byte pieces)", (long)n);
    gpu.reps = reps;
    gpu.fused_tokens = fused_tokens;
    gpu.attn_batch = attn_batch;
    gpu.attn_seq = attn_seq;
    gpu.head_dims = split_ints(head_dims, "--head-dims", 64, 128);
    for (int64_t d : gpu.head_dims)
        if (d != 64 && d != 128) FAIL("--head-dims %ld: the flash kernels are built for 64 and 128", (long)d);
    for (const std::string& m : {cpu.model, gpu.model})
        if (!m.empty()) preset(m);  // an unknown name throws here, listing the valid ones, before any work
    if (!rungs.empty())
        for (const std::string& r : split(rungs, "--rungs")) {
            bool cpu_rung = false;
            for (const auto& i : cpu_rungs()) cpu_rung |= r == i.name;
            if (cpu_rung)
                cpu.rungs.push_back(parse_cpu_rung(r));
            else
                gpu.rungs.push_back(r);  // checked by the GPU table against its list
        }
    if ((part == "cpu-gemm") && !gpu.rungs.empty())
        FAIL("--rungs %s: not a CPU rung (valid: naive,blocked,packed,avx2,avx512)", gpu.rungs.front().c_str());

    if (part == "all" || part == "bounds") print_bounds();
    if (part == "all" || part == "cpu-gemm") {
        std::printf("\n");
        run_cpu_gemm_bench(cpu);
    }
    if (part == "all" || part == "gpu-gemm") {
        std::printf("\n");
        run_gpu_gemm_bench(gpu);
    }
    if (part == "all" || part == "fused") {
        std::printf("\n");
        run_fused_bench(gpu);
    }
    if (part == "all" || part == "attention") {
        std::printf("\n");
        run_attention_bench(gpu);
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) { return run_main(argc, argv, run_lab); }
