// planner.cpp — the layout planner (planner.hpp): per-rank memory from the rank's own ParamLayout and the
// tensors model.cpp keeps, traffic per axis from formulas.hpp, step time with appendix C's overlap windows,
// and the three-step ranking.
//
// Playbook: "Finding the best training configuration"; seed 000 appendix C. Run:
//   build/bin/09_5d_plan --model llama3-8b --machine h100 --gpus 64
#include "planner.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <sstream>
#include <tuple>

#include "../02_data_parallel/data_parallel.hpp"
#include "../04_tensor_parallel/parallel_layers.hpp"
#include "../common/core.hpp"
#include "../common/model_layout.hpp"

namespace penta::plan {

// ---- machines -------------------------------------------------------------------------------------------

Machine machine_preset(const std::string& name) {
    const int64_t GB = 1000LL * 1000 * 1000;
    // H100 SXM: 80 GB HBM3, 989 TFLOP/s dense bf16; NVLink 4: 900 GB/s both ways = 450 GB/s each way;
    // one ConnectX-7 400 Gb/s NIC per GPU = 50 GB/s. H200: 141 GB HBM3e, the same compute and links.
    if (name == "h100") return {"h100", 8, 80 * GB, 989e12, 450e9, 50e9, 0.5};
    if (name == "h200") return {"h200", 8, 141 * GB, 989e12, 450e9, 50e9, 0.5};
    // this repository's CPU ranks (fp32 through OpenBLAS, shared memory between ranks): for the measured checks
    if (name == "cpu") return {"cpu", 8, 16 * GB, 50e9, 5e9, 5e9, 1.0};
    FAIL("--machine %s: unknown machine; choose one of h100, h200, cpu", name.c_str());
}
std::vector<std::string> machine_names() { return {"h100", "h200", "cpu"}; }

Precision parse_precision(const std::string& s) {
    if (s == "fp32") return Precision::fp32;
    if (s == "bf16") return Precision::bf16;
    if (s == "bf16-weights") return Precision::bf16_weights;
    FAIL("--precision %s: choose fp32 (this code's default), bf16 (the playbook's mixed precision: bf16 gradients, "
         "fp32 master weights) or bf16-weights (the trainer's --precision bf16: f32 gradients and activations)",
         s.c_str());
}
const char* precision_name(Precision p) {
    switch (p) {
        case Precision::fp32: return "fp32";
        case Precision::bf16:
            return "bf16 (the playbook's: bf16 weights, gradients, activations and messages, fp32 master and Adam; "
                   "the trainer's --precision bf16 keeps f32 gradients: --precision bf16-weights)";
        case Precision::bf16_weights: return "bf16-weights (the trainer's --precision bf16: bf16 weights, f32 gradients "
                                             "and activations, fp32 master and Adam)";
    }
    return "?";
}

std::string Layout::str() const {
    std::string s = strfmt("dp %d tp %d pp %d cp %d", grid.dp, grid.tp, grid.pp, grid.cp);
    if (grid.ep > 1) s += strfmt(" ep %d", grid.ep);
    s += zero ? strfmt(" ZeRO-%d", zero) : std::string(" ZeRO-0");
    if (sp) s += " sp";
    s += strfmt(" rc=%s mbs %lld ga %lld", recompute_name(recompute), (long long)micro_batch, (long long)grad_accum);
    if (grid.pp > 1) s += std::string(" ") + pipe_schedule_name(schedule) + (chunks > 1 ? strfmt(" v%d", chunks) : "");
    for (size_t i = 0; i < layers.size(); i++) s += strfmt("%s%lld", i ? "," : " layers ", (long long)layers[i]);
    return s;
}

// ---- the pipeline plan (cached: enumeration asks for the same (kind, p, m, v) many times) ------------------

namespace {

const PipelinePlan& plan_of(const Layout& L) {
    static std::map<std::tuple<int, int, int64_t, int>, PipelinePlan> cache;
    const auto key = std::make_tuple((int)L.schedule, L.grid.pp, L.grad_accum, L.chunks);
    auto it = cache.find(key);
    if (it == cache.end())
        it = cache.emplace(key, make_pipeline_plan(L.schedule, L.grid.pp, (int)L.grad_accum, L.chunks)).first;
    return it->second;
}

PipelineSlice slice_of(const Job& job, const Layout& L, int stage) {
    if (L.grid.pp == 1) return {};
    const PipelinePlan& P = plan_of(L);
    return stage_slice(P, split_layers(job.model.n_layers, P.virtual_stages, L.layers), stage);
}

// A MoE model's layers as our layout builds a dense one, then each MoE layer's MLP replaced: the router (E, h)
// on every rank, the shared experts' 3 h (n_s f_e) / tp, this rank's E / ep experts of 3 h f_e / tp each.
struct Slice {
    int64_t numel = 0;
    std::vector<int64_t> units;          // dense units (ZeRO cuts each over the dp × cp group)
    int64_t expert_numel = 0;            // experts (cut over edp = dp · cp / ep)
    int64_t embedding = 0, vocab_rows = 0;
    struct Chunk {
        LayerRange layers;
        bool embedding = false, head = false;  // it starts with the embedding / ends in the head
        int64_t moe_layers = 0;
    };
    std::vector<Chunk> chunks;
};

Slice model_slice(const Job& job, const Layout& L, const GridCoords& c) {
    const LlamaConfig& cfg = job.model;
    LlamaConfig dense = cfg;
    dense.moe = MoeConfig{};
    LayoutOptions o;
    o.tp = L.grid.tp, o.tp_rank = c.tp, o.sequence_parallel = L.sp, o.slice = slice_of(job, L, c.pp);
    o.sharding = &megatron_sharding();  // the shards the programs hold (chapter 04's parallel layers)
    const ParamLayout pl = ParamLayout::build(dense, o);
    Slice s;
    for (const ParamUnit& u : pl.units) s.units.push_back(u.numel);
    s.numel = pl.numel;
    s.embedding = pl.units.front().numel;
    s.vocab_rows = pl.vocab_rows;
    for (int k = 0; k < pl.slice.chunks(); k++) {
        const LayerRange r = pl.slice.chunk(k);
        // (a tied table's replica on the last stage runs no embedding)
        s.chunks.push_back({r, pl.slice.has_embedding && k == pl.slice.embedding_chunk(),
                            pl.slice.has_head && k == pl.slice.head_chunk(cfg.n_layers)});
        for (int64_t l = r.begin; l < r.end; l++) {
            if (!cfg.moe.moe_layer(l)) continue;
            s.chunks.back().moe_layers++;
            const MoeConfig& m = cfg.moe;
            const int64_t h = cfg.hidden, t = L.grid.tp;
            const int64_t mlp = 3 * h * cfg.ffn / t, router = m.experts * h, shared = 3 * h * m.shared_experts * m.expert_ffn / t;
            const int64_t experts = m.experts / L.grid.ep * 3 * h * m.expert_ffn / t;
            s.units[pl.layer_unit(l)] += router + shared - mlp;
            s.expert_numel += experts;
            s.numel += router + shared - mlp + experts;
        }
    }
    return s;
}

// Tag::activations one micro-batch's forward keeps on this stage (model.cpp's LayerActs / HeadActs, local
// shapes): see the file comment of formulas.hpp's llama_layer_activation_bytes for the list.
struct ActBytes {
    int64_t total = 0;               // one micro-batch through every chunk of the stage
    std::vector<int64_t> per_chunk;  // what each chunk's F keeps until its backward
    std::vector<int64_t> left_by_b;  // what each chunk's B adds until its W, when a schedule defers W
};
ActBytes micro_batch_activations(const Job& job, const Layout& L, const Slice& s) {
    const LlamaConfig& c = job.model;
    const int64_t t = L.grid.tp, eb = job.elem_bytes();
    const int64_t B = L.micro_batch, Tl = job.seq / L.grid.cp;
    const int64_t Nt = B * Tl, Nr = L.sp ? Nt / t : Nt;  // tokens here; rows of the residual stream (SP: 1/t)
    const int64_t h = c.hidden, hd = c.head_dim(), nh = c.n_heads / t, nkv = c.n_kv_heads / t;
    const bool probs = job.kernel == AttentionKernel::naive && L.grid.cp == 1;  // the (B, nh, T, T) probabilities
    // what a layer keeps without recomputation: model.cpp's LayerActs (formulas.hpp: llama_layer_activation_bytes)
    auto whole = [&](bool moe) -> int64_t {
        // gate / up / act: f wide (dense), or each token's k expert copies and the shared experts (MoE)
        const int64_t k = c.moe.top_k, f = moe ? (k + c.moe.shared_experts) * c.moe.expert_ffn / t : c.ffn / t;
        // a MoE layer also keeps (moe_layer.cpp) the router's scores (N, E) and its k weights and choices per token,
        // each choice's row in the send buffer, the k copies' rows on their way in to the experts and back out
        // (uniform routing: as many arrive at this rank as leave it)
        const int64_t router = moe ? eb * Nt * (c.moe.experts + k) + 4 * Nt * k * 2 + 2 * eb * Nt * k * h : 0;
        return eb * (2 * Nr * h + 2 * Nt * h + Nt * (2 * nh * hd + 2 * nkv * hd + 3 * f)) + 4 * (2 * Nr + Nt * nh) +
               (probs ? eb * B * nh * Tl * Tl : 0) + router;
    };
    auto layer = [&](bool moe) -> int64_t {
        if (L.recompute == Recompute::full) return eb * Nr * h;  // the block input only
        const int64_t bytes = whole(moe);
        return L.recompute == Recompute::none || L.recompute == Recompute::offload ? bytes
                                                                                   : bytes - (probs ? eb * B * nh * Tl * Tl : 0);
    };
    ActBytes a;
    for (const Slice::Chunk& k : s.chunks) {
        int64_t bytes = 0, left = 0;
        const int64_t n = k.layers.end - k.layers.begin;
        for (int64_t l = k.layers.begin; l < k.layers.end; l++) {
            const bool moe = c.moe.moe_layer(l);
            bytes += layer(moe);
            // B with W deferred (model.cpp's block_backward_input, Tag::activations until W): the gradients of
            // q, k, v, gate and up take the place of the tensors they are the gradients of, which B frees with
            // the attention's log-sum-exp and probabilities; it adds d xn2 and d xn1 (R rows: the norms' weight
            // gradients read them) and the attention's output gradient (N rows, gathered under SP: o_proj's W
            // reads it). Full recomputation first reruns the block into tensors held just as long: the whole
            // layer but the input it kept.
            left += eb * (2 * Nr + Nt) * h - 4 * Nt * nh -
                    (probs && L.recompute != Recompute::selective ? eb * B * nh * Tl * Tl : 0);
            if (L.recompute == Recompute::full) left += whole(moe) - eb * Nr * h;
        }
        // and each layer's MLP output gradient (N rows: down_proj's W reads it), but the top layer's in a chunk
        // without the head (the received gradient itself, a message buffer); the embedding's W reads the lowest
        // layer's input gradient (N rows); the head's B leaves d xn (R rows)
        left += eb * Nt * h * (n - 1 + (k.head ? 1 : 0) + (k.embedding ? 1 : 0)) + (k.head ? eb * Nr * h : 0);
        // the head keeps x, rstd, xn and d logits; a chunk without it hands its output (Nr, h) on, and the
        // executor lets go of it once it is sent: not held between F and B
        if (k.head) bytes += eb * (Nr * h + Nt * h + Nt * s.vocab_rows) + 4 * Nr;
        a.per_chunk.push_back(bytes);
        a.left_by_b.push_back(left);
        a.total += bytes;
    }
    return a;
}

int in_flight(const Layout& L, int stage) {
    const int p = L.grid.pp, m = (int)L.grad_accum;
    if (p == 1) return 1;
    switch (L.schedule) {
        case PipeScheduleKind::afab: return pipeline_in_flight_afab(m);
        case PipeScheduleKind::one_f_one_b: return pipeline_in_flight_1f1b(p, stage, m);
        case PipeScheduleKind::interleaved: return pipeline_in_flight_interleaved(p, stage, m, L.chunks);
        case PipeScheduleKind::zb1: return pipeline_in_flight_zb1(p, m);
        case PipeScheduleKind::dualpipe: return pipeline_in_flight_dualpipe(p);
    }
    return 1;
}

// The most Tag::activations the stage holds between two ops of its list (what the executor records after each):
// the list walked, each F adding what its chunk keeps, a B whose W comes later (ZB-H1, DualPipe) adding what it
// leaves for that W, the W or the fused BW giving all of it back. Without pp: one micro-batch at a time (its
// output, the head's input, is part of the head's acts). Inside an op more is alive for a moment — the output
// on its way to the next stage, B's gradients before it frees the forward's tensors —: the allocator's peak.
int64_t peak_activations(const Layout& L, int stage, const ActBytes& a) {
    if (L.grid.pp == 1) return a.total;
    const PipelinePlan& P = plan_of(L);
    int64_t held = 0, peak = 0;
    for (const PipeOp& op : P.ops[stage]) {
        if (op.kind == PipeOpKind::F) held += a.per_chunk[op.chunk];
        if (op.kind == PipeOpKind::B) held += a.left_by_b[op.chunk];
        if (op.kind == PipeOpKind::BW) held -= a.per_chunk[op.chunk];
        if (op.kind == PipeOpKind::W) held -= a.per_chunk[op.chunk] + a.left_by_b[op.chunk];
        peak = std::max(peak, held);
    }
    return peak;
}

// pp sends of this stage in one step: one activation per F that is not the model's last virtual stage, one
// gradient per B (or BW) that is not its first
int64_t pipeline_sends(const Layout& L, int stage) {
    if (L.grid.pp == 1) return 0;
    const PipelinePlan& P = plan_of(L);
    int64_t n = 0;
    for (const PipeOp& op : P.ops[stage]) {
        const int v = P.virtual_stage(stage, op.chunk, op.mb);
        if (op.kind == PipeOpKind::F && v < P.virtual_stages - 1) n++;
        if ((op.kind == PipeOpKind::B || op.kind == PipeOpKind::BW) && v > 0) n++;
    }
    return n;
}

// What this stage's micro-batches run in a step, summed over its F ops (each backward retraces its forward): the
// layers, MoE layers, embeddings and heads of the chunk each F runs. A micro-batch visits every chunk of an
// interleaved stage, and one of DualPipe's two (its direction's); without pp, m visits of the whole model.
struct Visits {
    int64_t layers = 0, moe_layers = 0, embeddings = 0, heads = 0;
};
Visits chunk_visits(const Layout& L, int stage, const Slice& s) {
    Visits v;
    auto visit = [&](const Slice::Chunk& k, int64_t times) {
        v.layers += times * (k.layers.end - k.layers.begin), v.moe_layers += times * k.moe_layers;
        v.embeddings += times * k.embedding, v.heads += times * k.head;
    };
    if (L.grid.pp == 1) {
        visit(s.chunks.at(0), L.grad_accum);
        return v;
    }
    for (const PipeOp& op : plan_of(L).ops[stage])
        if (op.kind == PipeOpKind::F) visit(s.chunks.at(op.chunk), 1);
    return v;
}

bool spans_nodes(int group, int stride, int gpus_per_node) { return group > 1 && group * stride > gpus_per_node; }

}  // namespace

// ---- legality -------------------------------------------------------------------------------------------

void check_layout(const Job& job, const Machine& m, const Layout& L, int world, bool allow_cross_node_tp) {
    const GridShape& g = L.grid;
    validate_grid(g, world, &job.model);
    CHECK(allow_cross_node_tp || g.tp <= m.gpus_per_node,
          "--tp %d > --gpus-per-node %d: tensor parallelism talks in every layer, so it stays inside a node (NVLink); "
          "pass --allow-cross-node-tp to consider it anyway", g.tp, m.gpus_per_node);
    CHECK(!L.sp || g.tp > 1, "--sp needs --tp > 1: sequence parallelism splits the tp group's norm regions");
    CHECK(L.zero >= 0 && L.zero <= 3, "--zero %d: the ZeRO stage is 0, 1, 2 or 3", L.zero);
    CHECK(!(L.zero == 3 && g.pp > 1), "--zero 3 with --pp %d: ZeRO-3 would gather every stage's weights again for each "
          "of the m micro-batches; chapter 07 composes pipeline parallelism with ZeRO-1/2 only", g.pp);
    CHECK(g.cp == 1 || job.seq % (2 * g.cp) == 0, "--cp %d: --seq %lld must split into 2·cp = %d zig-zag chunks",
          g.cp, (long long)job.seq, 2 * g.cp);
    CHECK(!L.sp || (L.micro_batch * job.seq / g.cp) % g.tp == 0,
          "--sp: the %lld tokens of a micro-batch on a rank must split over --tp %d",
          (long long)(L.micro_batch * job.seq / g.cp), g.tp);
    CHECK(L.micro_batch >= 1 && L.grad_accum >= 1, "--micro-batch %lld --grad-accum %lld: both must be >= 1",
          (long long)L.micro_batch, (long long)L.grad_accum);
    CHECK(g.pp <= job.model.n_layers, "--pp %d > the model's %lld layers", g.pp, (long long)job.model.n_layers);
    CHECK(g.ep == 1 || job.model.moe.enabled(), "--ep %d: expert parallelism needs a mixture-of-experts model", g.ep);
    CHECK(g.ep == 1 || job.model.moe.experts % g.ep == 0, "--ep %d must divide the %lld experts", g.ep,
          (long long)job.model.moe.experts);
    if (g.pp > 1) {  // the schedule's rules and the layer split first: they bound what plan_of then builds
        check_pipeline_shape(L.schedule, g.pp, L.chunks);
        split_layers(job.model.n_layers, (int64_t)g.pp * L.chunks, L.layers);
        plan_of(L);
    }
}

// ---- one rank -------------------------------------------------------------------------------------------

RankPrediction predict_rank(const Job& job, const Machine& m, const Layout& L, int rank) {
    const GridShape& g = L.grid;
    const LlamaConfig& c = job.model;
    RankPrediction r;
    r.coords = grid_coords(g, rank);
    r.node = rank / m.gpus_per_node;
    const Slice s = model_slice(job, L, r.coords);
    // ZeRO cuts each unit over the data group: dp × cp for dense units (their gradients are summed over both),
    // edp = dp · cp / ep for experts; this rank's place in it
    const int K = g.dp * g.cp, d = r.coords.cp + g.cp * r.coords.dp, Ke = K / g.ep, de = d / g.ep;
    // EXERCISE 09.2 begin: this rank's model-state bytes for the layout: its slice's numel, its ZeRO shard (dense units over dp × cp, experts over edp), params + grads + master + optimizer
    r.numel = s.numel;
    r.shard = zero_shard_numel(s.units, K, d) + (s.expert_numel / Ke + (de < s.expert_numel % Ke ? 1 : 0));
    r.state = zero_model_state_bytes(L.zero, s.numel, r.shard, job.param_bytes(), job.grad_bytes(), job.master_bytes());
    // EXERCISE 09.2 end

    const ActBytes a = micro_batch_activations(job, L, s);
    r.in_flight = in_flight(L, r.coords.pp);
    r.activations = peak_activations(L, r.coords.pp, a);

    // traffic per step
    const int64_t eb = job.elem_bytes(), mb = L.grad_accum, Tl = job.seq / g.cp, h = c.hidden;
    const int64_t Nt = L.micro_batch * Tl, Nr = L.sp ? Nt / g.tp : Nt;
    r.tp_layer_bytes = (int64_t)std::llround(tp_layer_comm_elements(g.tp, Tl, L.micro_batch, h) * (double)eb);
    const Visits v = chunk_visits(L, r.coords.pp, s);
    if (g.tp > 1) {
        // per layer a micro-batch runs: its four boundaries (again in forward when full recomputation reruns the
        // block: half of them), and under SP the norms' weight gradients, summed over tp where backward computes
        // them; per embedding: the vocab-parallel embedding's output all-reduce (SP: reduce-scatter + the
        // backward's all-gather); per head: lm_head's input gradient and the vocab-parallel cross-entropy's three
        // f32 statistics per token (max, sum of exponentials, target logit), and SP's final norm
        const double ar = 2.0 * (g.tp - 1) / g.tp;  // a ring all-reduce's bytes per byte of buffer
        const double rerun = L.recompute == Recompute::full ? 1.5 : 1.0;
        r.bytes.tp = (double)v.layers * (double)r.tp_layer_bytes * rerun + (double)v.embeddings * ar * (double)(Nt * h * eb) +
                     (double)v.heads * (ar * (double)(Nt * h * eb) + ar * (double)(3 * Nt * 4));
        if (L.sp) r.bytes.tp += ar * (double)((2 * v.layers + v.heads) * h * eb);
    }
    // the gradients' reductions: dense units over dp × cp (K ranks), experts over edp (Ke)
    const int64_t gb = job.grad_bytes(), wb = job.param_bytes(), dense = s.numel - s.expert_numel;
    auto reduce = [&](int64_t psi, int64_t embedding, bool tied, int n) -> double {
        if (n == 1 || psi == 0) return 0.0;
        if (L.zero == 0) return dp_bytes_per_step_formula(n, (double)(psi * gb));
        // the all-gathers carry the weights, the reduce-scatters the gradients (f32 beside bf16 weights)
        return zero_step_bytes(L.zero, psi, embedding, tied, mb, n, wb, gb);
    };
    r.bytes.dp = reduce(dense, s.embedding, c.tied_embeddings, K) + reduce(s.expert_numel, 0, true, Ke);
    r.bytes.pp = pipeline_stage_bytes(pipeline_sends(L, r.coords.pp), Nr, h, eb);
    // the tensors two stages hold have their gradients summed over the pair once per step
    // (07_pipeline_parallel/tools/pipeline_replicas.hpp), an all-reduce of two over what this rank's optimizer holds: DualPipe's every tensor (stage s and p-1-s hold
    // the same layers), else a tied table, held by the first stage and (as a replica) by the last
    const int p = g.pp, st = r.coords.pp;
    if (p > 1 && L.schedule == PipeScheduleKind::dualpipe) {
        r.bytes.pp += (double)((L.zero == 0 ? s.numel : r.shard) * job.grad_bytes());
    } else if (p > 1 && c.tied_embeddings && (st == 0 || st == p - 1) && st != p - 1 - st) {
        const int64_t E = s.embedding;
        const int64_t held = L.zero == 0 ? E : E / K + (d < E % K ? 1 : 0);
        r.bytes.pp += (double)(held * job.grad_bytes());
    }
    const int64_t passes = L.recompute == Recompute::full ? 2 : 1;  // full recomputation reruns the ring forward
    r.bytes.cp = (double)v.layers *
                 (cp_ring_layer_bytes(g.cp, L.micro_batch, job.seq, c.n_kv_heads / g.tp, c.head_dim(), eb) +
                  (passes - 1) * (double)(g.cp - 1) * 2.0 * (double)(L.micro_batch * Tl * c.n_kv_heads / g.tp * c.head_dim() * eb));
    if (g.ep > 1 && v.moe_layers > 0) {
        // uniform routing: each of the Nr·k copies goes to any of the ep ranks alike; ep_layer_all_to_all_bytes's
        // terms: the counts (El int32 to each other rank), the rows out and back in forward, again in backward
        const int64_t El = c.moe.experts / g.ep, copies = Nr * c.moe.top_k;
        std::vector<std::vector<int64_t>> S(g.ep, std::vector<int64_t>(g.ep, copies / g.ep));
        r.bytes.ep = (double)v.moe_layers * (ep_layer_all_to_all_bytes(S, 0, h, El, false, eb) +
                                                     ep_layer_all_to_all_bytes(S, 0, h, El, true, eb) -
                                                     (double)(g.ep - 1) * (double)El * 4);
    }
    return r;
}

RankPrediction predict_worst_rank(const Job& job, const Machine& m, const Layout& L) {
    RankPrediction worst;
    bool first = true;
    for (int stage = 0; stage < L.grid.pp; stage++) {
        GridCoords c;
        c.pp = stage;
        RankPrediction r = predict_rank(job, m, L, grid_rank(L.grid, c));
        if (first || r.total() > worst.total()) worst = r;
        first = false;
    }
    return worst;
}

// ---- time -----------------------------------------------------------------------------------------------

StepTime predict_time(const Job& job, const Machine& m, const Layout& L, const RankPrediction& w) {
    const GridShape& g = L.grid;
    const LlamaConfig& c = job.model;
    const int world = g.ranks();
    StepTime t;
    // FLOPs of the step over the whole job: 6 N per token for the matmuls (2 forward, 4 backward) plus causal
    // attention's 6 · s · nh · hd per token and layer (QK^T and PV, half of them masked), and what recomputation
    // runs again: full the whole forward (2 N + 2 s nh hd L), selective the attention's forward
    const double tokens = (double)(g.dp * L.micro_batch * L.grad_accum * job.seq);
    const double N = (double)c.n_active_params(), attn = (double)(job.seq * c.n_heads * c.head_dim() * c.n_layers);
    double per_token = 6 * N + 6 * attn;
    if (L.recompute == Recompute::full) per_token += 2 * N + 2 * attn;
    if (L.recompute == Recompute::selective) per_token += 2 * attn;
    const double rate = m.peak_flops * m.efficiency;
    t.compute = per_token * tokens / world / rate;
    const double p = g.pp, mm = (double)L.grad_accum;
    if (g.pp > 1) {
        switch (L.schedule) {
            case PipeScheduleKind::interleaved: t.bubble = t.compute * pipeline_bubble_interleaved(g.pp, (int)mm, L.chunks); break;
            case PipeScheduleKind::zb1: t.bubble = t.compute * pipeline_bubble_zb1(g.pp, (int)mm, 1, 1, 1); break;
            case PipeScheduleKind::dualpipe: t.bubble = t.compute * pipeline_bubble_dualpipe_bound(g.pp, (int)mm, 1, 2, 1); break;
            default: t.bubble = t.compute * (p - 1) / mm;
        }
    }
    // each axis's link: NVLink while its group stays in a node (ranks: tp fastest, then cp, dp, pp; ep inside dp × cp)
    const int n = m.gpus_per_node;
    auto bw = [&](bool across) { return across ? m.inter_bw : m.intra_bw; };
    t.comm.tp = w.bytes.tp / bw(spans_nodes(g.tp, 1, n));
    t.comm.cp = w.bytes.cp / bw(spans_nodes(g.cp, g.tp, n));
    t.comm.dp = w.bytes.dp / bw(spans_nodes(g.dp * g.cp, g.tp, n));
    t.comm.ep = w.bytes.ep / bw(spans_nodes(g.ep, g.tp, n));
    t.comm.pp = w.bytes.pp / bw(g.pp > 1 && g.tp * g.cp * g.dp * 2 > n);
    // the compute each axis's traffic can hide behind (appendix C):
    //   dp     the backward of the last micro-batch (no_sync reduces once); ZeRO-1 also the next forward (its
    //          all-gather); ZeRO-2 every micro-batch's backward (one reduce-scatter each); ZeRO-3 all of the
    //          compute (each block's gather prefetched behind the previous block)
    //   pp     the stage's compute (each send travels while the next micro-batch computes)
    //   cp     the attention (each K/V hop travels behind the block already here)
    //   tp, ep nothing: the all-reduce / all-to-all sits between the matmuls that produce and consume it
    const double per_mb = t.compute / mm, fwd = per_mb / 3, bwd = per_mb * 2 / 3;
    double dp_window = bwd;
    if (L.zero == 1) dp_window = bwd + fwd;
    if (L.zero == 2) dp_window = mm * bwd + fwd;
    if (L.zero == 3) dp_window = t.compute;
    const double attn_share = 6 * attn / per_token;
    const struct { double AxisBytes::*axis; double window; } axes[] = {
        {&AxisBytes::dp, dp_window}, {&AxisBytes::pp, t.compute}, {&AxisBytes::cp, t.compute * attn_share},
        {&AxisBytes::tp, 0.0}, {&AxisBytes::ep, 0.0}};
    for (const auto& a : axes) {
        const double tc = t.comm.*a.axis;
        t.exposed.*a.axis = std::max(0.0, tc - a.window);
        t.ratio.*a.axis = a.window > 0 ? tc / a.window : (tc > 0 ? INFINITY : 0.0);
    }
    // appendix C's TP ratio, (t-1)/(2h) · peak / bw, reported beside (the overlap a TP that overlaps would need)
    t.ratio.tp = g.tp > 1 ? (g.tp - 1) / (2.0 * c.hidden) * rate / bw(spans_nodes(g.tp, 1, n)) : 0.0;
    t.step = t.compute + t.bubble + t.exposed.total();
    t.tokens_per_s = tokens / t.step;
    t.mfu = 6 * N * tokens / (t.step * world * m.peak_flops);
    return t;
}

Candidate evaluate(const Job& job, const Machine& m, const Layout& L, int world) {
    Candidate c;
    c.layout = L;
    c.worst = predict_worst_rank(job, m, L);
    c.time = predict_time(job, m, L, c.worst);
    c.fits = c.worst.total() <= m.gpu_memory;
    c.reaches_batch = L.grid.dp * L.micro_batch * L.grad_accum == job.global_batch;
    if (!c.reaches_batch)
        c.notes.push_back(strfmt("dp %d × mbs %lld × ga %lld = %lld sequences, not the global batch %lld", L.grid.dp,
                                 (long long)L.micro_batch, (long long)L.grad_accum,
                                 (long long)(L.grid.dp * L.micro_batch * L.grad_accum), (long long)job.global_batch));
    return c;
}

// ---- enumerate and rank ---------------------------------------------------------------------------------

namespace {
std::vector<int> divisors(int n) {
    std::vector<int> d;
    for (int i = 1; i <= n; i++)
        if (n % i == 0) d.push_back(i);
    return d;
}
int moving_parts(const Layout& L) { return L.grid.cp * L.grid.pp * L.chunks * L.grid.ep * L.grid.tp; }
bool better(const Candidate& a, const Candidate& b) {
    if (a.fits != b.fits) return a.fits;                          // step 1: fit memory
    if (a.reaches_batch != b.reaches_batch) return a.reaches_batch;  // step 2: reach the global batch
    if (!a.fits) return a.worst.total() < b.worst.total();        // neither fits: the closest first
    // step 3: throughput, in steps of 0.5% (closer than that is within the model's noise), then the simpler
    // layout (fewer axes that cut the sequence or the depth), then the one with more memory to spare
    const long qa = std::lround(std::log(a.time.tokens_per_s) / std::log(1.005));
    const long qb = std::lround(std::log(b.time.tokens_per_s) / std::log(1.005));
    if (qa != qb) return qa > qb;
    if (moving_parts(a.layout) != moving_parts(b.layout)) return moving_parts(a.layout) < moving_parts(b.layout);
    return a.worst.total() < b.worst.total();
}
}  // namespace

std::vector<Candidate> enumerate_and_rank(const Job& job, const Machine& m, int world, const SearchSpace& space) {
    CHECK(job.global_batch >= 1, "--global-batch %lld: the target batch must be >= 1 sequence", (long long)job.global_batch);
    std::vector<Candidate> out;
    const bool moe = job.model.moe.enabled();
    for (int tp : divisors(world))
        for (int pp : divisors(world / tp))
            for (int cp : divisors(world / tp / pp)) {
                if (cp > space.max_cp || (cp > 1 && job.seq < space.cp_min_seq)) continue;
                const int dp = world / tp / pp / cp;
                for (int ep : moe ? divisors(dp * cp) : std::vector<int>{1})
                    for (int64_t mbs : space.micro_batch) {
                        if (job.global_batch % (dp * mbs) != 0) continue;  // step 2 in the enumeration
                        const int64_t ga = job.global_batch / (dp * mbs);
                        std::vector<std::pair<PipeScheduleKind, int>> schedules = {{PipeScheduleKind::one_f_one_b, 1}};
                        if (pp > 1) schedules.push_back({PipeScheduleKind::interleaved, 2});
                        for (auto [kind, v] : schedules)
                            for (int zero : space.zero)
                                for (Recompute rc : space.recompute) {
                                    Layout L;
                                    L.grid = GridShape{dp, pp, cp, tp, ep};
                                    L.zero = zero, L.sp = tp > 1, L.recompute = rc;
                                    L.schedule = kind, L.chunks = v, L.micro_batch = mbs, L.grad_accum = ga;
                                    try {
                                        check_layout(job, m, L, world, space.allow_cross_node_tp);
                                    } catch (const Error&) {
                                        continue;  // illegal: not a candidate
                                    }
                                    out.push_back(evaluate(job, m, L, world));
                                }
                    }
            }
    std::stable_sort(out.begin(), out.end(), better);
    return out;
}

namespace {
std::string gib(int64_t b) { return strfmt("%.1f GiB", (double)b / (1 << 30)); }
std::string worst_axis(const StepTime& t) {
    const struct { const char* name; double v; } a[] = {
        {"dp", t.exposed.dp}, {"tp", t.exposed.tp}, {"pp", t.exposed.pp}, {"cp", t.exposed.cp}, {"ep", t.exposed.ep}};
    const auto* w = std::max_element(std::begin(a), std::end(a), [](auto& x, auto& y) { return x.v < y.v; });
    return w->v > 0 ? strfmt("%s %.0f ms", w->name, w->v * 1e3) : "none";
}
}  // namespace

std::string explain_choice(const std::vector<Candidate>& ranked, const Machine& m) {
    if (ranked.empty()) return "no legal layout: every combination of degrees broke a rule (see check_layout)\n";
    size_t fit = 0, both = 0;
    for (const Candidate& c : ranked) {
        fit += c.fits;
        both += c.fits && c.reaches_batch;
    }
    const Candidate& top = ranked.front();
    std::ostringstream o;
    o << "step 1, fit memory: " << fit << " of " << ranked.size() << " legal layouts fit in " << gib(m.gpu_memory)
      << " per GPU\n";
    o << "step 2, reach the global batch: " << both << " of them give exactly the target batch\n";
    if (!top.fits) {
        o << "nothing fits: the closest needs " << gib(top.worst.total()) << " (" << top.layout.str()
          << "); add GPUs, recompute, or shard more (ZeRO-3, tp, pp)\n";
        return o.str();
    }
    o << "step 3, maximise throughput: " << top.layout.str() << " — " << strfmt("%.0f", top.time.tokens_per_s)
      << " tokens/s, MFU " << strfmt("%.0f%%", top.time.mfu * 100) << ", " << gib(top.worst.total())
      << " on its fullest GPU; exposed communication: " << worst_axis(top.time)
      << strfmt(", bubble %.0f ms of a %.0f ms step\n", top.time.bubble * 1e3, top.time.step * 1e3);
    // the best layout that differs in each respect, and what it lacks
    auto first_where = [&](auto pred) -> const Candidate* {
        for (size_t i = 1; i < ranked.size(); i++)
            if (ranked[i].fits && ranked[i].reaches_batch && pred(ranked[i])) return &ranked[i];
        return nullptr;
    };
    const Layout& T = top.layout;
    const struct { const char* what; std::function<bool(const Candidate&)> differs; } alts[] = {
        {"another tp", [&](const Candidate& c) { return c.layout.grid.tp != T.grid.tp; }},
        {"another pp", [&](const Candidate& c) { return c.layout.grid.pp != T.grid.pp; }},
        {"another ZeRO stage", [&](const Candidate& c) { return c.layout.zero != T.zero; }},
        {"another recompute mode", [&](const Candidate& c) { return c.layout.recompute != T.recompute; }},
        {"another cp", [&](const Candidate& c) { return c.layout.grid.cp != T.grid.cp; }},
    };
    for (const auto& a : alts) {
        const Candidate* c = first_where(a.differs);
        if (!c) continue;
        const double slower = top.time.tokens_per_s / c->time.tokens_per_s;
        std::string why;
        if (c->time.bubble > top.time.bubble * 1.01 + 1e-9) why += strfmt(" bubble %.0f ms;", c->time.bubble * 1e3);
        if (c->time.exposed.total() > top.time.exposed.total() * 1.01 + 1e-9)
            why += strfmt(" exposed comm %.0f ms (%s);", c->time.exposed.total() * 1e3, worst_axis(c->time).c_str());
        if (c->time.compute > top.time.compute * 1.01) why += strfmt(" compute %.0f ms (recomputation);", c->time.compute * 1e3);
        if (why.empty()) why = " about the same;";
        why.pop_back();
        o << "  best with " << a.what << ": " << c->layout.str() << strfmt(" — %.2fx slower:", slower) << why << "\n";
    }
    return o.str();
}

std::string format_table(const std::vector<Candidate>& ranked, size_t n) {
    std::ostringstream o;
    size_t w = 6;  // the layout column as wide as its longest entry (an interleaved or ZB-H1 layout is long)
    for (size_t i = 0; i < ranked.size() && i < n; i++) w = std::max(w, ranked[i].layout.str().size());
    o << strfmt("%-4s %-*s %9s %9s %9s %9s %8s %7s %7s %5s\n", "#", (int)w, "layout", "params", "grads", "optim", "acts",
                "total", "step s", "tok/s/G", "MFU");
    for (size_t i = 0; i < ranked.size() && i < n; i++) {
        const Candidate& c = ranked[i];
        const ModelStateBytes& s = c.worst.state;
        auto g = [](int64_t b) { return strfmt("%.2fG", (double)b / (1 << 30)); };
        o << strfmt("%-4zu %-*s %9s %9s %9s %9s %8s %7.2f %7.0f %4.0f%%%s\n", i + 1, (int)w, c.layout.str().c_str(),
                    g(s.params).c_str(), g(s.grads).c_str(), g(s.master + s.optim).c_str(), g(c.worst.activations).c_str(),
                    g(c.worst.total()).c_str(), c.time.step, c.time.tokens_per_s / c.layout.grid.ranks(),
                    c.time.mfu * 100, c.fits ? "" : "  (does not fit)");
    }
    o << "columns: params, grads, optim (fp32 master + Adam moments), acts (activations at the peak), total: GiB on the\n"
         "fullest rank (G = 2^30 bytes); step s: predicted seconds per optimizer step; tok/s/G: tokens per second per\n"
         "GPU; MFU: model FLOPs over the peak. Every figure is the planner's prediction (PLANNER.md), not a measurement.\n";
    return o.str();
}

}  // namespace penta::plan
