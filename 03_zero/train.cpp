// 03_zero/train.cpp — chapter 03: data parallelism with ZeRO-1, -2 or -3 (zero.hpp): the training of
// chapter 02, with the model state sharded over the --dp ranks.
//
// Playbook: "Zero Redundancy Optimizer (ZeRO)". What to watch:
//   - the same loss curve as chapters 01 and 02 for the same global batch, whatever --zero says;
//   - at the end, per rank, the model-state bytes the allocator holds (params, grads, master, AdamW
//     moments) beside zero_model_state_bytes_fp32, and the playbook's bf16 (2Ψ + 2Ψ + 12Ψ)/N figure for
//     reference; the comm tag's peak is what the stage needs in transient buffers;
//   - the bytes each rank sent per step, counted by Comm, beside 2Ψ (ZeRO-1/2, and plain DP's all-reduce)
//     and 3Ψ (ZeRO-3) — formulas.hpp's zero_step_bytes;
//   - ZeRO-1/2: how long each rank waited for the updated weights' all-gathers, all at once after the update or
//     (--zero-defer-gather) unit by unit in the next forward (zero1_overlap.hpp).
//
//   mpirun -np 4 build/bin/03_zero --dp 4 --zero 1
//   mpirun -np 4 build/bin/03_zero --dp 4 --zero 3 --micro-batch 4
//   mpirun -np 2 build/bin/03_zero --dp 2 --zero 2 --micro-batch 4 --grad-accum 2
//   mpirun -np 2 build/bin/03_zero --dp 2 --zero 0          (plain data parallelism: chapter 02's hooks)
//   mpirun -np 2 build/bin/03_zero --dp 2 --zero 1 --zero-defer-gather   (the weight all-gather into the next forward)
#include <cmath>
#include <cstdio>

#include "../02_data_parallel/data_parallel.hpp"
#include "../common/formulas.hpp"
#include "../common/grid.hpp"
#include "../common/runtime.hpp"
#include "../common/train_loop.hpp"
#include "zero.hpp"

using namespace penta;

