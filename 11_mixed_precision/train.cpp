// 11_mixed_precision/train.cpp — chapter 11: the same model trained under each precision policy, from the same
// weights on the same batches: fp32; bf16 weights and GEMMs with fp32 master weights and gradients; fp16 with
// dynamic loss scaling; fp8 GEMMs (e4m3 forward, e5m2 gradients, per-tile scales, f32 promotion every 128).
// One rank: on the CPU every low-precision format is emulated exactly, on a GPU (--device cuda) the GEMMs run
// through cuBLASLt, fp8 on Hopper only (fp8.hpp). The layouts of chapters 01-09 take --precision fp32 or bf16
// (e.g. mpirun -np 4 build/bin/04_tensor_parallel --tp 2 --dp 2 --precision bf16); fp16 and fp8 are this chapter's.
//
// Playbook: "Mixed precision training". What to watch:
//   - the bytes per parameter each policy holds, measured, beside the playbook's 16 B (bf16 + fp32 master +
//     Adam) and 20 B (+ fp32 gradients): mixed precision does not shrink the model state;
//   - the loss curves side by side, and each policy's final loss beside fp32's;
//   - fp16's loss scale (it grows every 100 clean steps, halves on an overflowed step, which is skipped).
//
//   build/bin/11_mixed_precision --model small --data text:ARCHITECTURE.md --steps 300
//   build/bin/11_mixed_precision --schemes fp32,fp16 --steps 50
//   build/bin/11_mixed_precision --help
#include <cstdio>
#include <sstream>
#include <utility>

#include "../common/runtime.hpp"
#include "../common/train_loop.hpp"
#include "mixed_precision.hpp"

using namespace penta;

namespace {

int train(int argc, char** argv) {
    TrainConfig cfg;
    cfg.model = "small", cfg.device = "cpu", cfg.seq = 32, cfg.micro_batch = 16, cfg.lr = 2e-3f, cfg.log_every = 50;
    std::string schemes = "fp32,bf16,fp16,fp8";
    Flags flags("11_mixed_precision", "Chapter 11: one model trained under each precision policy (playbook: Mixed "
                "precision training).");
    cfg.register_flags(flags);
    flags.chapter("Mixed precision (chapter 11)", {"precision"});
    flags.add("schemes", &schemes, "comma-separated policies to train, the first the reference: fp32,bf16,fp16,fp8");
    if (!flags.parse(argc, argv)) return 0;
    cfg.precisions = {"fp32", "bf16", "fp16", "fp8"};  // this chapter has fp16's loss scaler and fp8's GEMM
    cfg.validate();
    CHECK(world_size() == 1, "chapter 11 compares the policies on one rank, but the job has %d (the layouts take "
          "--precision: chapters 02-09)", world_size());
    // the program trains one model per policy and keeps none: nothing to export, continue, save or resume
    for (const auto& [flag, value] : {std::pair<const char*, std::string>{"export-hf", cfg.export_hf},
                                      {"generate", cfg.generate}, {"save", cfg.save}, {"resume", cfg.resume}})
        CHECK(value.empty(), "--%s %s: chapter 11 trains one model per policy in --schemes and keeps none; the "
              "chapters that train one model take it with --precision (e.g. build/bin/01_single_gpu --precision "
              "bf16 --%s ...)", flag, value.c_str(), flag);
    std::vector<std::string> policies;
    std::stringstream list(schemes);
    for (std::string p; std::getline(list, p, ',');) policies.push_back(p);
    for (const std::string& p : policies)  // every name checked before the first run
        CHECK(p == "fp32" || p == "bf16" || p == "fp16" || p == "fp8",
              "--schemes %s: '%s' must be fp32, bf16, fp16 or fp8 (the policies of --precision)", schemes.c_str(),
              p.c_str());
    CHECK(!policies.empty(), "--schemes '%s': name at least one policy (fp32,bf16,fp16,fp8)", schemes.c_str());
    CHECK(cfg.log_jsonl.empty() || policies.size() == 1, "--log-jsonl %s writes one policy's steps, and --schemes %s "
          "names %zu: name one (e.g. --schemes fp16)", cfg.log_jsonl.c_str(), schemes.c_str(), policies.size());
    const LlamaConfig mc = resolve_model(cfg);
    auto data = make_dataset(cfg.data, (uint64_t)cfg.seed, (int32_t)mc.vocab);
    std::printf("11_mixed_precision: model %s (%s params), data %s, %ld steps of %ld x %ld tokens, lr %g\n",
                mc.name.c_str(), human_count((double)mc.n_params()).c_str(), data->describe().c_str(), (long)cfg.steps,
                (long)cfg.micro_batch * cfg.grad_accum, (long)cfg.seq, cfg.lr);
    std::vector<SchemeRun> runs;
    for (const std::string& p : policies) {
        std::printf("%s: %s\n", p.c_str(), Precision::named(p).str().c_str());
        runs.push_back(train_scheme(cfg, mc, *data, p, true));
    }
    std::printf("\n%s\n%s", memory_per_param_table(runs).c_str(), loss_curves(runs).c_str());
    return 0;
}

}  // namespace

int main(int argc, char** argv) { return run_main(argc, argv, train); }
