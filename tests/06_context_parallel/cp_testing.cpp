// cp_testing.cpp — the context-parallel training runner of cp_testing.hpp.
// Playbook: "Context parallelism". Run the tests that use it: `make test CH=06`.
#include "cp_testing.hpp"

#include "../../03_zero/zero.hpp"
#include "../../05_sequence_parallel/sequence_parallel.hpp"
#include "../../06_context_parallel/cp_training.hpp"

using namespace penta;
using namespace penta::testing;
using namespace penta::tp_testing;

namespace penta::cp_testing {

std::string CpLayout::str() const {
    return strfmt("dp %d × cp %d × tp %d%s%s, %s %s, micro-batch %lld × grad-accum %lld, seq %lld, recompute %s", dp,
                  cp, tp, sp ? " +sp" : "", zero ? strfmt(" ZeRO-%d", zero).c_str() : "", cp_attn_name(attn),
                  cp_shard_name(shard), (long long)micro_batch, (long long)grad_accum, (long long)seq,
                  recompute_name(recompute));
}

CpRun run_cp_layout(const CpLayout& L, int steps) {
    const LlamaConfig cfg = tp_config(64);
    RandomTokens data((int32_t)cfg.vocab);
    ParallelGrid grid(make_world_comm(CommBackend::mpi), GridShape{L.dp, 1, L.cp, L.tp}, &cfg);
    TrainConfig tc;
    tc.seq = L.seq, tc.micro_batch = L.micro_batch, tc.grad_accum = L.grad_accum;
    auto attention = make_context_attention(grid, L.shard, L.attn, L.seq);
    ModelOptions mo;
    mo.recompute = L.recompute;
    mo = tensor_parallel_options(mo, grid.tp(), L.sp);
    mo.attention_core = attention;
    if (L.zero) mo = zero_model_options(parse_zero_stage(L.zero), mo);
    Model model(cfg, Device::cpu, kModelSeed, mo);
    const TensorParallelSeams seams = install_tensor_parallel(model, grid.tp(), L.sp);  // when tp > 1
    TensorParallelOptimizer opt = make_cp_optimizer(model, grid, L.zero, kAdamW);
    const BatchPlan plan = context_parallel_plan(tc, grid, L.shard);

    CpRun run;
    Trainer trainer{model, *opt.optim, opt.hooks};
    for (int s = 0; s < steps; s++) {
        StepResult r = training_step(trainer, data, s, plan, kAdamW.lr, kClip);
        if (s == 0) run.saved_activation_bytes = r.saved_activation_bytes;
        run.losses.push_back(r.loss);
        run.norms.push_back(r.grad_norm);
    }
    run.stats = attention->stats();
    Tensor params = opt.zero ? opt.zero->gather_params() : model.params();
    run.params = L.tp > 1 ? gather_tensor_parallel(cfg, model.layout(), params, grid.tp()) : params.to_host();
    return run;
}

void check_cp_trains_like_one_rank(const CpLayout& L, int steps, double rtol) {
    INFO(L.str());
    const CpRun run = run_cp_layout(L, steps);
    const LlamaConfig cfg = tp_config(64);
    const Trained ref = train_one_rank(cfg, L.seq, L.dp * L.micro_batch * L.grad_accum, L.recompute, steps);
    check_same_training(run, ref, cfg, rtol, L.str());
    CHECK(run.stats.forward_calls > 0);  // the ring (or all-gather) ran: the test is not one rank's attention
}

}  // namespace penta::cp_testing
