// tp_training.cpp — the dp × tp training run of chapters 04 and 05 (tp_training.hpp).
//   mpirun -np 2 build/bin/04_tensor_parallel --tp 2
#include "tp_training.hpp"

#include <cmath>
#include <cstdio>

#include "../common/formulas.hpp"
#include "../common/runtime.hpp"

namespace penta {

bool parse_tensor_parallel_flags(int argc, char** argv, const char* program, const char* summary, TrainConfig& cfg,
                                 int64_t& zero) {
    Flags flags(program, summary);
    cfg.register_flags(flags);
    cfg.register_parallel_flags(flags);
    if (std::string(program) == "05_sequence_parallel") flags.chapter("Sequence parallelism (chapter 05)", {"sp", "tp"});
    else flags.chapter("Tensor parallelism (chapter 04)", {"tp"});
    flags.group("Parallel layout");
    flags.add("zero", &zero, "ZeRO over the dp group (chapter 03): 1 optimizer state, 2 + gradients, 3 + weights; 0 plain DP");
    if (!flags.parse(argc, argv)) return false;
    cfg.validate();
    if (zero != 0) parse_zero_stage(zero);  // names --zero and the stages
    return true;
}

TensorParallelTraining::TensorParallelTraining(const TrainConfig& c, int64_t zero_stage) : cfg(c), zero(zero_stage) {
    CHECK(cfg.pp == 1 && cfg.cp == 1 && cfg.ep == 1,
          "--pp %ld --cp %ld --ep %ld: pipeline, context and expert parallelism are chapters 06-08; this program "
          "combines --dp and --tp only",
          (long)cfg.pp, (long)cfg.cp, (long)cfg.ep);
    device = resolve_device(cfg.device);
    mc = resolve_model(cfg, (int)zero);
    // every rule of the layout is checked here, on every rank, before any work
    grid = std::make_unique<ParallelGrid>(make_world_comm(cfg, device),
                                          GridShape{(int)cfg.dp, 1, 1, (int)cfg.tp}, &mc);
    data = make_dataset(cfg.data, (uint64_t)cfg.seed, (int32_t)mc.vocab);

    // this rank's shard of every matrix; with --sp the norms' gradients are partial sums over tp
    ModelOptions mo = tensor_parallel_options(model_options(cfg), grid->tp(), cfg.sp);
    if (zero > 0) mo = zero_model_options(parse_zero_stage(zero), mo);
    model = std::make_unique<Model>(mc, device, (uint64_t)cfg.seed, mo);
    install(std::make_unique<TensorParallel>(grid->tp()));  // f / g and the vocab-parallel loss

    // over dp: chapter 02's all-reduce, or chapter 03's ZeRO (the same setup the tests train with)
    opt_ = make_tp_optimizer(*model, *grid, zero, adamw_config(cfg));
}

TensorParallelTraining::~TensorParallelTraining() {
    if (meter_) model->remove_observer(meter_.get());
}

void TensorParallelTraining::install(std::unique_ptr<TensorParallel> b) {
    seams_ = install_tensor_parallel(*model, grid->tp(), std::move(b));
    if (meter_) model->remove_observer(meter_.get());
    meter_ = std::make_unique<LayerTraffic>(*model, *seams_.boundary);
    model->add_observer(meter_.get());
}

std::vector<LayerTraffic::Bytes> TensorParallelTraining::measure_micro_batch(
    const std::function<void(const MicroBatchActs&)>& inspect) {
    const BatchPlan plan = data_parallel_plan(cfg, grid->dp());
    std::vector<MicroBatch> mbs = make_micro_batches(*data, 0, plan, device);
    meter_->reset();
    MicroBatchActs acts = model->forward(mbs[0], 1e4);  // any token count: the loss is not used
    if (inspect) inspect(acts);
    model->backward(acts);  // outside a step: the DP hooks do not communicate; ZeRO-2/3 reduce-scatter...
    for (StepHooks* h : opt_.hooks) h->finish_gradients();  // ...and are waited for here
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
                cfg.attention.c_str(), zero > 0 ? strfmt("AdamW, ZeRO-%ld over dp", (long)zero).c_str() : "AdamW");
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

void TensorParallelTraining::print_model_state() const {
    const MemStats& m = mem_stats(device);
    auto cur = [&](Tag t) { return (double)m.current[(int)t]; };
    const std::vector<double> mine = {cur(Tag::params), cur(Tag::grads), cur(Tag::master), cur(Tag::optim)};
    std::vector<std::vector<double>> rows;  // per world rank (a few uncounted scalar reductions)
    for (double v : mine) rows.push_back(grid->world().all_gather_scalar(v));
    if (world_rank() != 0) return;
    // the formula for rank r: its tp shard of Ψ_t elements cut over dp by ZeRO's per-unit shards
    std::vector<int64_t> units;
    for (const ParamUnit& u : model->layout().units) units.push_back(u.numel);
    const int64_t psi = model->n_params();  // the same on every tp rank (vocab padded, matrices split evenly)
    std::printf("\nmodel state per rank, bytes (allocator's current count; formula: ZeRO-%ld of the tp shard's "
                "Ψ_t = %ld, fp32):\n", (long)zero, (long)psi);
    std::printf("  rank  (dp, tp)      params       grads      master       optim  formula\n");
    for (int r = 0; r < grid->world().size(); r++) {
        const GridCoords c = grid_coords(grid->shape(), r);
        const int64_t S = zero_shard_numel(units, (int)cfg.dp, c.dp);
        const ModelStateBytes f = zero_model_state_bytes_fp32((int)zero, psi, S);
        const bool equal = rows[0][r] == f.params && rows[1][r] == f.grads && rows[2][r] == f.master &&
                           rows[3][r] == f.optim;
        std::printf("  %4d  (%2d, %2d)  %10.0f  %10.0f  %10.0f  %10.0f  %s\n", r, c.dp, c.tp, rows[0][r], rows[1][r],
                    rows[2][r], rows[3][r], equal ? "(equal)" : "(DIFFERENT)");
    }
}

StepResult TensorParallelTraining::run() {
    Trainer trainer{*model, *opt_.optim, opt_.hooks};
    TrainLoop loop{trainer, *data, cfg, data_parallel_plan(cfg, grid->dp()), StepLogConfig{}, {}, {}};
    loop.full_logits = [this](const Tensor& local) { return gather_vocab_logits(grid->tp(), local, mc.vocab); };
    configure_log(loop, mc, device, grid->world().size());
    loop.world = &grid->world();
    double tp_bytes = grid->tp().counters().total_bytes();
    loop.on_step = [&](StepRecord& rec, const StepResult&) {  // everything the tp group sent this step
        const double now = grid->tp().counters().total_bytes();
        rec.extra.push_back({"tp MiB", std::round((now - tp_bytes) / (1 << 20) * 100) / 100});
        tp_bytes = now;
    };
    return run_training(loop);
}

}  // namespace penta
