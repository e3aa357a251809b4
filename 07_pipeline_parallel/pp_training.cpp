// pp_training.cpp — chapter 07's dp × pp × tp run (pp_training.hpp): the flags and their rules, the parts of a
// rank, the loop. The tables printed after training are tools/pp_report.cpp.
//   mpirun -np 2 build/bin/07_pipeline_parallel --pp 2 --pp-schedule zb1
#include "pp_training.hpp"

#include <sys/stat.h>

#include <cmath>
#include <cstdio>

#include "../05_sequence_parallel/sequence_parallel.hpp"
#include "../common/runtime.hpp"
#include "tools/chrome_trace.hpp"

namespace penta {

bool parse_pipeline_flags(int argc, char** argv, TrainConfig& cfg, PipelineFlags& pf) {
    Flags flags("07_pipeline_parallel",
                "Chapter 07: pipeline parallelism — the layers over --pp stages, micro-batches through them by "
                "--pp-schedule; composes with --dp (or ZeRO-1/2), --tp and --sp (playbook: Pipeline parallelism).");
    cfg.register_flags(flags);
    cfg.register_parallel_flags(flags);
    flags.add("zero", &pf.zero, "ZeRO over each stage's dp group (chapter 03): 1 or 2 (3 is refused with a pipeline); "
              "0 plain all-reduce");
    flags.chapter("Pipeline parallelism (chapter 07)", {"pp"});
    register_pipeline_flags(flags, pf);
    flags.group("Faults and timeouts");
    flags.add("inject-at", &pf.inject_at, "where --inject-failure / --inject-hang strike their stage: step (when the step "
              "begins, as in every chapter) | first-f (after the stage's first forward of the step, its activation sent: "
              "the next stage is then waiting on a receive from it)");
    if (!flags.parse(argc, argv)) return false;
    cfg.validate();
    check_pipeline_flags(cfg, pf);
    CHECK(cfg.cp == 1 && cfg.ep == 1,
          "--cp %ld --ep %ld: context and expert parallelism are chapters 06 and 08 (all five together: chapter 09); "
          "this program combines --pp with --dp, --tp and --sp", (long)cfg.cp, (long)cfg.ep);
    if (pf.zero != 0) parse_zero_stage(pf.zero);
    CHECK(pf.inject_at == "step" || pf.inject_at == "first-f", "--inject-at '%s' must be step or first-f",
          pf.inject_at.c_str());
    CHECK(pf.zero != 3,
          "--zero 3 with --pp %ld: ZeRO-3 all-gathers a stage's weights for every micro-batch's forward and again for "
          "its backward, and a pipeline needs many micro-batches to shrink its bubble, so the two multiply each "
          "other's traffic; the playbook pairs pipeline parallelism with ZeRO-1 (as DeepSeek-V3 trains) or ZeRO-2: "
          "use --zero 1 or 2", (long)cfg.pp);
    CHECK(cfg.eval_every == 0,
          "--eval-every %ld: the held-out evaluation runs the whole model on every rank, and here its layers are "
          "spread over the --pp stages: pass --eval-every 0 (this program's default)", (long)cfg.eval_every);
    CHECK(!cfg.sp || (cfg.micro_batch * cfg.seq) % cfg.tp == 0,
          "--sp splits the --micro-batch %ld × --seq %ld = %ld tokens of a micro-batch into --tp %ld equal blocks: the "
          "token count must be divisible by --tp", (long)cfg.micro_batch, (long)cfg.seq,
          (long)(cfg.micro_batch * cfg.seq), (long)cfg.tp);
    return true;
}

void register_pipeline_flags(Flags& flags, PipelineFlags& pf) {
    flags.add("pp-schedule", &pf.schedule, "afab (GPipe) | 1f1b | interleaved (--pp-chunks) | zb1 (ZB-H1) | dualpipe");
    flags.add("pp-chunks", &pf.chunks, "model chunks per stage for --pp-schedule interleaved (v)");
    flags.add("pp-layers", &pf.layers, "layers per virtual stage, as in 3,3,2 (--pp × --pp-chunks numbers; default even)");
    flags.add("pp-cost-b", &pf.cost_b, "the logical clock's B (input-gradient pass) in units of F");
    flags.add("pp-cost-w", &pf.cost_w, "the logical clock's W (weight-gradient pass) in units of F; BW = B + W");
    flags.add("trace", &pf.trace, "write the run's timeline as a Chrome trace to this file (open it in ui.perfetto.dev)");
}

void check_pipeline_flags(const TrainConfig&, const PipelineFlags& pf) {
    parse_pipe_schedule(pf.schedule);
    CHECK(pf.chunks >= 1, "--pp-chunks %ld must be >= 1", (long)pf.chunks);
    for (auto [name, v] : {std::pair<const char*, float>{"--pp-cost-b", pf.cost_b}, {"--pp-cost-w", pf.cost_w}})
        CHECK(std::isfinite(v) && v > 0 && v <= 1000, "%s %g must be a number of F units in (0, 1000]", name, v);
    if (!pf.trace.empty()) {  // refused now, not after training
        const size_t slash = pf.trace.find_last_of('/');
        const std::string dir = slash == std::string::npos ? "." : pf.trace.substr(0, slash + 1);
        struct stat st;
        CHECK(stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode), "--trace %s: the folder %s does not exist",
              pf.trace.c_str(), dir.c_str());
        CHECK(stat(pf.trace.c_str(), &st) != 0 || S_ISREG(st.st_mode), "--trace %s exists and is not a file",
              pf.trace.c_str());
    }
}

