// pp_testing.cpp — the pipeline-parallel training runner of pp_testing.hpp.
// Playbook: "Pipeline parallelism". Run the tests that use it: `make test CH=07`.
#include "pp_testing.hpp"

#include <algorithm>
#include <cstring>

#include "../../02_data_parallel/data_parallel.hpp"
#include "../../04_tensor_parallel/tensor_parallel.hpp"
#include "../../common/formulas.hpp"

using namespace penta;
using namespace penta::testing;
using namespace penta::tp_testing;

namespace penta::pp_testing {

namespace {
// the gradient the optimizer is about to apply (after every hook's reduction), copied to the host
struct CaptureGrads : StepHooks {
    explicit CaptureGrads(AdamW& o) : optim(o) {}
    void before_update() override { grads.push_back(optim.grad.to_host()); }
    AdamW& optim;
    std::vector<std::vector<float>> grads;
};
}  // namespace

std::string PpLayout::str() const {
    return strfmt("pp %d × dp %d × tp %d%s%s, %s%s%s, micro-batch %lld × %lld micro-batches, seq %lld, %s %d layers%s",
                  pp, dp, tp, sp ? " +sp" : "", zero ? strfmt(" ZeRO-%d", zero).c_str() : "", schedule.c_str(),
                  chunks > 1 ? strfmt(" v %d", chunks).c_str() : "", layers.empty() ? "" : (" layers " + layers).c_str(),
                  (long long)micro_batch, (long long)grad_accum, (long long)seq, small ? "small" : "tiny", n_layers,
                  tied || small ? " tied" : "");
}

LlamaConfig PpLayout::config() const {
    if (small) return preset("small");
    LlamaConfig c = tp_config(64, tied);
    c.n_layers = n_layers;
    return c;
}

PpRun run_pp_layout(const PpLayout& L, int steps, bool keep_grads) {
    const LlamaConfig cfg = L.config();
    RandomTokens data((int32_t)cfg.vocab);
    ParallelGrid grid(make_world_comm(CommBackend::mpi), GridShape{L.dp, L.pp, 1, L.tp}, &cfg);
    TrainConfig tc;
    tc.seq = L.seq, tc.micro_batch = L.micro_batch, tc.grad_accum = L.grad_accum;
    tc.pp = L.pp, tc.dp = L.dp, tc.tp = L.tp, tc.sp = L.sp;
    tc.seed = (int64_t)kModelSeed;
    tc.recompute = recompute_name(L.recompute);
    PipelineFlags pf;
    pf.zero = L.zero, pf.schedule = L.schedule, pf.chunks = L.chunks, pf.layers = L.layers;
    PipelineParts parts(tc, pf, cfg, grid, Device::cpu, kAdamW);
    CaptureGrads capture(*parts.opt.optim);
    Trainer trainer = parts.trainer();
    std::vector<StepHooks*> hooks = parts.hooks;
    if (keep_grads) hooks.push_back(&capture);  // after the replicas' sum: what the optimizer applies
    trainer.hooks = hooks;
    const BatchPlan plan = data_parallel_plan(tc, grid.dp());

    PpRun run;
    for (const PipeOp& op : parts.plan.ops[grid.coords().pp]) run.weight_ops += op.writes_weight_grads();
    double pair_before = 0;
    for (int s = 0; s < steps; s++) {
        pair_before = parts.replicas ? parts.replicas->bytes() : 0.0;
        StepResult r = training_step(trainer, data, s, plan, kAdamW.lr, kClip);
        run.losses.push_back(r.loss);
        run.norms.push_back(r.grad_norm);
    }
    run.grads = capture.grads;
    const PipelineStepRecord& last = parts.executor->last_step();
    run.stage = grid.coords().pp;
    run.ran_the_list = last.ops.size() == parts.plan.ops[run.stage].size();
    for (size_t k = 0; k < last.ops.size() && run.ran_the_list; k++)
        run.ran_the_list = last.ops[k].op == parts.plan.ops[run.stage][k];
    for (const PipeOpRecord& r : last.ops) run.peak_in_flight = std::max(run.peak_in_flight, r.in_flight);
    run.peak_activations = last.peak_held();
    run.forward_bytes = last.forward_bytes[0];
    run.sent_bytes = last.sent_bytes;
    run.pair_bytes = parts.replicas ? parts.replicas->bytes() - pair_before : 0.0;
    run.stage_numel = parts.model->n_params();
    if (parts.opt.dp_hooks) {
        run.dp_bytes = parts.opt.dp_hooks->last_step().bytes;
        run.dp_once = dp_bytes_per_step_formula(L.dp, (double)parts.model->grads().nbytes());
    }
    // this stage's weights, tp shards put together, into the whole model's layout: each tensor by the stage
    // holding its original (sharded on pp); a replica is checked against the original after the sum over pp
    const ParamLayout& mine = parts.model->layout();
    const ParamLayout stage = ParamLayout::build(cfg, 1, 0, mine.slice);  // this stage's tensors, unsharded
    const ParamLayout whole = ParamLayout::build(cfg);
    const std::vector<float> w = gather_tensor_parallel(cfg, mine, parts.model->params(), grid.tp());
    std::vector<float> all(whole.numel, 0.0f);
    for (const ParamTensor& t : stage.tensors)
        if (t.sharded_on & kAxisPP) std::copy_n(w.begin() + t.offset, t.numel(), all.begin() + whole.find(t.name).offset);
    Tensor sum = Tensor::from_host(all, {whole.numel}, Device::cpu, Tag::workspace);
    grid.pp().all_reduce(sum);  // every element from exactly one stage: exact
    run.params = sum.to_host();
    for (const ParamTensor& t : stage.tensors) {
        if (t.sharded_on & kAxisPP) continue;
        const ParamTensor& o = whole.find(t.name);
        INFO(L.str() << ": the replica of " << t.name << " on stage " << grid.coords().pp);
        CHECK(std::memcmp(&w[t.offset], &run.params[o.offset], t.numel() * sizeof(float)) == 0);
        run.replicas_checked++;
    }
    return run;
}

PpRun check_pp_trains_like_one_rank(const PpLayout& L, int steps, double rtol) {
    INFO(L.str());
    const PpRun run = run_pp_layout(L, steps);
    const LlamaConfig cfg = L.config();
    const Trained ref = train_one_rank(cfg, L.seq, L.dp * L.micro_batch * L.grad_accum, L.recompute, steps);
    check_same_training(run, ref, cfg, rtol, L.str());
    CHECK(run.weight_ops == L.grad_accum * (L.schedule == "dualpipe" ? 1 : L.chunks));  // every chunk of every micro-batch
    if (L.dp > 1 && L.zero == 0) CHECK(formula_matches(run.dp_bytes, run.dp_once));
    CHECK(run.ran_the_list);
    // what the stage held at once, measured while it ran, beside the formula; with one chunk and a fused backward
    // every micro-batch keeps the same bytes from its F to its BW, so the peak is the count times one forward's
    const int p = L.pp, m = (int)L.grad_accum, i = run.stage;
    if (L.schedule == "afab" || L.schedule == "1f1b") {
        CHECK(run.peak_in_flight == (L.schedule == "afab" ? pipeline_in_flight_afab(m) : pipeline_in_flight_1f1b(p, i, m)));
        CHECK(run.peak_activations == run.peak_in_flight * run.forward_bytes);
        CHECK(run.forward_bytes > 0);
    }
    if (L.schedule == "zb1") CHECK(run.peak_in_flight == pipeline_in_flight_zb1(p, m));
    if (L.schedule == "interleaved") {  // a short last round runs some backwards early: fewer
        if (m % p == 0) CHECK(run.peak_in_flight == pipeline_in_flight_interleaved(p, i, m, L.chunks));
        else CHECK(run.peak_in_flight <= pipeline_in_flight_interleaved(p, i, m, L.chunks));
    }
    // the bytes the stage sent in the step, by closed form (not from the op list): one (b·s, h) f32 tensor (b·s/tp
    // under SP) per activation passed on and per gradient passed back. A micro-batch crosses both boundaries of
    // every chunk it visits, but the model's two ends: with v chunks a stage (interleaved; DualPipe's micro-batches
    // visit one of its two chunks each) sends 2v per micro-batch, one fewer on the first stage (nothing before
    // virtual stage 0) and one fewer on the last (the loss ends virtual stage S-1): m at the ends of one chunk's
    // pipeline, 2m in the middle
    const int v = L.schedule == "interleaved" ? L.chunks : 1;
    const int64_t sends = (int64_t)m * (2 * v - (i == 0) - (i == p - 1));
    const int64_t tokens = L.micro_batch * L.seq / (L.sp ? L.tp : 1);
    INFO("stage " << i << " sent " << run.sent_bytes << " B on the pipeline group, " << run.pair_bytes << " B on the pair");
    CHECK(formula_matches(run.sent_bytes, pipeline_stage_bytes(sends, tokens, cfg.hidden)));
    // and on the mirror pair, once per step: an all-reduce of two ranks sends its buffer once (2(K-1)/K, K = 2).
    // DualPipe: every tensor of stage s is stage p-1-s's too; a tied model: the table (V/tp rows of h) on the first
    // and the last stage, ZeRO's shard of it over dp; nothing elsewhere
    const int64_t shards = L.zero ? L.dp : 1;
    double pair = 0;
    if (L.schedule == "dualpipe") pair = 4.0 * (double)(run.stage_numel / shards);
    else if (cfg.tied_embeddings && (i == 0 || i == p - 1)) pair = 4.0 * (double)(cfg.vocab / L.tp * cfg.hidden / shards);
    CHECK(formula_matches(run.pair_bytes, pair));
    return run;
}

}  // namespace penta::pp_testing
