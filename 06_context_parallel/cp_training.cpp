// cp_training.cpp — chapter 06's dp × cp × tp run (cp_training.hpp): the flags, the pieces, the measured
// micro-batch and its tables.
//   mpirun -np 4 build/bin/06_context_parallel --cp 4 --cp-shard contiguous
#include "cp_training.hpp"

#include <cmath>
#include <cstdio>

#include "../common/formulas.hpp"
#include "../common/runtime.hpp"

namespace penta {

bool parse_context_parallel_flags(int argc, char** argv, TrainConfig& cfg, ContextParallelFlags& cpf) {
    Flags flags("06_context_parallel",
                "Chapter 06: context parallelism — every sequence cut over --cp ranks, attention by ring or "
                "all-gather; composes with --dp (or ZeRO), --tp and --sp (playbook: Context parallelism).");
    cfg.register_flags(flags);
    cfg.register_parallel_flags(flags);
    flags.add("zero", &cpf.zero, "ZeRO over the dp x cp group (chapter 03): 1, 2 or 3; 0 plain all-reduce");
    flags.chapter("Context parallelism (chapter 06)", {"cp"});
    register_context_parallel_flags(flags, cpf);
    if (!flags.parse(argc, argv)) return false;
    cfg.validate();
    if (cpf.zero != 0) parse_zero_stage(cpf.zero);
    check_context_parallel_flags(cfg, cpf);
    return true;
}

void register_context_parallel_flags(Flags& flags, ContextParallelFlags& cpf) {
    flags.add("cp-shard", &cpf.shard, "which tokens a cp rank holds: zigzag (chunks r and 2cp-1-r of 2cp, causal work "
              "balanced) | contiguous (chunk r of cp)");
    flags.add("cp-attn", &cpf.attn, "ring (K/V passed around the ring, overlapped) | allgather (all K/V at once)");
}

void check_context_parallel_flags(const TrainConfig& cfg, const ContextParallelFlags& cpf) {
    const CpShard shard = parse_cp_shard(cpf.shard);
    parse_cp_attn(cpf.attn);
    ContextSharder((int)cfg.cp, 0, shard).check_seq(cfg.seq);  // names --seq and the rule
    CHECK(cfg.cp == 1 || cfg.attention == "flash",
          "--attention %s with --cp %ld: context parallelism's attention (ring or all-gather) computes every block with "
          "the online softmax of the flash kernel, so the naive kernel would not run: drop --attention %s",
          cfg.attention.c_str(), (long)cfg.cp, cfg.attention.c_str());
    const int64_t held = cfg.micro_batch * (cfg.seq / cfg.cp);  // tokens of a micro-batch on one cp rank
    CHECK(!cfg.sp || held % cfg.tp == 0,
          "--sp splits the --micro-batch %ld × (--seq %ld / --cp %ld) = %ld tokens a cp rank holds into --tp %ld equal "
          "blocks: the count must be divisible by --tp", (long)cfg.micro_batch, (long)cfg.seq, (long)cfg.cp, (long)held,
          (long)cfg.tp);
    CHECK(!cfg.sp || cfg.eval_every == 0 || (kEvalRows * cfg.seq) % cfg.tp == 0,
          "--sp: the evaluation runs %ld whole sequences of --seq %ld = %ld tokens on every cp rank, which --tp %ld "
          "must divide as well (or --eval-every 0)", (long)kEvalRows, (long)cfg.seq, (long)(kEvalRows * cfg.seq),
          (long)cfg.tp);
}

std::shared_ptr<ContextParallelAttention> make_context_attention(ParallelGrid& grid, CpShard shard, CpAttn attn,
                                                                 int64_t seq) {
    return std::make_shared<ContextParallelAttention>(grid.cp(), shard, attn, seq);
}

BatchPlan context_parallel_plan(const TrainConfig& cfg, ParallelGrid& grid, CpShard shard) {
    BatchPlan p = data_parallel_plan(cfg, grid.dp());  // the rows: the cp ranks of a replica read the same ones
    p.sharder = std::make_shared<ContextSharder>(grid.cp().size(), grid.cp().rank(), shard);
    p.batch_group = &grid.dp_cp();  // ...and hold different tokens of them
    return p;
}

TensorParallelOptimizer make_cp_optimizer(Model& model, ParallelGrid& grid, int64_t zero, const AdamWConfig& ac) {
    return make_tp_optimizer(model, grid, zero, ac, &grid.dp_cp(), kAxisDP | kAxisCP);
}

ContextParallelTraining::ContextParallelTraining(const TrainConfig& c, const ContextParallelFlags& f)
    : cfg(c), cpf(f), shard(parse_cp_shard(f.shard)), attn(parse_cp_attn(f.attn)) {
    CHECK(cfg.pp == 1 && cfg.ep == 1,
          "--pp %ld --ep %ld: pipeline and expert parallelism are chapters 07 and 08; this program combines --dp, "
          "--cp and --tp", (long)cfg.pp, (long)cfg.ep);
    device = resolve_device(cfg.device);
    mc = resolve_model(cfg, (int)f.zero);
    grid = std::make_unique<ParallelGrid>(make_world_comm(cfg, device),
                                          GridShape{(int)cfg.dp, 1, (int)cfg.cp, (int)cfg.tp}, &mc);
    data = make_dataset(cfg.data, (uint64_t)cfg.seed, (int32_t)mc.vocab);
    attention = make_context_attention(*grid, shard, attn, cfg.seq);

    ModelOptions mo = tensor_parallel_options(model_options(cfg), grid->tp(), cfg.sp);
    mo.attention_core = attention;  // the one piece of the model CP replaces
    if (cpf.zero > 0) mo = zero_model_options(parse_zero_stage(cpf.zero), mo);
    model = std::make_unique<Model>(mc, device, (uint64_t)cfg.seed, mo);
    seams_ = install_tensor_parallel(*model, grid->tp(), cfg.sp);
    opt_ = make_cp_optimizer(*model, *grid, cpf.zero, adamw_config(cfg));
}

ContextParallelTraining::~ContextParallelTraining() = default;

ContextParallelTraining::Measured ContextParallelTraining::measure_micro_batch() {
    const BatchPlan plan = context_parallel_plan(cfg, *grid, shard);
    std::vector<MicroBatch> mbs = make_micro_batches(*data, 0, plan, device);
    Measured m;
    attention->reset_stats();
    attention->record_next();  // layer 0's forward
    const double bytes0 = grid->cp().counters().total_bytes();
    mem_reset_peak(device);
    const int64_t ws0 = mem_stats(device).current[(int)Tag::workspace];
    MicroBatchActs acts = model->forward(mbs[0], 1e4);  // any token count: the loss is not used
    m.saved_bytes = mem_stats(device).current[(int)Tag::activations];  // nothing else is alive yet
    model->backward(acts);
    for (StepHooks* h : opt_.hooks) h->finish_gradients();
    model->zero_grads();
    m.peak_workspace = mem_stats(device).peak[(int)Tag::workspace] - ws0;
    m.cp_bytes = grid->cp().counters().total_bytes() - bytes0;
    m.cells = attention->recorded();
    m.stats = attention->stats();
    attention->reset_stats();
    mem_reset_peak(device);
    return m;
}

void ContextParallelTraining::print_header() const {
    if (world_rank() != 0) return;
    std::printf("06_context_parallel: model %s (%ld layers, hidden %ld, heads %ld, kv heads %ld, ffn %ld, vocab %ld): "
                "%s params\n",
                mc.name.c_str(), (long)mc.n_layers, (long)mc.hidden, (long)mc.n_heads, (long)mc.n_kv_heads,
                (long)mc.ffn, (long)mc.vocab, human_count((double)mc.n_params()).c_str());
    std::printf("layout %s on %d ranks; device %s; comm %s; attention %s, %s sharding: %d chunks of %ld tokens, "
                "%ld tokens of each sequence per cp rank\n",
                grid->shape().str().c_str(), grid->world().size(), device_name(device),
                comm_backend_name(grid->cp().backend()), cp_attn_name(attn), cp_shard_name(shard),
                attention->sharder().chunks(), (long)(cfg.seq / attention->sharder().chunks()),
                (long)(cfg.seq / cfg.cp));
    std::printf("batch: %ld micro-batch x %ld grad-accum x dp %ld = %ld sequences x %ld tokens; recompute %s; "
                "optimizer %s over dp x cp = %ld ranks\n",
                (long)cfg.micro_batch, (long)cfg.grad_accum, (long)cfg.dp,
                (long)(cfg.micro_batch * cfg.grad_accum * cfg.dp), (long)cfg.seq, cfg.recompute.c_str(),
                cpf.zero > 0 ? strfmt("AdamW, ZeRO-%ld", (long)cpf.zero).c_str() : "AdamW + all-reduce",
                (long)(cfg.dp * cfg.cp));
    print_task_baseline(cfg, mc);
}

namespace {
// a ring cell as "q5·k2" (▣ full block, ◪ the causal diagonal)
std::string cell_text(const ContextParallelAttention::Cell& c) {
    return strfmt("q%d·k%d%s", c.q_chunk, c.k_chunk, c.diagonal ? "◪" : "▣");
}
// s padded with spaces to `width` characters as a terminal shows them (UTF-8: count the non-continuation bytes)
std::string pad(const std::string& s, size_t width) {
    size_t shown = 0;
    for (unsigned char ch : s) shown += (ch & 0xC0) != 0x80;
    return s + std::string(shown < width ? width - shown : 0, ' ');
}
}  // namespace

void ContextParallelTraining::print_measured(const Measured& m) const {
    Comm& world = grid->world();
    const int P = (int)cfg.cp;
    // every rank's cells, step by step, encoded as numbers (chunk pairs) for the scalar gather
    const int nchunks = attention->sharder().chunks();
    const int max_cells = 4;  // at most 2 query chunks × 2 key chunks per step
    std::vector<std::vector<double>> codes;  // [step * max_cells + k] -> per world rank
    for (int s = 0; s < P; s++)
        for (int k = 0; k < max_cells; k++) {
            double code = -1;
            int seen = 0;
            for (const auto& c : m.cells)
                if (c.step == s && seen++ == k) code = (c.q_chunk * nchunks + c.k_chunk) * 2 + c.diagonal + c.src * 1e4;
            codes.push_back(world.all_gather_scalar(code));
        }
    const std::vector<double> blocks = world.all_gather_scalar((double)m.stats.blocks);
    const std::vector<double> pairs = world.all_gather_scalar((double)m.stats.pairs);
    const std::vector<double> bytes = world.all_gather_scalar(m.cp_bytes);
    const std::vector<double> exposed = world.all_gather_scalar(m.stats.exposed_s);
    const std::vector<double> hidden = world.all_gather_scalar(m.stats.hidden_fraction());
    const std::vector<double> saved = world.all_gather_scalar((double)m.saved_bytes);
    const std::vector<double> kvpeak = world.all_gather_scalar((double)m.stats.peak_kv_bytes);
    if (world_rank() != 0) return;

    const int64_t L = mc.n_layers, T = cfg.seq, B = cfg.micro_batch, hd = mc.head_dim(), nkv = mc.n_kv_heads / cfg.tp;
    std::printf("\n%s attention, layer 0 of one micro-batch: the blocks each cp rank computed %s\n"
                "(q<i>·k<j>: query chunk i against key chunk j; ▣ whole block, ◪ causal diagonal; blocks wholly in the "
                "future skipped)\n", cp_attn_name(attn),
                attn == CpAttn::ring ? "at each ring step s (it holds the K/V of cp rank r-s)" : "per source rank's K/V");
    std::printf("  %s", pad("", 17).c_str());
    for (int s = 0; s < P; s++)
        std::printf("   %s", pad(strfmt(attn == CpAttn::ring ? "step %d" : "K/V of rank %d", s), 21).c_str());
    std::printf("\n");
    for (int r = 0; r < P; r++) {
        const int wr = grid_rank(grid->shape(), GridCoords{0, 0, r, 0});  // dp 0, tp 0 of cp rank r
        std::string held;
        for (int c : attention->sharder().chunks_of(r)) held += (held.empty() ? "c" : ",c") + std::to_string(c);
        std::printf("  cp rank %d (%s)", r, pad(held, 5).c_str());
        for (int s = 0; s < P; s++) {
            std::string cell;
            for (int k = 0; k < max_cells; k++) {
                const double code = codes[s * max_cells + k][wr];
                if (code < 0) continue;
                const int64_t v = (int64_t)std::llround(code) % 10000;
                ContextParallelAttention::Cell c{s, 0, (int)(v / 2 / nchunks), (int)(v / 2 % nchunks), (v % 2) == 1};
                cell += (cell.empty() ? "" : " ") + cell_text(c);
            }
            std::printf(" | %s", pad(cell.empty() ? "(all future)" : cell, 21).c_str());
        }
        std::printf("\n");
    }

    std::printf("\nattention work per cp rank (one micro-batch, %ld layers, forward): blocks of %ld x %ld, (query, key) "
                "pairs; formula: causal chunks, future blocks skipped\n", (long)L, (long)(T / nchunks), (long)(T / nchunks));
    int64_t bmin = INT64_MAX, bmax = 0;
    for (int r = 0; r < P; r++) {
        const int wr = grid_rank(grid->shape(), GridCoords{0, 0, r, 0});
        const CausalWork w = causal_work(attention->sharder(), r, T);
        const int64_t b = (int64_t)blocks[wr] / L;
        bmin = std::min(bmin, b), bmax = std::max(bmax, b);
        std::printf("  cp rank %d: %3ld blocks per layer, %9.0f pairs  formula %3ld blocks, %9ld "
                    "pairs  %s\n", r, (long)b, pairs[wr] / L, (long)w.blocks, (long)w.pairs,
                    b == w.blocks && (int64_t)(pairs[wr] / L) == w.pairs ? "(equal)" : "(DIFFERENT)");
    }
    std::printf("  imbalance: busiest rank %ld blocks, idlest %ld (%s)\n", (long)bmax, (long)bmin,
                shard == CpShard::zigzag ? "zig-zag: every rank 2cp+1" : "contiguous: rank r has r+1");

    // bytes: M = this rank's K and V, f32
    const double M = 2.0 * B * (T / P) * nkv * hd * 4;
    const double fwd = (P - 1) * M, bwd = attn == CpAttn::ring ? (2 * P - 1) * M : 2 * (P - 1) * M;
    const double refwd = cfg.recompute == "full" ? fwd : 0;  // the block's forward reruns inside backward
    const double formula = L * (fwd + bwd + refwd);
    std::printf("\nbytes each rank sent on the cp group for one micro-batch (forward + backward, %ld layers):\n", (long)L);
    std::printf("  formula per layer: M = 2 b (s/cp) n_kv d 4 = %.0f; forward (cp-1) M, backward %s%s\n", M,
                attn == CpAttn::ring ? "(2cp-1) M (K/V again, dK/dV one hop more)" : "2 (cp-1) M (all-gather + reduce-scatter)",
                refwd > 0 ? ", + the forward again (--recompute full)" : "");
    for (int wr = 0; wr < world.size(); wr++) {
        const GridCoords c = grid_coords(grid->shape(), wr);
        std::printf("  rank %d (dp %d, cp %d, tp %d): %10.0f bytes  formula %10.0f  %s;  waited %.2f ms%s\n", wr, c.dp,
                    c.cp, c.tp, bytes[wr], formula, formula_matches(bytes[wr], formula) ? "(equal)" : "(DIFFERENT)",
                    exposed[wr] * 1e3,
                    attn == CpAttn::ring ? strfmt(", K/V transfers hidden behind attention %.0f%%", hidden[wr] * 100).c_str()
                                         : "");
    }

    // what one micro-batch's forward kept: every saved tensor is per token (flash attention keeps no s x s), so
    // the whole of it is the one-rank formula at s/cp tokens (with --tp, chapters 04/05 cut it further)
    const Recompute rc = parse_recompute(cfg.recompute);
    const int64_t at_cp = llama_activation_bytes(mc, rc, AttentionKernel::flash, B, T / P);
    const int64_t at_1 = llama_activation_bytes(mc, rc, AttentionKernel::flash, B, T);
    if (cfg.tp == 1)
        std::printf("\nactivations one micro-batch's forward kept, per rank: %.0f bytes; formula at s/cp = %ld tokens: %ld "
                    "%s; at cp 1 (s = %ld): %ld, ratio %.3f\n", saved[0], (long)(T / P), (long)at_cp,
                    saved[0] == at_cp ? "(equal)" : "(DIFFERENT)", (long)T, (long)at_1, saved[0] / at_1);
    else
        std::printf("\nactivations one micro-batch's forward kept, rank 0: %.0f bytes (one rank at cp 1 and tp 1 would "
                    "keep %ld; --tp%s cuts them as chapters 04/05 show, cp by another %ld)\n", saved[0], (long)at_1,
                    cfg.sp ? " --sp" : "", (long)P);
    std::printf("K/V buffers one attention call held at most: %s (ring: 2 blocks forward, 4 with dK/dV; allgather: all cp "
                "blocks)\n", human_bytes((int64_t)kvpeak[0]).c_str());
}

StepResult ContextParallelTraining::run() {
    Trainer trainer{*model, *opt_.optim, opt_.hooks};
    TrainLoop loop{trainer, *data, cfg, context_parallel_plan(cfg, *grid, shard), StepLogConfig{}, {}, {}};
    if (cfg.tp > 1)
        loop.full_logits = [this](const Tensor& local) { return gather_vocab_logits(grid->tp(), local, mc.vocab); };
    configure_log(loop, mc, device, grid->world().size());
    loop.world = &grid->world();
    double cp_bytes = grid->cp().counters().total_bytes();
    loop.on_step = [&](StepRecord& rec, const StepResult&) {
        const double now = grid->cp().counters().total_bytes();
        const CpAttentionStats& s = attention->stats();
        rec.extra.push_back({"cp MiB", std::round((now - cp_bytes) / (1 << 20) * 100) / 100});
        rec.extra.push_back({"exposed ms", std::round(s.exposed_s * 1e4) / 10});
        if (attn == CpAttn::ring) rec.extra.push_back({"hidden %", std::round(s.hidden_fraction() * 100)});
        cp_bytes = now;
        attention->reset_stats();
    };
    return run_training(loop);
}

}  // namespace penta