PipelinePlan pipeline_plan(const TrainConfig& cfg, const PipelineFlags& pf, const LlamaConfig& mc,
                           std::vector<LayerRange>* pieces) {
    const PipeScheduleKind kind = parse_pipe_schedule(pf.schedule);
    // the rules on --pp and --pp-chunks, then the layer split, which bounds --pp × --pp-chunks by the model's
    // layers; only then the schedule, whose ops grow with --pp × --pp-chunks × --grad-accum (a --pp-chunks of 10^9
    // would otherwise be built first, for minutes and gigabytes)
    check_pipeline_shape(kind, (int)cfg.pp, (int)pf.chunks);  // every integer flag fits an int (config.hpp)
    const std::vector<int64_t> sizes = pf.layers.empty() ? std::vector<int64_t>{} : parse_layer_sizes(pf.layers);
    *pieces = split_layers(mc.n_layers, cfg.pp * pf.chunks, sizes);
    PipelinePlan plan = make_pipeline_plan(kind, (int)cfg.pp, (int)cfg.grad_accum, (int)pf.chunks);
    CHECK(plan.virtual_stages == cfg.pp * pf.chunks, "pipeline_plan: the schedule has %d virtual stages, not --pp × "
          "--pp-chunks", plan.virtual_stages);
    return plan;
}

PipelineParts::PipelineParts(const TrainConfig& cfg, const PipelineFlags& pf, const LlamaConfig& mc,
                             ParallelGrid& grid, Device device, const AdamWConfig& ac, const StageCores& cores) {
    plan = pipeline_plan(cfg, pf, mc, &pieces);
    ModelOptions mo = tensor_parallel_options(model_options(cfg), grid.tp(), cfg.sp);
    mo.slice = stage_slice(plan, pieces, grid.coords().pp);  // the one thing PP changes in the model
    if (cores.attention_core) mo.attention_core = cores.attention_core;
    if (cores.mlp_core) mo.mlp_core = cores.mlp_core;
    if (pf.zero > 0) mo = zero_model_options(parse_zero_stage(pf.zero), mo);
    model = std::make_unique<Model>(mc, device, (uint64_t)cfg.seed, mo);
    seams = install_tensor_parallel(*model, grid.tp(), cfg.sp);  // when --tp > 1
    executor = std::make_unique<PipelineExecutor>(plan, grid.pp());
    pp = &grid.pp();
    opt = make_tp_optimizer(*model, grid, pf.zero, ac, cores.data, cores.data_axes);
    hooks = opt.hooks;
    // decided alike on every stage (the pair is a split of pp): some tensor is held by two of them
    if ((mc.tied_embeddings && cfg.pp > 1) || plan.kind == PipeScheduleKind::dualpipe) {
        replicas = std::make_unique<PipelineReplicaHooks>(*model, *opt.optim, grid.pp());
        hooks.push_back(replicas.get());
    }
}

