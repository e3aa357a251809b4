// ep_testing.cpp — the expert-parallel training runner of ep_testing.hpp.
// Playbook: "Expert parallelism". Run the tests that use it: `make test CH=08`.
#include "ep_testing.hpp"

#include "../../03_zero/zero.hpp"
#include "../../04_tensor_parallel/tp_optimizer.hpp"
#include "../../05_sequence_parallel/sequence_parallel.hpp"
#include "../04_tensor_parallel/tp_testing.hpp"

using namespace penta;
using namespace penta::testing;
using namespace penta::tp_testing;

namespace penta::ep_testing {

LlamaConfig moe_config() {
    LlamaConfig c = tp_config(64);
    c.name = "tiny moe (tests)";
    c.moe.experts = 4, c.moe.top_k = 2, c.moe.expert_ffn = 32;
    return c;
}

std::string EpLayout::str() const {
    return strfmt("dp %d × tp %d%s, ep %d%s, micro-batch %lld × grad-accum %lld, seq %lld, balance %s, capacity %g, "
                  "recompute %s", dp, tp, sp ? " +sp" : "", ep, zero ? strfmt(", ZeRO-%d", zero).c_str() : "",
                  (long long)micro_batch, (long long)grad_accum, (long long)seq, moe_balance_name(moe.balance),
                  moe.capacity_factor, recompute_name(recompute)) +
           (precision.gemm == DType::f32 && precision.param == DType::f32 ? "" : ", " + precision.str());
}

ParamLayout one_rank_layout(const LlamaConfig& cfg, const MoeOptions& opt) {
    MoeLayer one(cfg, opt, Device::cpu);
    return ParamLayout::build(cfg, LayoutOptions{}, nullptr, &one);
}

std::vector<float> gather_full_params(const ParamLayout& full, const ParamLayout& mine, const Tensor& flat,
                                      const GridCoords& coords, Comm& world) {
    REQUIRE(flat.numel() == mine.numel);
    const std::vector<float> a = flat.to_host();
    std::vector<float> out(full.numel, 0.0f);
    for (const ParamTensor& s : mine.tensors) {
        if (!counts_in_grad_norm(s, coords)) continue;  // another rank holds the same values
        const ParamTensor& f = full.find(s.name);
        const int64_t cols = s.shape.size() == 2 ? s.shape[1] : s.shape[0];
        const int64_t full_cols = f.shape.size() == 2 ? f.shape[1] : f.shape[0];
        const int64_t rows = s.shape.size() == 2 ? std::min(s.shape[0], f.shape[0] - s.row0) : 1;  // vocab padding
        for (int64_t i = 0; i < rows; i++)
            std::copy_n(a.begin() + s.offset + i * cols, cols, out.begin() + f.offset + (s.row0 + i) * full_cols + s.col0);
    }
    Tensor sum = Tensor::from_host(out, {full.numel}, Device::cpu);
    world.all_reduce(sum);  // every element owned by exactly one rank
    return sum.to_host();
}

namespace {

// the steps every run takes, whatever the layout: the trainer with its hooks, the balance hook last
void train_steps(Trainer trainer, ExpertBalanceHooks& balance, const Dataset& data, const BatchPlan& plan, int steps,
                 EpRun& run) {
    trainer.hooks.push_back(&balance);
    for (int s = 0; s < steps; s++) {
        StepResult r = training_step(trainer, data, s, plan, kAdamW.lr, kClip);
        run.losses.push_back(r.loss);
        run.norms.push_back(r.grad_norm);
        run.aux.push_back(r.aux_loss);
        run.dropped.push_back(balance.last_step().dropped);
    }
}

}  // namespace

EpRun run_ep_layout(const LlamaConfig& cfg, const EpLayout& L, int steps) {
    RandomTokens data((int32_t)cfg.vocab);
    ParallelGrid grid(make_world_comm(CommBackend::mpi), GridShape{L.dp, 1, 1, L.tp, L.ep}, &cfg);
    auto moe = std::make_shared<MoeLayer>(cfg, L.moe, Device::cpu, &grid.ep(), &grid.tp());
    ModelOptions mo;
    mo.recompute = L.recompute;
    mo.precision = L.precision;
    mo = tensor_parallel_options(mo, grid.tp(), L.sp);
    mo.mlp_core = moe;
    if (L.zero) mo = zero_model_options(parse_zero_stage(L.zero), mo);
    Model model(cfg, Device::cpu, kModelSeed, mo);
    const TensorParallelSeams seams = install_tensor_parallel(model, grid.tp(), L.sp);  // when tp > 1
    TensorParallelOptimizer opt = make_tp_optimizer(model, grid, L.zero, kAdamW);
    ExpertBalanceHooks balance(*moe, &grid.dp());
    TrainConfig tc;
    tc.seq = L.seq, tc.micro_batch = L.micro_batch, tc.grad_accum = L.grad_accum;
    EpRun run;
    train_steps(Trainer{model, *opt.optim, opt.hooks}, balance, data, data_parallel_plan(tc, grid.dp()), steps, run);
    run.layout = one_rank_layout(cfg, L.moe);
    Tensor params = opt.zero ? opt.zero->gather_params() : model.params();
    run.params = gather_full_params(run.layout, model.layout(), params, grid.coords(), grid.world());
    return run;
}

namespace {

// one rank, the global batch in micro-batches of `micro_batch` sequences, attention by `kernel`
EpRun moe_one_rank(const LlamaConfig& cfg, const EpLayout& L, int steps, int64_t micro_batch, AttentionKernel kernel) {
    RandomTokens data((int32_t)cfg.vocab);
    auto moe = std::make_shared<MoeLayer>(cfg, L.moe, Device::cpu);
    ModelOptions mo;
    mo.recompute = L.recompute;
    mo.precision = L.precision;
    mo.attention = kernel;
    mo.mlp_core = moe;
    Model model(cfg, Device::cpu, kModelSeed, mo);
    AdamW optim(model.params(), model.grads(), optimizer_ranges(model), kAdamW, L.precision.fp32_master);
    ExpertBalanceHooks balance(*moe, nullptr);
    BatchPlan plan;
    plan.seq = L.seq;
    plan.global_batch = L.dp * L.micro_batch * L.grad_accum;
    plan.micro_batch = micro_batch;
    plan.grad_accum = plan.global_batch / micro_batch;
    EpRun run;
    train_steps(Trainer{model, optim}, balance, data, plan, steps, run);
    run.layout = model.layout();
    run.params = model.params().to_host();
    run.param_dtype = model.precision().param;
    return run;
}

}  // namespace

EpRun train_moe_one_rank(const LlamaConfig& cfg, const EpLayout& L, int steps) {
    const int64_t rows = L.dp * L.micro_batch * L.grad_accum;
    EpRun run = moe_one_rank(cfg, L, steps, rows, AttentionKernel::flash);  // one micro-batch
    // the same training with only the order of the sums changed (equivalence.hpp's train_reference does the
    // same for dense models): micro-batches of one sequence, the naive kernel. The capacity is per sequence,
    // so the same copies are dropped.
    const EpRun reordered = moe_one_rank(cfg, L, steps, 1, AttentionKernel::naive);
    run.reordered_losses = reordered.losses;
    run.reordered_norms = reordered.norms;
    run.reordered_params = reordered.params;
    run.reordering = strfmt("%lld micro-batches of one sequence, naive attention", (long long)rows);
    return run;
}

void check_ep_trains_like_one_rank(const LlamaConfig& cfg, const EpLayout& L, int steps, double rtol) {
    INFO(L.str());
    const EpRun run = run_ep_layout(cfg, L, steps);
    const EpRun ref = train_moe_one_rank(cfg, L, steps);
    check_same_training(run, ref, ref.layout, rtol, L.str());
    for (int s = 0; s < steps; s++) {
        INFO("step " << s + 1 << ": aux " << run.aux[s] << " vs " << ref.aux[s] << ", dropped " << run.dropped[s]
                     << " vs " << ref.dropped[s]);
        CHECK(std::abs(run.aux[s] - ref.aux[s]) <= rtol * std::abs(ref.aux[s]));
        CHECK(run.dropped[s] == ref.dropped[s]);
    }
}

}  // namespace penta::ep_testing
