// ep_training.cpp — chapter 08's dp × tp × ep run (ep_training.hpp): the flags, the pieces, the measured
// micro-batch and its tables, the step line.
//   mpirun -np 4 build/bin/08_expert_parallel --dp 4 --ep 4
#include "ep_training.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "../common/formulas.hpp"
#include "../common/hf_checkpoint.hpp"
#include "../common/runtime.hpp"

namespace penta {

bool parse_expert_parallel_flags(int argc, char** argv, TrainConfig& cfg, ExpertParallelFlags& f) {
    Flags flags("08_expert_parallel",
                "Chapter 08: a mixture of experts with its experts spread over --ep ranks (carved from --dp), tokens "
                "sent to them by all-to-all; composes with --tp (--sp) and ZeRO (playbook: Expert parallelism).");
    cfg.register_flags(flags);
    cfg.register_parallel_flags(flags);
    flags.add("zero", &f.zero, "ZeRO (chapter 03): 1, 2 or 3, the experts sharded over edp and the rest over dp; 0 "
              "plain all-reduce");
    flags.chapter("Expert parallelism (chapter 08)", {"ep"});
    register_moe_flags(flags, f);
    flags.group("PyTorch reference");
    flags.add("dump-reference", &cfg.dump_reference, "write weights, a batch, grads and 5 AdamW steps to DIR for "
              "tools/torch_moe.py, then exit (one rank: --dp 1 --ep 1)");
    if (!flags.parse(argc, argv)) return false;
    cfg.validate();
    if (f.zero != 0) parse_zero_stage(f.zero);
    check_moe_flags(f);
    CHECK(cfg.pp == 1 && cfg.cp == 1,
          "--pp %ld --cp %ld: this program combines --ep with --dp, --tp (--sp) and ZeRO; the balance loss and the "
          "capacity are per sequence, which context parallelism would cut (chapter 09 composes all five)",
          (long)cfg.pp, (long)cfg.cp);
    CHECK(!cfg.sp || (cfg.micro_batch * cfg.seq) % cfg.tp == 0,
          "--sp splits the --micro-batch %ld × --seq %ld tokens into --tp %ld equal blocks: the count must be divisible "
          "by --tp", (long)cfg.micro_batch, (long)cfg.seq, (long)cfg.tp);
    CHECK(!cfg.sp || cfg.eval_every == 0 || (kEvalRows * cfg.seq) % cfg.tp == 0,
          "--sp: the evaluation runs %ld sequences of --seq %ld, which --tp %ld must divide (or --eval-every 0)",
          (long)kEvalRows, (long)cfg.seq, (long)cfg.tp);
    return true;
}

void register_moe_flags(Flags& flags, ExpertParallelFlags& f) {
    flags.add("moe-balance", &f.balance, "load balancing: aux (the per-sequence balance loss, --moe-aux-coef) | bias "
              "(DeepSeek-V3's auxiliary-loss-free bias, --moe-bias-rate) | none");
    flags.add("moe-aux-coef", &f.aux_coef, "weight of the balance loss (with --moe-balance aux)");
    flags.add("moe-bias-rate", &f.bias_rate, "bias update per step (with --moe-balance bias)");
    flags.add("moe-capacity", &f.capacity, "capacity factor: an expert takes at most ceil(f k T / E) copies per "
              "sequence, the rest are dropped; 0: no capacity (no dropping)");
    flags.add("moe-router", &f.router, "softmax (Mixtral) | sigmoid (DeepSeek-V3) scores; default: the model's");
    flags.add("moe-shared", &f.shared, "shared experts (DeepSeekMoE: always on, one SwiGLU of N x the expert width); "
              "-1: the model's");
}

void check_moe_flags(const ExpertParallelFlags& f) {
    moe_options(f);
    CHECK(f.router.empty() || f.router == "softmax" || f.router == "sigmoid", "--moe-router %s must be softmax or sigmoid",
          f.router.c_str());
    CHECK(f.shared >= -1, "--moe-shared %ld must be >= 0 (-1: the model's)", (long)f.shared);
}

MoeOptions moe_options(const ExpertParallelFlags& f) {
    MoeOptions o;
    o.balance = parse_moe_balance(f.balance);
    CHECK(std::isfinite(f.aux_coef) && f.aux_coef >= 0, "--moe-aux-coef %g must be a finite number >= 0", f.aux_coef);
    CHECK(std::isfinite(f.bias_rate) && f.bias_rate >= 0, "--moe-bias-rate %g must be a finite number >= 0", f.bias_rate);
    CHECK(std::isfinite(f.capacity) && f.capacity >= 0,
          "--moe-capacity %g must be a finite number >= 0 (0: no capacity, nothing dropped)", f.capacity);
    o.aux_coef = f.aux_coef, o.bias_rate = f.bias_rate, o.capacity_factor = f.capacity;
    return o;
}

LlamaConfig resolve_moe_model(const TrainConfig& cfg, const ExpertParallelFlags& f) {
    LlamaConfig mc = resolve_model(cfg, (int)f.zero);
    CHECK(mc.moe.enabled(), "--model %s is a dense model: chapter 08 trains a mixture of experts (tiny-moe, "
          "mixtral-8x7b, deepseek-moe-16b or a mixtral config.json)", cfg.model.c_str());
    if (!f.router.empty()) mc.moe.sigmoid_scores = f.router == "sigmoid";
    if (f.shared >= 0) mc.moe.shared_experts = f.shared;
    mc.validate();
    if (!cfg.export_hf.empty()) {  // what the flags above changed, refused before training rather than after it
        check_hf_exportable(mc);
        const std::string lost = moe_hf_export_gap(moe_options(f));
        CHECK(lost.empty(), "--export-hf: model %s would have %s, which transformers' MixtralForCausalLM has no place "
              "for (train with --moe-balance aux or none)", mc.name.c_str(), lost.c_str());
    }
    return mc;
}

void check_expert_layout(const LlamaConfig& mc, int64_t ep, int64_t tp) {
    CHECK(mc.moe.experts % ep == 0, "--ep %ld must divide the model's %lld experts (%s): each ep rank holds E/ep",
          (long)ep, (long long)mc.moe.experts, mc.name.c_str());
    CHECK(mc.moe.expert_ffn % tp == 0, "--tp %ld must divide the experts' width %lld (%s)", (long)tp,
          (long long)mc.moe.expert_ffn, mc.name.c_str());
}

ExpertParallelTraining::ExpertParallelTraining(const TrainConfig& c, const ExpertParallelFlags& f) : cfg(c), flags(f) {
    device = resolve_device(cfg.device);
    mc = resolve_moe_model(cfg, f);
    grid = std::make_unique<ParallelGrid>(make_world_comm(cfg, device),
                                          GridShape{(int)cfg.dp, 1, 1, (int)cfg.tp, (int)cfg.ep}, &mc);
    check_expert_layout(mc, cfg.ep, cfg.tp);
    data = make_dataset(cfg.data, (uint64_t)cfg.seed, (int32_t)mc.vocab);
    moe = std::make_shared<MoeLayer>(mc, moe_options(f), device, &grid->ep(), &grid->tp());

    ModelOptions mo = tensor_parallel_options(model_options(cfg), grid->tp(), cfg.sp);
    mo.mlp_core = moe;  // the one piece of the model EP replaces
    if (f.zero > 0) mo = zero_model_options(parse_zero_stage(f.zero), mo);
    model = std::make_unique<Model>(mc, device, (uint64_t)cfg.seed, mo);
    seams_ = install_tensor_parallel(*model, grid->tp(), cfg.sp);
    opt_ = make_tp_optimizer(*model, *grid, f.zero, adamw_config(cfg));
    balance = std::make_unique<ExpertBalanceHooks>(*moe, &grid->dp());
}

ExpertParallelTraining::~ExpertParallelTraining() = default;

EpMeasured ExpertParallelTraining::measure_micro_batch() {
    const BatchPlan plan = data_parallel_plan(cfg, grid->dp());
    std::vector<MicroBatch> mbs = make_micro_batches(*data, 0, plan, device);
    EpMeasured m;
    moe->reset_stats();
    const double bytes0 = grid->ep().counters().total_bytes();
    mem_reset_peak(device);
    MicroBatchActs acts = model->forward(mbs[0], 1e4);  // any token count: the loss is not used
    m.saved_bytes = mem_stats(device).current[(int)Tag::activations];
    model->backward(acts);
    for (StepHooks* h : opt_.hooks) h->finish_gradients();
    model->zero_grads();
    m.ep_bytes = grid->ep().counters().total_bytes() - bytes0;
    m.layers = moe->stats();
    moe->reset_stats();
    mem_reset_peak(device);
    return m;
}

void ExpertParallelTraining::print_header() const {
    if (world_rank() != 0) return;
    const MoeConfig& e = mc.moe;
    std::printf("08_expert_parallel: model %s (%ld layers, hidden %ld, heads %ld, kv heads %ld, vocab %ld): %s params, "
                "%s active per token\n", mc.name.c_str(), (long)mc.n_layers, (long)mc.hidden, (long)mc.n_heads,
                (long)mc.n_kv_heads, (long)mc.vocab, human_count((double)mc.n_params()).c_str(),
                human_count((double)mc.n_active_params()).c_str());
    std::printf("experts: %ld of width %ld per MoE layer, top %ld (%s scores%s)%s%s; balance %s%s; capacity %s\n",
                (long)e.experts, (long)e.expert_ffn, (long)e.top_k, e.sigmoid_scores ? "sigmoid" : "softmax",
                e.norm_topk ? ", renormalised" : "",
                e.shared_experts ? strfmt(", %ld shared", (long)e.shared_experts).c_str() : "",
                e.first_dense ? strfmt(", layers < %ld dense", (long)e.first_dense).c_str() : "", flags.balance.c_str(),
                flags.balance == "aux" ? strfmt(" (coef %g)", flags.aux_coef).c_str()
                : flags.balance == "bias" ? strfmt(" (rate %g)", flags.bias_rate).c_str() : "",
                flags.capacity > 0 ? strfmt("factor %g: %ld copies per expert and sequence", flags.capacity,
                                            (long)expert_capacity(flags.capacity, e.top_k, cfg.seq, e.experts)).c_str()
                                   : "none (no token dropped)");
    std::printf("layout %s on %d ranks; device %s; comm %s; %d experts per ep rank; experts' gradients summed over "
                "edp (%d rank%s), the rest over dp (%d)\n", grid->shape().str().c_str(), grid->world().size(),
                device_name(device), comm_backend_name(grid->ep().backend()), moe->experts_per_rank(), grid->edp().size(),
                grid->edp().size() == 1 ? "" : "s", grid->dp().size());
    std::printf("batch: %ld micro-batch x %ld grad-accum x dp %ld = %ld sequences x %ld tokens; recompute %s; "
                "optimizer %s\n", (long)cfg.micro_batch, (long)cfg.grad_accum, (long)cfg.dp,
                (long)(cfg.micro_batch * cfg.grad_accum * cfg.dp), (long)cfg.seq, cfg.recompute.c_str(),
                flags.zero > 0 ? strfmt("AdamW, ZeRO-%ld", (long)flags.zero).c_str() : "AdamW + all-reduce");
    print_task_baseline(cfg, mc);
}

std::string load_bars(const std::vector<double>& load) {
    static const char* bars[] = {"▁", "▂", "▃", "▄", "▅", "▆", "▇", "█"};
    const double mx = load.empty() ? 0 : *std::max_element(load.begin(), load.end());
    std::string s;
    for (double v : load) s += mx > 0 ? bars[std::min(7, (int)std::floor(v / mx * 7.999))] : " ";
    return s;
}

void ExpertParallelTraining::print_measured(const EpMeasured& m) {
    Comm& world = grid->world();
    const int P = (int)cfg.ep, El = moe->experts_per_rank();
    const int64_t L = mc.n_layers, E = mc.moe.experts, h = mc.hidden;
    // every rank's copies sent to each ep rank, per layer: the routing the formula is evaluated on
    std::vector<std::vector<std::vector<int64_t>>> S(L, std::vector<std::vector<int64_t>>(P, std::vector<int64_t>(P, 0)));
    for (int64_t i = 0; i < L; i++) {
        if (!mc.moe.moe_layer(i)) continue;
        for (int q = 0; q < P; q++) {
            const std::vector<double> v = grid->ep().all_gather_scalar(m.layers[i].sent[q]);
            for (int p = 0; p < P; p++) S[i][p][q] = (int64_t)v[p];
        }
    }
    const bool twice = cfg.recompute == "full";  // full recomputation reruns the forward's all-to-alls
    double formula = 0;
    for (int64_t i = 0; i < L; i++)
        if (mc.moe.moe_layer(i))
            formula += ep_layer_all_to_all_bytes(S[i], grid->ep().rank(), h, El, true) +
                       (twice ? ep_layer_all_to_all_bytes(S[i], grid->ep().rank(), h, El, false) : 0);
    const std::vector<double> measured = world.all_gather_scalar(m.ep_bytes), predicted = world.all_gather_scalar(formula);
    std::vector<std::vector<double>> routed(E);  // layer first_dense's routed per expert, per world rank
    const int64_t first = mc.moe.first_dense;
    for (int64_t e = 0; e < E; e++) routed[e] = world.all_gather_scalar(m.layers[first].routed[e]);
    const std::vector<double> saved = world.all_gather_scalar((double)m.saved_bytes);
    if (world_rank() != 0) return;

    std::printf("\nlayer %ld of one micro-batch (%ld tokens per rank, top %ld): token copies each ep rank sends to each "
                "(ep group of rank 0; the diagonal stays home)\n", (long)first, (long)(cfg.micro_batch * cfg.seq),
                (long)mc.moe.top_k);
    std::printf("  %-12s", "from \\ to");
    for (int q = 0; q < P; q++) std::printf(" %8s", strfmt("ep %d", q).c_str());
    std::printf("   experts held\n");
    for (int p = 0; p < P; p++) {
        std::printf("  %-12s", strfmt("ep rank %d", p).c_str());
        for (int q = 0; q < P; q++) std::printf(" %8ld", (long)S[first][p][q]);
        std::printf("   %d-%d\n", p * El, p * El + El - 1);
    }
    std::vector<double> load(E, 0);
    for (int64_t e = 0; e < E; e++)
        for (int r = 0; r < world.size(); r++)
            if (grid_coords(grid->shape(), r).tp == 0) load[e] += routed[e][r];
    std::printf("  choices per expert over the micro-batch of every dp rank: %s ", load_bars(load).c_str());
    for (double v : load) std::printf(" %.0f", v);
    std::printf("  (MaxVio %.2f)\n", max_violation(load));

    std::printf("\nall-to-all bytes each rank sent on its ep group for that micro-batch (forward + backward, %ld MoE "
                "layers%s):\n  formula per layer (formulas.hpp): (ep-1)·E/ep·4 for the counts + h·4 per copy sent to or "
                "received from another rank, once forward, once backward\n",
                (long)(L - first), twice ? ", --recompute full: the forward twice" : "");
    for (int r = 0; r < world.size(); r++) {
        const GridCoords c = grid_coords(grid->shape(), r);
        std::printf("  rank %d (dp %d, tp %d; ep %d, edp %d): %10.0f bytes  formula %10.0f  %s\n", r, c.dp, c.tp, c.ep,
                    c.edp, measured[r], predicted[r], formula_matches(measured[r], predicted[r]) ? "(equal)" : "(DIFFERENT)");
    }
    std::printf("activations one micro-batch's forward kept, rank 0: %s\n", human_bytes((int64_t)saved[0]).c_str());
}

StepResult ExpertParallelTraining::run() {
    std::vector<StepHooks*> hooks = opt_.hooks;
    hooks.push_back(balance.get());
    Trainer trainer{*model, *opt_.optim, hooks};
    TrainLoop loop{trainer, *data, cfg, data_parallel_plan(cfg, grid->dp()), StepLogConfig{}, {}, {}};
    if (cfg.tp > 1)
        loop.full_logits = [this](const Tensor& local) { return gather_vocab_logits(grid->tp(), local, mc.vocab); };
    configure_log(loop, mc, device, grid->world().size());
    loop.world = &grid->world();
    double ep_bytes = grid->ep().counters().total_bytes();
    loop.on_step = [&](StepRecord& rec, const StepResult&) {
        const ExpertLoad& load = balance->last_step();
        const double now = grid->ep().counters().total_bytes();
        rec.extra.push_back({"drop", load.dropped});  // (the loop adds the aux loss itself)
        rec.extra.push_back({"maxvio", std::round(load.max_vio * 1e3) / 1e3});
        rec.extra.push_back({"a2a MiB", std::round((now - ep_bytes) / (1 << 20) * 100) / 100});
        ep_bytes = now;
        rec.arrays.push_back({"tokens_per_expert", load.total});
        for (int64_t i = 0; i < mc.n_layers; i++)
            if (mc.moe.moe_layer(i)) rec.arrays.push_back({strfmt("tokens_per_expert_layer%ld", (long)i), load.routed[i]});
        // each MoE layer's choices per expert as bars scaled to its busiest expert, and that one's load over the mean
        rec.detail = "    tokens per expert:";
        for (int64_t i = 0; i < mc.n_layers; i++)
            if (mc.moe.moe_layer(i))
                rec.detail += strfmt("  layer %ld %s %.2fx", (long)i, load_bars(load.routed[i]).c_str(),
                                     max_violation(load.routed[i]) + 1);
    };
    return run_training(loop);
}

}  // namespace penta