PipelineParts::~PipelineParts() = default;

PipelineTraining::PipelineTraining(const TrainConfig& c, const PipelineFlags& f)
    : cfg(c), pf(f), kind(parse_pipe_schedule(f.schedule)) {
    device = resolve_device(cfg.device);
    mc = resolve_model(cfg, (int)pf.zero);
    validate_grid(GridShape{(int)cfg.dp, (int)cfg.pp, 1, (int)cfg.tp}, world_size(), &mc);  // the layout's rules first
    std::vector<LayerRange> pieces;
    pipeline_plan(cfg, pf, mc, &pieces);  // then the schedule's and the split's, before any allocation
    grid = std::make_unique<ParallelGrid>(make_world_comm(cfg, device),
                                          GridShape{(int)cfg.dp, (int)cfg.pp, 1, (int)cfg.tp}, &mc);
    data = make_dataset(cfg.data, (uint64_t)cfg.seed, (int32_t)mc.vocab);
    parts = std::make_unique<PipelineParts>(cfg, pf, mc, *grid, device, adamw_config(cfg));
    parts->executor->record_trace(!pf.trace.empty());
}

PipelineTraining::~PipelineTraining() = default;

void PipelineTraining::print_header() const {
    const PipelinePlan& P = parts->plan;
    // every stage's layers, for rank 0 to print (one scalar gather per number; once)
    std::string stages;
    for (int s = 0; s < P.stages; s++) {
        std::string chunks;
        for (int c = 0; c < P.chunks; c++) {
            const LayerRange r = parts->pieces[P.piece(s, c)];
            chunks += r.end - r.begin == 1 ? strfmt("%s%ld", c ? "," : "", (long)r.begin)
                                           : strfmt("%s%ld-%ld", c ? "," : "", (long)r.begin, (long)r.end - 1);
        }
        const PipelineSlice sl = stage_slice(P, parts->pieces, s);
        const bool one = P.chunks == 1 && parts->pieces[P.piece(s, 0)].end - parts->pieces[P.piece(s, 0)].begin == 1;
        stages += strfmt("%s stage %d: %s %s%s%s", s ? ";" : "", s, one ? "layer" : "layers", chunks.c_str(),
                         sl.has_embedding ? " +embedding" : "",
                         sl.has_head ? (mc.tied_embeddings && !sl.has_embedding ? " +head (tied: a replica of the table)"
                                                                                : " +head")
                                     : "");
    }
    if (world_rank() != 0) return;
    std::printf("07_pipeline_parallel: model %s (%ld layers, hidden %ld, heads %ld, kv heads %ld, ffn %ld, vocab %ld%s): "
                "%s params\n",
                mc.name.c_str(), (long)mc.n_layers, (long)mc.hidden, (long)mc.n_heads, (long)mc.n_kv_heads,
                (long)mc.ffn, (long)mc.vocab, mc.tied_embeddings ? ", tied" : "", human_count((double)mc.n_params()).c_str());
    std::printf("layout %s on %d ranks; device %s; comm %s\n", grid->shape().str().c_str(), grid->world().size(),
                device_name(device), comm_backend_name(grid->pp().backend()));
    std::printf("schedule %s: %d stages, %d chunk(s) per stage, %d virtual stages;%s\n", pipe_schedule_name(kind),
                P.stages, P.chunks, P.virtual_stages, stages.c_str());
    std::printf("batch: %ld micro-batch x %ld micro-batches (grad-accum) x dp %ld = %ld sequences x %ld tokens; "
                "recompute %s; optimizer %s over each stage's dp group\n",
                (long)cfg.micro_batch, (long)cfg.grad_accum, (long)cfg.dp,
                (long)(cfg.micro_batch * cfg.grad_accum * cfg.dp), (long)cfg.seq, cfg.recompute.c_str(),
                pf.zero > 0 ? strfmt("AdamW, ZeRO-%ld", (long)pf.zero).c_str() : "AdamW + all-reduce");
    print_task_baseline(cfg, mc);
}

