// tp_training.cpp — the dp × tp training run of chapters 04 and 05 (tp_training.hpp).
//   mpirun -np 2 build/bin/04_tensor_parallel --tp 2
#include "tp_training.hpp"

#include <cmath>
#include <cstdio>

#include "../02_data_parallel/data_parallel.hpp"
#include "../03_zero/zero.hpp"
#include "../common/formulas.hpp"
#include "../common/runtime.hpp"

namespace penta {

bool parse_tensor_parallel_flags(int argc, char** argv, const char* program, const char* summary, TrainConfig& cfg,
                                 bool& zero1) {
    int64_t zero = 0;
    Flags flags(program, summary);
    cfg.register_flags(flags);
    cfg.register_parallel_flags(flags);
    flags.add("zero", &zero, "1: shard the optimizer state over the dp group (chapter 03's ZeRO-1); 0: plain DP");
    if (!flags.parse(argc, argv)) return false;
    cfg.validate();
    CHECK(zero == 0 || zero == 1, "--zero %ld: with tensor parallelism this program offers 0 (DP all-reduce) or 1 "
          "(ZeRO-1); stages 2 and 3 are chapter 03's", (long)zero);
    zero1 = zero == 1;
    return true;
}

void TensorParallelOptimizer::wrap(std::unique_ptr<StepHooks> h) {
    outer_hooks = std::move(h);
    hooks = outer_hooks.get();
}

TensorParallelOptimizer make_tp_optimizer(Model& model, Comm& dp, Comm& tp, bool zero1, const AdamWConfig& ac) {
    TensorParallelOptimizer o;
    if (zero1) {
        auto z = std::make_unique<ZeroHooks>(model, dp, ZeroStage::zero1, ac);
        o.optim = &z->optimizer();  // its grad norm gets the tp sum below
        for (int u = 0; u < z->shards().units(); u++) o.pieces.push_back(z->shards().piece(u));
        o.dp_hooks = std::move(z);
    } else {
        o.own_optim = std::make_unique<AdamW>(model.params(), model.grads(), optimizer_ranges(model), ac);
        o.optim = o.own_optim.get();
        if (dp.size() > 1)
            o.dp_hooks = std::make_unique<DataParallelHooks>(model, *o.own_optim, dp);
        else
            o.dp_hooks = std::make_unique<SingleDeviceHooks>(*o.own_optim);
    }
    tensor_parallel_grad_norm(*o.optim, model.layout(), tp, o.pieces);
    o.hooks = o.dp_hooks.get();
    return o;
}

TensorParallelTraining::TensorParallelTraining(const TrainConfig& c, bool zero1) : cfg(c) {
    CHECK(cfg.pp == 1 && cfg.cp == 1 && cfg.ep == 1,
          "--pp %ld --cp %ld --ep %ld: pipeline, context and expert parallelism are chapters 06-08; this program "
          "combines --dp and --tp only",
          (long)cfg.pp, (long)cfg.cp, (long)cfg.ep);
    device = resolve_device(cfg.device);
    mc = resolve_model(cfg);
    // every rule of the layout is checked here, on every rank, before any work
    grid = std::make_unique<ParallelGrid>(make_world_comm(parse_comm_backend(cfg.comm, device)),
                                          GridShape{(int)cfg.dp, 1, 1, (int)cfg.tp}, &mc);
    data = make_dataset(cfg.data, (uint64_t)cfg.seed, (int32_t)mc.vocab);

    ModelOptions mo = model_options(cfg);
    mo.tp = (int)cfg.tp, mo.tp_rank = grid->coords().tp;  // this rank's shard of every matrix
    if (zero1) mo = zero_model_options(ZeroStage::zero1, mo);
    model = std::make_unique<Model>(mc, device, (uint64_t)cfg.seed, mo);
    loss_ = std::make_unique<VocabParallelCrossEntropy>(grid->tp(), model->layout(), mc.vocab);
    model->set_loss(loss_.get());
    set_boundary(std::make_unique<TensorParallel>(grid->tp()));

    // over dp: chapter 02's all-reduce, or chapter 03's ZeRO-1 (the same setup the tests train with)
    opt_ = make_tp_optimizer(*model, grid->dp(), grid->tp(), zero1, adamw_config(cfg));
}

TensorParallelTraining::~TensorParallelTraining() = default;

void TensorParallelTraining::set_boundary(std::unique_ptr<TensorParallel> b) {
    model->set_boundary(b.get());
    meter_ = std::make_unique<LayerTraffic>(*model, *b);
    model->set_param_provider(meter_.get());
    boundary_ = std::move(b);
}

std::vector<LayerTraffic::Bytes> TensorParallelTraining::measure_micro_batch(
    const std::function<void(const MicroBatchActs&)>& inspect) {
    const BatchPlan plan = data_parallel_plan(cfg, grid->dp());
    Batch b = load_batch(*data, global_sample_id(0, plan.first_row, plan.global_batch), plan.micro_batch, plan.seq);
    DeviceBatch db = to_device(b, 0, plan.micro_batch, device);
    meter_->reset();
    MicroBatchActs acts = model->forward(db.tokens, db.targets, plan.micro_batch, plan.seq,
                                         std::max<double>(1.0, (double)count_targets(b)));
    if (inspect) inspect(acts);
    model->backward(acts);  // outside a step: the DP hooks do not communicate
    model->zero_grads();
    std::vector<LayerTraffic::Bytes> layers = meter_->layers();
    meter_->reset();
    mem_reset_peak(device);  // the step lines' peaks are then training's own
    return layers;
}

void TensorParallelTraining::print_header(const char* program) const {
    if (world_rank() != 0) return;
    const int t = (int)cfg.tp;
    std::printf("%s: model %s (%ld layers, hidden %ld, heads %ld, kv heads %ld, ffn %ld, vocab %ld%s): %s params, "
                "%s on each tp rank\n",
                program, mc.name.c_str(), (long)mc.n_layers, (long)mc.hidden, (long)mc.n_heads, (long)mc.n_kv_heads,
                (long)mc.ffn, (long)mc.vocab, mc.tied_embeddings ? ", tied" : "", human_count((double)mc.n_params()).c_str(),
                human_count((double)model->n_params()).c_str());
    std::printf("layout %s on %d ranks; device %s; comm %s; per tp rank: %ld heads, %ld kv heads, ffn %ld, vocab rows "
                "%ld (padded vocab %ld)\n",
                grid->shape().str().c_str(), grid->world().size(), device_name(device),
                comm_backend_name(grid->tp().backend()), (long)(mc.n_heads / t), (long)(mc.n_kv_heads / t),
                (long)(mc.ffn / t), (long)model->layout().vocab_rows, (long)(model->layout().vocab_rows * t));
    std::printf("batch: %ld micro-batch x %ld grad-accum x dp %ld = %ld sequences x %ld tokens; recompute %s, "
                "attention %s; optimizer %s\n",
                (long)cfg.micro_batch, (long)cfg.grad_accum, (long)cfg.dp,
                (long)(cfg.micro_batch * cfg.grad_accum * cfg.dp), (long)cfg.seq, cfg.recompute.c_str(),
                cfg.attention.c_str(), opt_.pieces.empty() ? "AdamW" : "AdamW, ZeRO-1 over dp");
    print_task_baseline(cfg, mc);
}

void TensorParallelTraining::print_traffic(const std::vector<LayerTraffic::Bytes>& layers, const char* boundary) const {
    if (world_rank() != 0) return;
    const int t = (int)cfg.tp;
    const double formula = tp_layer_comm_elements(t, cfg.seq, cfg.micro_batch, mc.hidden) * 4;  // f32
    std::printf("\ntensor-parallel bytes per layer, one micro-batch (s %ld, b %ld, h %ld, t %d), %s, sent by each rank "
                "(ring accounting):\n",
                (long)cfg.seq, (long)cfg.micro_batch, (long)mc.hidden, t, boundary);
    std::printf("  layer     forward    backward   fwd + bwd   formula 8(t-1)/t*s*b*h*4\n");
    for (size_t i = 0; i < layers.size(); i++) {
        const double sum = layers[i].forward + layers[i].backward;
        std::printf("  %5zu  %10.0f  %10.0f  %10.0f  %10.0f  %s\n", i, layers[i].forward, layers[i].backward, sum,
                    formula, formula_matches(sum, formula) ? "(equal)" : "(DIFFERENT)");
    }
    if (cfg.recompute == "full")
        std::printf("  (--recompute full reruns each block's forward inside backward: its f/g traffic again)\n");
}

StepResult TensorParallelTraining::run() {
    TrainLoop loop{*model, *opt_.hooks, *data, cfg, data_parallel_plan(cfg, grid->dp()), StepLogConfig{}, {}, {}};
    loop.full_logits = [this](const Tensor& local) { return gather_vocab_logits(grid->tp(), local, mc.vocab); };
    configure_log(loop, mc, device, grid->world().size());
    double tp_bytes = grid->tp().counters().total_bytes();
    loop.on_step = [&](StepRecord& rec, const StepResult&) {  // everything the tp group sent this step
        const double now = grid->tp().counters().total_bytes();
        rec.extra.push_back({"tp MiB", std::round((now - tp_bytes) / (1 << 20) * 100) / 100});
        tp_bytes = now;
    };
    return run_training(loop);
}

}  // namespace penta
