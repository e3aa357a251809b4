// five_d_testing.cpp — the 5D training runner of five_d_testing.hpp.
// Playbook: "5D parallelism". Run the tests that use it: `make test CH=09`.
#include "five_d_testing.hpp"

#include "../../08_expert_parallel/moe_layer.hpp"
#include "../../common/runtime.hpp"

using namespace penta;
using namespace penta::testing;
using namespace penta::tp_testing;
using namespace penta::ep_testing;

namespace penta::five_d_testing {

std::string FiveDLayout::str() const {
    return strfmt("dp %d × pp %d × cp %d × tp %d%s (ep %d)%s, %s, %s, micro-batch %lld × %lld, seq %lld, %d layers", dp,
                  pp, cp, tp, sp ? " +sp" : "", ep, zero ? strfmt(" ZeRO-%d", zero).c_str() : "", schedule.c_str(),
                  moe ? ("MoE, balance " + balance).c_str() : "dense", (long long)micro_batch, (long long)grad_accum,
                  (long long)seq, n_layers) +
           (precision == "fp32" ? "" : ", precision " + precision);
}

LlamaConfig FiveDLayout::config() const {
    LlamaConfig c = moe ? moe_config() : tp_config(64);
    c.n_layers = n_layers;
    return c;
}

TrainConfig FiveDLayout::train_config() const {
    TrainConfig tc;
    tc.seq = seq, tc.micro_batch = micro_batch, tc.grad_accum = grad_accum;
    tc.dp = dp, tc.pp = pp, tc.cp = cp, tc.tp = tp, tc.ep = ep, tc.sp = sp;
    tc.seed = (int64_t)kModelSeed;
    tc.eval_every = 0;
    tc.precision = precision;
    return tc;
}

FiveDFlags FiveDLayout::flags() const {
    FiveDFlags f;
    f.zero = zero, f.pp.zero = zero;
    f.pp.schedule = schedule;
    f.moe.balance = balance;
    return f;
}

FiveDRun run_5d_layout(const FiveDLayout& L, int steps) {
    const LlamaConfig cfg = L.config();
    const TrainConfig tc = L.train_config();
    const FiveDFlags f = L.flags();
    check_5d_layout(tc, f, cfg, world_size());
    RandomTokens data((int32_t)cfg.vocab);
    ParallelGrid grid(make_world_comm(CommBackend::mpi), shape_of(tc), &cfg);
    FiveDParts parts(tc, f, cfg, grid, Device::cpu, kAdamW);
    Trainer trainer = parts.trainer();
    const std::unique_ptr<StepHooks> scaler = add_precision_hooks(trainer, parts.model().precision());  // fp16: ch 11
    FiveDRun run;
    for (int s = 0; s < steps; s++) {
        StepResult r = training_step(trainer, data, s, parts.plan, kAdamW.lr, kClip);
        run.losses.push_back(r.loss);
        run.norms.push_back(r.grad_norm);
    }
    if (parts.attention) run.ring_calls = (int)parts.attention->stats().forward_calls;
    run.layout = L.moe ? one_rank_layout(cfg, moe_options(f.moe)) : ParamLayout::build(cfg);
    ZeroHooks* zero = parts.stage->opt.zero.get();
    Tensor params = zero && L.zero == 3 ? zero->gather_params() : parts.model().params();
    run.params = gather_full_params(run.layout, parts.model().layout(), params, grid.coords(), grid.world());
    return run;
}

void check_5d_trains_like_one_rank(const FiveDLayout& L, int steps, double rtol) {
    INFO(L.str());
    const FiveDRun run = run_5d_layout(L, steps);
    const LlamaConfig cfg = L.config();
    const int64_t rows = L.dp * L.micro_batch * L.grad_accum;  // the global batch
    if (L.moe) {
        EpLayout E;
        E.dp = L.dp, E.micro_batch = L.micro_batch, E.grad_accum = L.grad_accum, E.seq = L.seq;
        E.moe = moe_options(L.flags().moe);
        E.precision = Precision::named(L.precision);
        const EpRun ref = train_moe_one_rank(cfg, E, steps);
        check_same_training(run, ref, ref.layout, rtol, L.str());
    } else {
        const Trained ref = train_one_rank(cfg, L.seq, rows, Recompute::none, steps, Precision::named(L.precision));
        check_same_training(run, ref, cfg, rtol, L.str());
    }
    if (L.cp > 1) CHECK(run.ring_calls > 0);  // the ring ran: not one rank's attention
}

}  // namespace penta::five_d_testing