StepResult PipelineTraining::run() {
    Trainer trainer = parts->trainer();
    // --inject-at first-f: the loop's injection at the step's start is off, and the stage strikes inside the
    // schedule instead, after its first forward, with its neighbours blocked on receives from it. The step is the
    // one the optimizer takes next (the loop's, from a fresh start or a checkpoint; fp16's skipped steps aside).
    TrainConfig loop_cfg = cfg;
    if (pf.inject_at == "first-f") {
        loop_cfg.inject_failure.clear(), loop_cfg.inject_hang.clear();
        parts->executor->after_op = [this](int k, const PipeOp& op) {
            if (k != 0) return;  // every stage's list begins with a forward
            const int64_t step = parts->opt.optim->step_count + 1;
            try {
                inject_failure_if_due(cfg, step);
            } catch (const Error& e) {  // say where it struck
                throw Error(strfmt("%s, inside the schedule after %s (--inject-at first-f)", e.what(),
                                   pipe_op_str(op).c_str()));
            }
            inject_hang_if_due(cfg, step);
        };
    }
    TrainLoop loop{trainer, *data, loop_cfg, data_parallel_plan(cfg, grid->dp()), StepLogConfig{}, {}, {}};
    configure_log(loop, mc, device, grid->world().size());
    loop.world = &grid->world();
    double pp_bytes = grid->pp().counters().total_bytes();
    Comm& pp = grid->pp();
    loop.on_step = [&](StepRecord& rec, const StepResult&) {
        const double now = pp.counters().total_bytes();
        rec.extra.push_back({"pp MiB", std::round((now - pp_bytes) / (1 << 20) * 100) / 100});
        pp_bytes = now;
        // the bubble on the wall clock as the playbook defines it: this stage's idle time in the step's schedule
        // (against the last op's end on any stage) over its compute time, a ratio that passes 100% when a stage
        // idles longer than it computes (4 stages of one layer each on 2 cores); the mean over the stages
        double busy = 0, end = 0;
        for (const PipeOpRecord& r : parts->executor->last_step().ops) busy += r.end - r.start, end = std::max(end, r.end);
        const double makespan = pp.size() > 1 ? pp.all_reduce_scalar(end, ReduceOp::max) : end;
        const double mine = busy > 0 ? (makespan - busy) / busy : 0;
        const double mean = (pp.size() > 1 ? pp.all_reduce_scalar(mine) : mine) / pp.size();
        rec.extra.push_back({"idle/compute %", std::round(mean * 1000) / 10});
    };
    return run_training(loop);
}

void PipelineTraining::write_trace() {
    if (pf.trace.empty()) return;
    const GridCoords c = grid->coords();
    write_chrome_trace(pf.trace, grid->world(), parts->executor->trace(),
                       strfmt("rank %d (pp %d, dp %d, tp %d)", grid->world().rank(), c.pp, c.dp, c.tp));
    if (world_rank() == 0)
        std::printf("\nwrote the Chrome trace of the run to %s (%zu spans on rank 0): open it in ui.perfetto.dev\n",
                    pf.trace.c_str(), parts->executor->trace().size());
}

}  // namespace penta
