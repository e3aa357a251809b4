// 05_sequence_parallel/train.cpp — chapter 05: chapter 04's tensor-parallel training with sequence
// parallelism on top: the norms and residual adds run on 1/tp of the tokens.
//
// Playbook: "Sequence parallelism". What to watch:
//   - the same loss curve as chapters 01 and 04 for the same global batch;
//   - before training, one micro-batch measured twice, with chapter 04's f/g and with SP's all-gather /
//     reduce-scatter: the activation bytes of the norm / residual regions (x_in, attn_rstd, x_mid,
//     mlp_rstd of every layer) drop to exactly 1/tp, and the bytes sent per layer stay exactly the same,
//     8(t-1)/t · s b h elements (formulas.hpp);
//   - --sp=0 trains with chapter 04's f/g instead, for comparison.
//
//   mpirun -np 2 build/bin/05_sequence_parallel --tp 2 --sp
//   mpirun -np 4 build/bin/05_sequence_parallel --tp 4 --sp --steps 50
//   mpirun -np 4 build/bin/05_sequence_parallel --tp 2 --dp 2 --sp --zero 1 --micro-batch 8
//   mpirun -np 4 build/bin/05_sequence_parallel --tp 2 --dp 2 --sp --zero 3 --micro-batch 8
#include <cstdio>

#include "../04_tensor_parallel/tp_training.hpp"
#include "../common/formulas.hpp"
#include "../common/runtime.hpp"
#include "sequence_parallel.hpp"

using namespace penta;

namespace {

struct Measured {
    std::vector<LayerTraffic::Bytes> layers;
    int64_t norm_region = 0, saved = 0;  // bytes the micro-batch's forward kept: norm regions, everything
};

Measured measure(TensorParallelTraining& run) {
    Measured m;
    m.layers = run.measure_micro_batch([&](const MicroBatchActs& acts) {
        m.norm_region = norm_region_activation_bytes(acts);
        m.saved = mem_stats(run.device).current[(int)Tag::activations];  // nothing else is alive yet
    });
    return m;
}

int train(int argc, char** argv) {
    TrainConfig cfg;
    cfg.tp = 2, cfg.sp = true;
    int64_t zero = 0;
    if (!parse_tensor_parallel_flags(argc, argv, "05_sequence_parallel",
                                     "Chapter 05: sequence parallelism on top of --tp, data parallelism (or ZeRO) "
                                     "over --dp (playbook: Sequence parallelism).",
                                     cfg, zero))
        return 0;
    // the layout's rules (ranks, --tp divides the kv heads, ...) before this chapter's token rules, which
    // are beside the point when --tp cannot split the model at all
    const LlamaConfig mc = resolve_model(cfg, (int)zero);
    validate_grid(GridShape{(int)cfg.dp, 1, 1, (int)cfg.tp}, world_size(), &mc);
    CHECK(!cfg.sp || (cfg.micro_batch * cfg.seq) % cfg.tp == 0,
          "--sp splits the --micro-batch %ld × --seq %ld = %ld tokens of a micro-batch into --tp %ld equal blocks: "
          "the token count must be divisible by --tp",
          (long)cfg.micro_batch, (long)cfg.seq, (long)(cfg.micro_batch * cfg.seq), (long)cfg.tp);
    CHECK(!cfg.sp || cfg.eval_every == 0 || (kEvalRows * cfg.seq) % cfg.tp == 0,
          "--sp: the evaluation runs %ld sequences of --seq %ld = %ld tokens, which --tp %ld must divide as well "
          "(or --eval-every 0)",
          (long)kEvalRows, (long)cfg.seq, (long)(kEvalRows * cfg.seq), (long)cfg.tp);

    TensorParallelTraining run(cfg, zero);  // with --sp its model's norms sum their gradients over tp
    run.print_header("05_sequence_parallel");
    const Measured tp = measure(run);  // chapter 04's f and g
    Measured sp;
    if (cfg.sp) {
        run.install(std::make_unique<SequenceParallel>(run.grid->tp()));  // all SP changes
        sp = measure(run);
    }
    if (world_rank() == 0) {
        const LlamaConfig& c = run.mc;
        const int64_t t = cfg.tp, L = c.n_layers;
        std::printf("\nactivations one micro-batch's forward keeps (b %ld, s %ld, h %ld, %ld layers), per rank:\n",
                    (long)cfg.micro_batch, (long)cfg.seq, (long)c.hidden, (long)L);
        // --recompute full keeps only each block's input x_in of these (the rest is rebuilt in backward)
        const bool full = cfg.recompute == "full";
        auto formula = [&](int64_t sp) {
            return full ? L * (cfg.micro_batch * cfg.seq / sp) * c.hidden * 4
                        : L * llama_norm_region_activation_bytes(cfg.micro_batch, cfg.seq, c.hidden, sp);
        };
        const int64_t f1 = formula(1), ft = formula(t);
        if (cfg.sp) {
            std::printf("                                      TP (f/g)   TP + SP    ratio   formula %s\n",
                        full ? "L*(b*s/sp)*h*4 (x_in only)" : "L*(b*s/sp)*(2h*4 + 2*4)");
            std::printf("  norm/residual regions (measured)  %10ld  %10ld  %6.3f   %ld / %ld  %s\n", (long)tp.norm_region,
                        (long)sp.norm_region, (double)sp.norm_region / tp.norm_region, (long)f1, (long)ft,
                        tp.norm_region == f1 && sp.norm_region == ft ? "(equal)" : "(DIFFERENT)");
            std::printf("  everything the forward kept       %10ld  %10ld  %6.3f\n", (long)tp.saved, (long)sp.saved,
                        (double)sp.saved / tp.saved);
            std::printf("  (the rest — q, k, v, the MLP's gate/up/act, the gathered inputs of the linears — is already\n"
                        "   split by heads or columns under TP, or is the full sequence SP must gather for them)\n");
        } else {
            std::printf("  norm/residual regions (measured, --sp off)  %ld   formula %s = %ld\n", (long)tp.norm_region,
                        full ? "L*b*s*h*4 (x_in only)" : "L*b*s*(2h*4 + 2*4)", (long)f1);
        }
    }
    run.run();
    run.print_traffic(tp.layers, "chapter 04's f and g");
    if (cfg.sp) run.print_traffic(sp.layers, "SP's all-gather / reduce-scatter");
    run.print_model_state();
    if (world_rank() == 0)
        std::printf("\nmemory by tag on %s (rank 0):\n%s", device_name(run.device), memory_table(run.device).c_str());
    return 0;
}

}  // namespace

int main(int argc, char** argv) { return run_main(argc, argv, train); }
