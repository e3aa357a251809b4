// five_d_training.cpp — chapter 09's program: checks, parts, the layout / memory / bytes tables, the loop
// (five_d_training.hpp).
//   mpirun -np 8 build/bin/09_5d --dp 2 --tp 2 --pp 2
#include "five_d_training.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "../common/formulas.hpp"
#include "../common/runtime.hpp"

namespace penta {

FiveDTraining::FiveDTraining(const TrainConfig& c, const FiveDFlags& f) : cfg(c), flags(f) {
    device = resolve_device(cfg.device);
    mc = resolve_5d_model(cfg, flags);
    check_5d_layout(cfg, flags, mc, world_size());  // every rule that needs no other rank, before any work
    std::unique_ptr<Comm> world = make_world_comm(cfg, device);
    placement = discover_placement(*world);
    check_placement(shape_of(cfg), placement, flags.force_tp_across_nodes);  // tp inside a node
    grid = std::make_unique<ParallelGrid>(std::move(world), shape_of(cfg), &mc);
    data = make_dataset(cfg.data, (uint64_t)cfg.seed, (int32_t)mc.vocab);
    parts = std::make_unique<FiveDParts>(cfg, flags, mc, *grid, device, adamw_config(cfg));
    Model& m = parts->model();
    if (cfg.data == "addition" && cfg.cp == 1 && m.layout().slice.has_head) {
        LossCore* inner = parts->stage->seams.loss.get();
        if (!inner) local_loss_ = std::make_unique<LocalCrossEntropy>(), inner = local_loss_.get();
        meter_ = std::make_unique<TaskMeter>(inner, &grid->tp(), mc.vocab, cfg.seq);
        m.set_loss(meter_.get());
    }
}

FiveDTraining::~FiveDTraining() = default;

void FiveDTraining::print_header() const {
    if (world_rank() != 0) return;
    const bool moe = mc.moe.enabled();
    std::printf("09_5d: model %s (%ld layers, hidden %ld, heads %ld, kv heads %ld, %s %ld, vocab %ld%s): %s params%s\n",
                mc.name.c_str(), (long)mc.n_layers, (long)mc.hidden, (long)mc.n_heads, (long)mc.n_kv_heads,
                moe ? "experts" : "ffn", moe ? (long)mc.moe.experts : (long)mc.ffn, (long)mc.vocab,
                mc.tied_embeddings ? ", tied" : "", human_count((double)mc.n_params()).c_str(),
                moe ? strfmt(", %s active per token", human_count((double)mc.n_active_params()).c_str()).c_str() : "");
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    const std::string by = placement.faked ? " (PENTA_NODE_ID)"
                           : placement.nodes > 1 ? strfmt(" (by host name; node 0 is %s)", host) : "";
    std::printf("layout %s%s on %d ranks, %d node%s%s; device %s; comm %s\n", grid->shape().str().c_str(),
                cfg.sp ? " +sp" : "", grid->world().size(), placement.nodes, placement.nodes == 1 ? "" : "s",
                by.c_str(), device_name(device), comm_backend_name(grid->tp().backend()));
    const PipelinePlan& P = parts->stage->plan;
    std::printf("schedule %s over %d stage%s (%d micro-batches per step)%s%s; optimizer %s over dp x cp = %d ranks%s\n",
                flags.pp.schedule.c_str(), P.stages, P.stages == 1 ? "" : "s", (int)cfg.grad_accum,
                cfg.cp > 1 ? strfmt("; attention %s, %s chunks", flags.cp.attn.c_str(), flags.cp.shard.c_str()).c_str() : "",
                moe ? strfmt("; MoE balance %s, %d experts per ep rank", flags.moe.balance.c_str(),
                             parts->moe->experts_per_rank()).c_str() : "",
                flags.zero ? strfmt("AdamW, ZeRO-%ld", (long)flags.zero).c_str() : "AdamW + all-reduce",
                (int)(cfg.dp * cfg.cp), moe ? strfmt(", experts over edp = %d", grid->edp().size()).c_str() : "");
    std::printf("batch: %ld micro-batch x %ld micro-batches x dp %ld = %ld sequences x %ld tokens (%ld per cp rank); "
                "recompute %s\n", (long)cfg.micro_batch, (long)cfg.grad_accum, (long)cfg.dp,
                (long)(cfg.micro_batch * cfg.grad_accum * cfg.dp), (long)cfg.seq, (long)(cfg.seq / cfg.cp),
                cfg.recompute.c_str());
    print_task_baseline(cfg, mc);
}

void FiveDTraining::print_layout() const {
    if (world_rank() != 0) return;
    const PipelinePlan& P = parts->stage->plan;
    std::printf("\nlayout: rank -> coordinates (rank = tp + tp·(cp + cp·(dp + dp·pp)); ep, edp carved from dp x cp)\n");
    std::printf("  rank  node  gpu    dp  pp  cp  tp    ep edp   stage holds\n");
    for (int r = 0; r < grid->world().size(); r++) {
        const GridCoords c = grid_coords(grid->shape(), r);
        std::string held;
        for (int k = 0; k < P.chunks; k++) {
            const LayerRange lr = parts->stage->pieces[P.piece(c.pp, k)];
            held += strfmt("%slayers %ld-%ld", k ? ", " : "", (long)lr.begin, (long)lr.end - 1);
        }
        const PipelineSlice sl = stage_slice(P, parts->stage->pieces, c.pp);
        std::printf("  %4d  %4d  %3s    %2d  %2d  %2d  %2d    %2d  %2d   %s%s%s\n", r, placement.node[r],
                    device == Device::cuda ? strfmt("%d", placement.gpu[r]).c_str() : "cpu", c.dp, c.pp, c.cp, c.tp,
                    c.ep, c.edp, held.c_str(), sl.has_embedding ? " +embedding" : "", sl.has_head ? " +head" : "");
    }
}

plan::RankPrediction FiveDTraining::predict() const {
    // the planner's model of this very run: the same ParamLayout, ZeRO cut, saved tensors and schedule walk
    plan::Job job;
    job.model = mc;
    job.seq = cfg.seq;
    job.global_batch = cfg.dp * cfg.micro_batch * cfg.grad_accum;
    job.precision = cfg.precision == "fp32" ? plan::Precision::fp32 : plan::Precision::bf16_weights;
    job.kernel = parse_attention_kernel(cfg.attention);
    plan::Layout L;
    L.grid = shape_of(cfg);
    L.zero = (int)flags.zero, L.sp = cfg.sp, L.recompute = parse_recompute(cfg.recompute);
    L.schedule = parse_pipe_schedule(flags.pp.schedule), L.chunks = (int)flags.pp.chunks;
    L.micro_batch = cfg.micro_batch, L.grad_accum = cfg.grad_accum;
    if (!flags.pp.layers.empty()) L.layers = parse_layer_sizes(flags.pp.layers);
    plan::Machine m = plan::machine_preset("cpu");
    m.gpus_per_node = grid->world().size();  // the node column is the layout table's (placement); unused here
    return plan::predict_rank(job, m, L, grid->world().rank());
}

void FiveDTraining::print_memory_predicted() {
    const plan::RankPrediction me = predict();
    Comm& w = grid->world();
    const std::vector<double> pa = w.all_gather_scalar((double)me.state.params),
                              gr = w.all_gather_scalar((double)me.state.grads),
                              op = w.all_gather_scalar((double)(me.state.master + me.state.optim)),
                              ac = w.all_gather_scalar((double)me.activations);
    if (world_rank() != 0) return;
    std::printf("\nmemory per rank predicted by the planner (plan::predict_rank; --precision %s: %s; ZeRO-%ld of each "
                "unit over its group; activations: the most the schedule holds between two ops):\n",
                cfg.precision.c_str(), cfg.precision == "fp32" ? "4-byte weights, gradients, AdamW moments"
                                                               : "2-byte weights, f32 gradients, fp32 master and moments",
                (long)flags.zero);
    std::printf("  rank      params       grads   optimizer  activations        total\n");
    for (int r = 0; r < w.size(); r++)
        std::printf("  %4d  %10s  %10s  %10s   %10s   %10s\n", r, human_bytes((int64_t)pa[r]).c_str(),
                    human_bytes((int64_t)gr[r]).c_str(), human_bytes((int64_t)op[r]).c_str(),
                    human_bytes((int64_t)ac[r]).c_str(), human_bytes((int64_t)(pa[r] + gr[r] + op[r] + ac[r])).c_str());
}

namespace {
// the groups whose bytes the tables show, in the order of the columns
struct AxisGroup { const char* name; Comm* comm; };
std::vector<AxisGroup> axes(ParallelGrid& g) {
    return {{"tp", &g.tp()}, {"cp", &g.cp()}, {"pp", &g.pp()}, {"ep", &g.ep()}, {"dp x cp", &g.dp_cp()}, {"edp", &g.edp()}};
}

// per axis: whether this rank's group on it holds ranks of more than one node (collective: each group gathers
// its members' world ranks, one scalar each). Its bytes then cross the inter-node link: a ring or a pair of
// stages is as slow as its slowest hop, so the whole group's traffic counts as across nodes.
std::vector<bool> groups_across_nodes(ParallelGrid& g, const Placement& p) {
    std::vector<bool> across;
    for (const AxisGroup& a : axes(g)) {
        bool split = false;
        for (double r : a.comm->all_gather_scalar((double)g.world().rank())) split |= p.node[(int)r] != p.node[g.world().rank()];
        across.push_back(split);
    }
    return across;
}
}  // namespace

void FiveDTraining::print_measured(const std::vector<double>& axis_bytes, int64_t held_act, int64_t peak_act) {
    const MemStats& m = mem_stats(device);
    const plan::RankPrediction me = predict();
    Comm& w = grid->world();
    auto gather = [&](double v) { return w.all_gather_scalar(v); };
    const std::vector<double> pa = gather((double)m.current[(int)Tag::params]),
                              gr = gather((double)m.current[(int)Tag::grads]),
                              op = gather((double)(m.current[(int)Tag::optim] + m.current[(int)Tag::master])),
                              ac = gather((double)held_act), pk = gather((double)peak_act),
                              ppa = gather((double)me.state.params), pgr = gather((double)me.state.grads),
                              pop = gather((double)(me.state.master + me.state.optim)), pac = gather((double)me.activations);
    // the planner's bytes in the columns' order (tp, cp, pp, ep, dp x cp, edp): its dp is every gradient's
    // reduction, dense and expert. A MoE model's ep assumes uniform routing, and its dp x cp also carries the
    // balance statistics (ExpertBalanceHooks), which the planner leaves out: neither is compared
    const bool moe = mc.moe.enabled();
    auto compared = [&](int k) { return !(moe && (k == 3 || k == 4)); };
    const double planned[] = {me.bytes.tp, me.bytes.cp, me.bytes.pp, me.bytes.ep, me.bytes.dp};
    const char* names[] = {"tp", "cp", "pp", "ep", "dp"};
    std::vector<std::vector<double>> bytes, planned_all;
    for (double b : axis_bytes) bytes.push_back(gather(b));
    for (double b : planned) planned_all.push_back(gather(b));
    const std::vector<bool> across = placement.nodes > 1 ? groups_across_nodes(*grid, placement) : std::vector<bool>{};
    if (world_rank() != 0) {
        if (placement.nodes > 1) print_node_split(across, bytes);  // collective: every rank joins its gathers
        return;
    }
    std::printf("\nmemory per rank after step 1, measured (allocator's tags; activations: the most held between two ops "
                "of the step, device + host, beside the planner's; the allocator's peak, which adds what lives inside "
                "an op, after it):\n");
    std::printf("  rank      params       grads   optimizer        state    activations (planner)          peak\n");
    for (int r = 0; r < w.size(); r++) {
        const bool state_eq = pa[r] == ppa[r] && gr[r] == pgr[r] && op[r] == pop[r];
        std::printf("  %4d  %10s  %10s  %10s  %11s   %10s  %-22s %10s\n", r, human_bytes((int64_t)pa[r]).c_str(),
                    human_bytes((int64_t)gr[r]).c_str(), human_bytes((int64_t)op[r]).c_str(),
                    state_eq ? "(equal)" : "(DIFFERENT)", human_bytes((int64_t)ac[r]).c_str(),
                    strfmt("(%s, %+.1f%%)", human_bytes((int64_t)pac[r]).c_str(), (ac[r] / pac[r] - 1) * 100).c_str(),
                    human_bytes((int64_t)pk[r]).c_str());
    }
    const std::vector<AxisGroup> ax = axes(*grid);
    std::printf("\nbytes each rank sent in step 1, per axis (Comm's counters, ring accounting), beside the planner's:\n  rank");
    for (const AxisGroup& a : ax) std::printf("  %10s", a.name);
    std::printf("   planner\n");
    for (int r = 0; r < w.size(); r++) {
        std::printf("  %4d", r);
        for (size_t k = 0; k < ax.size(); k++) std::printf("  %10s", human_bytes((int64_t)bytes[k][r]).c_str());
        std::string note;
        for (int k = 0; k < 5; k++)
            if (compared(k) && !formula_matches(k == 4 ? bytes[4][r] + bytes[5][r] : bytes[k][r], planned_all[k][r]))
                note += strfmt("%s%s %s", note.empty() ? "" : ", ", names[k], human_bytes((int64_t)planned_all[k][r]).c_str());
        std::printf("   %s\n", note.empty() ? (moe ? "(equal: tp, cp, pp)" : "(equal)") : ("(DIFFERENT: " + note + ")").c_str());
    }
    std::printf("(tp: f/g or SP's gathers and the vocab-parallel loss; cp: the ring's K/V; pp: activations and their "
                "gradients, and the pair sum of a tied table's or DualPipe's two copies; ep: the all-to-all; dp x cp: "
                "dense gradients; edp: the experts' — the planner's dp is both%s)\n%s",
                moe ? "; a MoE model's ep and dp are not compared: the planner's ep assumes uniform routing, and its dp leaves "
                      "out the balance statistics" : "", placement.nodes > 1 ? "" : "\n");
    if (placement.nodes > 1) print_node_split(across, bytes);
}

void FiveDTraining::print_node_split(const std::vector<bool>& across, const std::vector<std::vector<double>>& bytes) {
    const std::vector<AxisGroup> ax = axes(*grid);
    std::vector<std::vector<double>> all_across;  // per axis, per rank: 1 when that rank's group spans nodes
    for (bool a : across) all_across.push_back(grid->world().all_gather_scalar(a ? 1.0 : 0.0));
    if (world_rank() != 0) return;
    std::printf("\nthe same bytes by where they went (%d nodes: a group whose ranks sit on more than one node sends over "
                "the inter-node link, at the pace of its slowest hop; one inside a node, over the node's own path):\n",
                placement.nodes);
    std::printf("  rank  node   inside node  by axis                           across nodes  by axis\n");
    for (int r = 0; r < grid->world().size(); r++) {
        double in = 0, out = 0;
        std::string in_axes, out_axes;
        for (size_t k = 0; k < ax.size(); k++) {
            if (bytes[k][r] == 0) continue;
            const bool x = all_across[k][r] != 0;
            (x ? out : in) += bytes[k][r];
            std::string& list = x ? out_axes : in_axes;
            list += strfmt("%s%s %s", list.empty() ? "" : ", ", ax[k].name, human_bytes((int64_t)bytes[k][r]).c_str());
        }
        std::printf("  %4d  %4d  %12s  %-32s %12s  %s\n", r, placement.node[r], human_bytes((int64_t)in).c_str(),
                    in_axes.empty() ? "-" : in_axes.c_str(), human_bytes((int64_t)out).c_str(),
                    out_axes.empty() ? "-" : out_axes.c_str());
    }
    std::printf("\n");
}

StepResult FiveDTraining::run() {
    Trainer trainer = parts->trainer();
    TrainLoop loop{trainer, *data, cfg, parts->plan, StepLogConfig{}, {}, {}};
    if (cfg.tp > 1)
        loop.full_logits = [this](const Tensor& local) { return gather_vocab_logits(grid->tp(), local, mc.vocab); };
    configure_log(loop, mc, device, grid->world().size());
    loop.world = &grid->world();
    const std::vector<AxisGroup> ax = axes(*grid);
    auto sent = [&] {
        std::vector<double> b;
        for (const AxisGroup& a : ax) b.push_back(a.comm->counters().total_bytes());
        b[0] -= meter_ ? meter_->gather_bytes() : 0;  // the accuracy's gathers are the meter's, not training's
        // the pair sum of the tensors two stages hold (a tied table, DualPipe's copies) runs on a group split from
        // pp: pipeline traffic too
        if (parts->stage->replicas) b[2] += parts->stage->replicas->bytes();
        return b;
    };
    std::vector<double> before = sent();
    mem_reset_peak(device);
    loop.on_step = [&](StepRecord& rec, const StepResult&) {
        const TaskAccuracy mine = meter_ ? meter_->take() : TaskAccuracy{};
        if (cfg.data == "addition" && cfg.cp == 1) {
            const double acc = global_accuracy(grid->world(), mine);
            if (acc >= 0 && rec.task_accuracy < 0) rec.task_accuracy = acc;
        }
        if (rec.step == 1) {
            std::vector<double> now = sent();
            for (size_t k = 0; k < now.size(); k++) now[k] -= before[k];
            print_measured(now, parts->stage->executor->last_step().peak_held(),
                           mem_stats(device).peak[(int)Tag::activations]);
        }
    };
    return run_training(loop);
}

}  // namespace penta