namespace {

// row r = the values rank r passed (a few uncounted scalar reductions; only rank 0 prints them)
std::vector<std::vector<double>> per_rank(Comm& comm, const std::vector<double>& mine) {
    std::vector<std::vector<double>> rows(comm.size(), std::vector<double>(mine.size()));
    for (size_t i = 0; i < mine.size(); i++) {
        std::vector<double> column = comm.all_gather_scalar(mine[i]);
        for (int r = 0; r < comm.size(); r++) rows[r][i] = column[r];
    }
    return rows;
}

int train(int argc, char** argv) {
    TrainConfig cfg;
    cfg.micro_batch = 8;  // x --dp 2 = chapter 01's global batch of 16
    int64_t zero = 1;
    Flags flags("03_zero", "Chapter 03: ZeRO-1/2/3 over --dp ranks (playbook: Zero Redundancy Optimizer).");
    cfg.register_flags(flags);
    cfg.register_parallel_flags(flags);
    flags.chapter("ZeRO (chapter 03)", {"dp"});
    flags.add("zero", &zero, "ZeRO stage: 1 optimizer state, 2 + gradients, 3 + parameters sharded; 0 plain DP (ch02)");
    bool defer_gather = false;
    flags.add("zero-defer-gather", &defer_gather, "ZeRO-1/2: leave the updated weights' all-gather in flight after "
              "the step; the next forward waits for each unit when it reaches it");
    if (!flags.parse(argc, argv)) return 0;
    cfg.validate();
    check_data_parallel_only(cfg, world_size(), "chapter 03");
    CHECK(!defer_gather || zero == 1 || zero == 2, "--zero-defer-gather needs --zero 1 or 2 (got --zero %lld): ZeRO-3 "
          "gathers each unit when the forward reaches it already, plain data parallelism gathers nothing",
          (long long)zero);

    Device device = resolve_device(cfg.device);
    LlamaConfig mc = resolve_model(cfg, (int)zero);  // the memory bound of this --zero
    ParallelGrid grid(make_world_comm(cfg, device), GridShape{(int)cfg.dp}, &mc);
    Comm& dp = grid.dp();
    auto data = make_dataset(cfg.data, (uint64_t)cfg.seed, (int32_t)mc.vocab);
    const ModelOptions mopt = model_options(cfg);
    const AdamWConfig adamw = adamw_config(cfg);

    // --zero 0: chapter 02's data parallelism, for comparison; 1-3: ZeRO (parse_zero_stage refuses the rest)
    const ZeroStage stage = zero != 0 ? parse_zero_stage(zero) : ZeroStage::zero1;
    Model model(mc, device, (uint64_t)cfg.seed, zero > 0 ? zero_model_options(stage, mopt) : mopt);
    std::unique_ptr<ZeroHooks> zero_hooks;     // ZeRO: its own AdamW over this rank's shard
    std::unique_ptr<AdamW> dp_optim;           // DP: AdamW over the whole buffer
    std::unique_ptr<DataParallelHooks> dp_hooks;
    if (zero > 0) {
        zero_hooks = std::make_unique<ZeroHooks>(model, dp, stage, adamw, &grid);
        if (defer_gather) zero_hooks->defer_weight_gather();
    } else {
        dp_optim = make_adamw(model, adamw, &grid);
        dp_hooks = std::make_unique<DataParallelHooks>(model, dp);
    }
    Trainer trainer = zero > 0 ? Trainer{model, zero_hooks->optimizer(), {zero_hooks.get()}}
                               : Trainer{model, *dp_optim, {dp_hooks.get()}};
    auto step_bytes = [&]() {
        return zero > 0 ? zero_hooks->last_step_traffic().total_bytes() : dp_hooks->last_step().bytes;
    };

    TrainLoop loop{trainer, *data, cfg, data_parallel_plan(cfg, dp), StepLogConfig{}, {}, {}};
    configure_log(loop, mc, device, dp.size());
    loop.world = &grid.world();
    loop.on_step = [&](StepRecord& rec, const StepResult&) { rec.extra.push_back({"MB sent", step_bytes() / 1e6}); };

    const int K = dp.size();
    const int64_t psi = model.n_params();
    if (world_rank() == 0) {
        std::printf("03_zero: model %s (%ld layers, hidden %ld, vocab %ld%s): Ψ = %ld params\n", mc.name.c_str(),
                    (long)mc.n_layers, (long)mc.hidden, (long)mc.vocab, mc.tied_embeddings ? ", tied" : "", (long)psi);
        std::printf("device %s; comm %s; dp %d ranks; %s\n", device_name(device), comm_backend_name(dp.backend()), K,
                    zero > 0 ? ("ZeRO-" + std::to_string(zero)).c_str() : "plain data parallelism (chapter 02)");
        std::printf("batch: %ld micro-batch x %ld grad-accum x %d ranks = %ld sequences x %ld tokens\n",
                    (long)cfg.micro_batch, (long)cfg.grad_accum, K, (long)loop.plan.global_batch, (long)cfg.seq);
    }
    print_task_baseline(cfg, mc);

    mem_reset_peak(device);
    run_training(loop);

    // ---- per rank: model state measured beside the formula, transient peak, bytes sent --------------------
    const MemStats& m = mem_stats(device);
    auto cur = [&](Tag t) { return (double)m.current[(int)t]; };
    const GatherWaits waits = zero == 1 || zero == 2 ? zero_hooks->weight_gather_waits() : GatherWaits{};
    std::vector<std::vector<double>> rows =
        per_rank(grid.world(), {cur(Tag::params), cur(Tag::grads), cur(Tag::master), cur(Tag::optim),
                                (double)m.peak[(int)Tag::comm], step_bytes(), (double)waits.waited,
                                (double)waits.exposed, waits.seconds});
    if (world_rank() != 0) return 0;
    std::vector<int64_t> units;
    for (const ParamUnit& u : model.layout().units) units.push_back(u.numel);
    std::printf("\nmodel state per rank, bytes (allocator's current count after training; formula: fp32, no master copy)\n");
    std::printf("  rank  %-22s %-22s %-10s %-22s  total        comm peak\n", "params", "grads", "master", "optim");
    for (int r = 0; r < K; r++) {
        const int64_t S = zero_shard_numel(units, K, r);
        const ModelStateBytes f = zero_model_state_bytes_fp32((int)zero, psi, S);
        const std::vector<double>& x = rows[r];
        const bool equal = x[0] == f.params && x[1] == f.grads && x[2] == f.master && x[3] == f.optim;
        std::printf("  %4d  %10.0f (%9ld) %10.0f (%9ld) %10.0f %10.0f (%9ld)  %-11.0f  %9.0f  %s\n", r, x[0], (long)f.params,
                    x[1], (long)f.grads, x[2], x[3], (long)f.optim, x[0] + x[1] + x[2] + x[3], x[4],
                    equal ? "(= formula)" : "(DIFFERENT from the formula)");
    }
    const ModelStateBytes pb = zero_model_state_bytes_bf16_mixed((int)zero, psi, K);
    std::printf("  (formula in parentheses.) For reference, the playbook's bf16 mixed precision, 2Ψ + 2Ψ + 12Ψ with the\n"
                "  terms this stage shards divided by N = %d: params %ld + grads %ld + fp32 master %ld + Adam %ld = %ld bytes\n",
                K, (long)pb.params, (long)pb.grads, (long)pb.master, (long)pb.optim, (long)pb.total());

    const double P = K > 1 ? (K - 1.0) / K * 4.0 * (double)psi : 0.0;
    const double formula = zero > 0 ? zero_step_bytes((int)zero, psi, mc.vocab * mc.hidden, mc.tied_embeddings,
                                                      cfg.grad_accum, K)
                                    : dp_bytes_per_step_formula(K, 4.0 * (double)psi);
    std::printf("\nbytes sent per step per rank (Comm's ring accounting; Ψ-bytes P = (K-1)/K * 4Ψ = %.0f):\n", P);
    std::printf("  rank  measured        formula         = x P\n");
    for (int r = 0; r < K; r++)
        std::printf("  %4d  %-14.0f  %-14.0f  %.4f  %s\n", r, rows[r][5], formula, P > 0 ? formula / P : 0.0,
                    formula_matches(rows[r][5], formula) ? "(equal)" : "(DIFFERENT)");
    std::printf("  ZeRO-1/2 and DP: 2P; ZeRO-2 with grad-accum A: (A+1)P; ZeRO-3: A(3P - untied embedding's backward gather)\n");
    if (zero == 1 || zero == 2) {
        std::printf("\nthe updated weights' all-gathers (one per unit, %zu units), %s:\n", units.size(),
                    defer_gather ? "deferred: each waited for when the next forward reaches its unit"
                                 : "waited for at once after the update (--zero-defer-gather: in the next forward)");
        std::printf("  rank  gathers waited  still in flight then  blocked\n");
        for (int r = 0; r < K; r++)
            std::printf("  %4d  %14.0f  %20.0f  %7.1f ms\n", r, rows[r][6], rows[r][7], 1e3 * rows[r][8]);
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) { return run_main(argc, argv, train); }
