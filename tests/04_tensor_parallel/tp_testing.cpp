// tp_testing.cpp — the helpers of tp_testing.hpp that chapter 04's and 05's tests share
// (tests/04_tensor_parallel/test_tp.cpp, tests/05_sequence_parallel/test_sp.cpp): the model and data of the
// runs, run_layout (which trains with the programs' own optimizer setup, make_tp_optimizer of tp_optimizer.hpp),
// the check of a run against one rank, and the checks of each sharded piece against the unsharded computation,
// with f/g or SP's boundary (SP's pieces come in as SpParts: tests/05_sequence_parallel/sp_testing.hpp).
// Playbook: "Tensor parallelism", "Sequence parallelism". Run the tests that use them: `make test CH=04`,
// `make test CH=05`.
#include "tp_testing.hpp"

#include <algorithm>
#include <cmath>

#include "../../02_data_parallel/data_parallel.hpp"
#include "../../03_zero/zero.hpp"
#include "../../04_tensor_parallel/tp_optimizer.hpp"
#include "../../04_tensor_parallel/vocab_parallel.hpp"
#include "../../common/formulas.hpp"
#include "../../common/grid.hpp"

using namespace penta;
using namespace penta::testing;

namespace penta::tp_testing {

namespace {
// The boundary the model calls, counting by op the collectives its four calls at the tp region's edges make;
// the norms' gradient sums (sum_token_split_grad, SP) are no edge of the region and go through uncounted
class RegionOps : public TensorParallelBoundary {
   public:
    RegionOps(TensorParallelBoundary& b, Comm& tp) : b_(b), tp_(tp) {}
    Tensor enter_forward(const Tensor& x) override { return count([&] { return b_.enter_forward(x); }); }
    Tensor enter_backward(const Tensor& dx) override { return count([&] { return b_.enter_backward(dx); }); }
    Tensor exit_forward(const Tensor& y) override { return count([&] { return b_.exit_forward(y); }); }
    Tensor exit_backward(const Tensor& dy) override { return count([&] { return b_.exit_backward(dy); }); }
    bool splits_tokens() const override { return b_.splits_tokens(); }
    void sum_token_split_grad(Tensor& partial) override { b_.sum_token_split_grad(partial); }
    std::array<int64_t, kNumCommOps> calls{};

   private:
    Tensor count(const std::function<Tensor()>& call) {
        const CommCounters before = tp_.counters();
        Tensor out = call();
        const CommCounters d = tp_.counters() - before;
        for (int op = 0; op < kNumCommOps; op++) calls[op] += d.calls[op];
        return out;
    }
    TensorParallelBoundary& b_;
    Comm& tp_;
};
}  // namespace

LlamaConfig tp_config(int64_t vocab, bool tied) {
    LlamaConfig c = preset("tiny");
    c.n_kv_heads = 4;
    c.vocab = vocab;
    c.tied_embeddings = tied;
    return c;
}

LlamaConfig tp3_config(int64_t vocab, bool tied) {
    LlamaConfig c = tp_config(vocab, tied);
    c.hidden = 48, c.n_heads = 6, c.n_kv_heads = 3, c.ffn = 96;
    return c;
}

void RandomTokens::get(int64_t sample_id, int64_t T, int32_t* tokens, int32_t* targets) const {
    auto tok = [&](int64_t i) { return (int32_t)(philox4x32(11, 4242, (uint64_t)(sample_id * 1000 + i)).v[0] % vocab); };
    for (int64_t i = 0; i < T; i++) {
        tokens[i] = tok(i);
        targets[i] = i + 1 < T ? tok(i + 1) : kIgnoreTarget;
    }
}

std::string Layout::str() const {
    return strfmt("tp %d × dp %d%s%s, micro-batch %lld × grad-accum %lld, recompute %s", tp, dp, sp ? " +sp" : "",
                  zero ? strfmt(" ZeRO-%d", zero).c_str() : "", (long long)micro_batch, (long long)grad_accum,
                  recompute_name(recompute)) +
           (precision.gemm == DType::f32 && precision.param == DType::f32 ? "" : ", " + precision.str());
}

Trained train_one_rank(const LlamaConfig& cfg, int64_t seq, int64_t rows, Recompute recompute, int steps,
                       const Precision& precision) {
    RandomTokens data((int32_t)cfg.vocab);
    ModelOptions mo;
    mo.recompute = recompute;
    mo.precision = precision;
    Model model(cfg, Device::cpu, kModelSeed, mo);
    return train_reference(model, kAdamW, data, seq, rows, steps, [](int64_t) { return kAdamW.lr; }, kClip);
}

Run run_layout(const LlamaConfig& cfg, const Layout& L, int steps, const SpParts* sp) {
    REQUIRE_MESSAGE((!L.sp || sp), L.str() << ": a layout with sp needs chapter 05's SpParts (sp_parts())");
    RandomTokens data((int32_t)cfg.vocab);
    const Tag state_tags[] = {Tag::params, Tag::grads, Tag::master, Tag::optim};
    int64_t before[4];
    for (int i = 0; i < 4; i++) before[i] = mem_stats(Device::cpu).current[(int)state_tags[i]];
    ParallelGrid grid(make_world_comm(CommBackend::mpi), GridShape{L.dp, 1, 1, L.tp}, &cfg);
    ModelOptions mo;
    mo.recompute = L.recompute;
    mo = tensor_parallel_options(mo, grid.tp(), L.sp);
    mo.precision = L.precision;
    if (L.zero) mo = zero_model_options(parse_zero_stage(L.zero), mo);
    Model model(cfg, Device::cpu, kModelSeed, mo);

    TrainConfig tc;
    tc.seq = L.seq, tc.micro_batch = L.micro_batch, tc.grad_accum = L.grad_accum;
    const BatchPlan plan = data_parallel_plan(tc, grid.dp());

    // the tensor-parallel seams: f/g (or SP's pair), the vocab-parallel loss, the per-layer byte meter
    std::unique_ptr<TensorParallel> boundary =
        L.sp ? sp->boundary(grid.tp()) : std::make_unique<TensorParallel>(grid.tp());
    VocabParallelCrossEntropy loss(grid.tp(), model.layout(), cfg.vocab);
    LayerTraffic meter(model, *boundary);
    RegionOps region(*boundary, grid.tp());
    model.set_boundary(&region);
    model.set_loss(&loss);
    model.add_observer(&meter);
    // the programs' optimizer and hooks (tp_optimizer.hpp)
    TensorParallelOptimizer opt = make_tp_optimizer(model, grid, L.zero, kAdamW);

    Run run;
    {  // one measured micro-batch, as measure_micro_batch does: the hooks finish what its backward started
        std::vector<MicroBatch> mbs = make_micro_batches(data, 0, plan, Device::cpu);
        MicroBatchActs acts = model.forward(mbs[0], 100.0);
        if (sp) run.norm_region_bytes = sp->norm_region_bytes(acts);
        model.backward(acts);
        for (StepHooks* h : opt.hooks) h->finish_gradients();
        run.traffic = meter.layers();
        run.region_calls = region.calls;
        run.sequence_parallel = L.sp;
        meter.reset();
        model.zero_grads();
    }

    Trainer trainer{model, *opt.optim, opt.hooks};
    const CommCounters world0 = grid.world().counters();
    for (int s = 0; s < steps; s++) {
        StepResult r = training_step(trainer, data, s, plan, kAdamW.lr, kClip);
        run.losses.push_back(r.loss);
        run.norms.push_back(r.grad_norm);
    }
    run.world_scalar_reductions = (grid.world().counters() - world0).scalar_reductions;
    run.norm_reductions = opt.optim->norm_reductions;
    run.coords = grid.coords();
    int64_t after[4];
    for (int i = 0; i < 4; i++) after[i] = mem_stats(Device::cpu).current[(int)state_tags[i]] - before[i];
    run.state = ModelStateBytes{after[0], after[1], after[2], after[3]};
    for (const ParamUnit& u : model.layout().units) run.unit_numels.push_back(u.numel);
    // the weights on every rank: ZeRO-3 gathers its shards over dp first, then tp's shards are put together
    Tensor params = opt.zero ? opt.zero->gather_params() : model.params();
    run.params = gather_tensor_parallel(cfg, model.layout(), params, grid.tp());
    model.remove_observer(&meter);
    return run;
}

void check_trains_like_one_rank(const LlamaConfig& cfg, const Layout& L, int steps, double rtol, const std::string& note,
                                const SpParts* sp) {
    const std::string what = L.str() + note;
    INFO(what);
    const Run run = run_layout(cfg, L, steps, sp);
    // the reference: the same global batch as one micro-batch of dp·mb·ga sequences, one rank, no hooks
    const Trained ref = train_one_rank(cfg, L.seq, L.dp * L.micro_batch * L.grad_accum, L.recompute, steps);
    check_same_training(run, ref, cfg, rtol, what);
    CHECK(run.norm_reductions == steps);          // one all-reduce of partial sums per step...
    CHECK(run.world_scalar_reductions == steps);  // ...and nothing else reduced for the norm
    const int64_t psi = 0 + [&] {                 // this tp rank's share of the model: Ψ_t
        int64_t n = 0;
        for (int64_t u : run.unit_numels) n += u;
        return n;
    }();
    const int64_t S = zero_shard_numel(run.unit_numels, L.dp, run.coords.dp);
    const ModelStateBytes want = zero_model_state_bytes_fp32(L.zero, psi, S);
    INFO("model state: params " << run.state.params << " grads " << run.state.grads << " optim " << run.state.optim
                                << "; formula " << want.params << " " << want.grads << " " << want.optim);
    CHECK(run.state.params == want.params);
    CHECK(run.state.grads == want.grads);
    CHECK(run.state.master == 0);
    CHECK(run.state.optim == want.optim);
}

ParallelGrid tp_grid(const LlamaConfig& cfg, int tp) {
    return ParallelGrid(make_world_comm(CommBackend::mpi), GridShape{1, 1, 1, tp}, &cfg);
}

std::vector<float> block(const std::vector<float>& a, int64_t C, int64_t r0, int64_t rows, int64_t c0, int64_t cols) {
    std::vector<float> out(rows * cols);
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) out[i * cols + j] = a[(r0 + i) * C + c0 + j];
    return out;
}

namespace {
Tensor host(const std::vector<float>& v, const Shape& s) { return Tensor::from_host(v, s, Device::cpu); }
Tensor zeros(const Shape& s) { return Tensor::zeros(s, DType::f32, Device::cpu, Tag::workspace); }
}  // namespace

void check_column_row_pair(TensorParallel& b, bool seq_split) {
    Comm& tp = b.group();
    const int t = tp.size(), r = tp.rank();
    const int64_t N = 4 * t, h = 6, f = 3 * t;
    const double fwd0 = b.forward_bytes(), bwd0 = b.backward_bytes();
    Tensor X = random_tensor({N, h}, 1), W1 = random_tensor({f, h}, 2), W2 = random_tensor({h, f}, 3);
    Tensor dY = random_tensor({N, h}, 4);
    // the unsharded pair: Y = (X W1^T) W2^T, and its backward
    Tensor A = zeros({N, f}), Y = zeros({N, h}), dA = zeros({N, f}), dX = zeros({N, h});
    Tensor dW1 = zeros({f, h}), dW2 = zeros({h, f});
    linear_forward(X, W1, A);
    linear_forward(A, W2, Y);
    linear_backward(dY, A, W2, dA, dW2);
    linear_backward(dA, X, W1, dX, dW1);
    // rank r: rows [r f/t, (r+1) f/t) of W1 (column-parallel) and the same columns of W2 (row-parallel);
    // with SP, the token rows [r N/t, (r+1) N/t) of the input and output
    const int64_t fl = f / t, nl = seq_split ? N / t : N, n0 = seq_split ? r * nl : 0;
    Tensor W1r = host(block(W1.to_host(), h, r * fl, fl, 0, h), {fl, h});
    Tensor W2r = host(block(W2.to_host(), f, 0, h, r * fl, fl), {h, fl});
    Tensor x = b.enter_forward(host(block(X.to_host(), h, n0, nl, 0, h), {nl, h}));  // (N, h)
    Tensor a = zeros({N, fl}), yp = zeros({N, h});
    linear_forward(x, W1r, a);
    linear_forward(a, W2r, yp);  // a partial sum
    Tensor y = b.exit_forward(yp);
    check_close(y.to_host(), block(Y.to_host(), h, n0, nl, 0, h), 1e-5, 1e-6, "y");
    Tensor dy = b.exit_backward(host(block(dY.to_host(), h, n0, nl, 0, h), {nl, h}));  // (N, h)
    Tensor da = zeros({N, fl}), dxp = zeros({N, h}), dw1 = zeros({fl, h}), dw2 = zeros({h, fl});
    linear_backward(dy, a, W2r, da, dw2);
    linear_backward(da, x, W1r, dxp, dw1);
    Tensor dx = b.enter_backward(dxp);
    check_close(dx.to_host(), block(dX.to_host(), h, n0, nl, 0, h), 1e-5, 1e-6, "dx");
    check_close(dw1.to_host(), block(dW1.to_host(), h, r * fl, fl, 0, h), 1e-5, 1e-6, "dW1 (column-parallel)");
    check_close(dw2.to_host(), block(dW2.to_host(), f, 0, h, r * fl, fl), 1e-5, 1e-6, "dW2 (row-parallel)");
    // per direction one all-reduce of (N, h) f32 (TP), or one all-gather + one reduce-scatter of it (SP):
    // the same 2(t-1)/t·N·h·4 bytes
    CHECK(b.forward_bytes() - fwd0 == 2.0 * (t - 1) / t * (N * h * 4));
    CHECK(b.backward_bytes() - bwd0 == b.forward_bytes() - fwd0);
}

namespace {

// causal GQA attention between column-parallel q/k/v and a row-parallel o_proj, by ops (the model's
// block minus norms and RoPE): y = attn(x Wq^T, x Wk^T, x Wv^T) Wo^T and its backward; weight grads
// accumulate into g. x, y, dy, dx: (B T, h) on every rank.
struct AttnWeights {
    Tensor wq, wk, wv, wo;
};
void attention_block(const Tensor& x, const AttnWeights& w, const Tensor& dy, int64_t B, int64_t hd, Tensor& y,
                     Tensor& dx, AttnWeights& g) {
    const int64_t N = x.size(0), T = N / B, nq = w.wq.size(0), nk = w.wk.size(0);
    Tensor q = zeros({N, nq}), k = zeros({N, nk}), v = zeros({N, nk}), o = zeros({N, nq}), lse = zeros({B, nq / hd, T});
    linear_forward(x, w.wq, q);
    linear_forward(x, w.wk, k);
    linear_forward(x, w.wv, v);
    auto heads = [&](const Tensor& t) { return t.view({B, T, t.size(1) / hd, hd}); };
    Tensor o4 = heads(o);
    attention_forward_naive(heads(q), heads(k), heads(v), o4, lse, nullptr);
    linear_forward(o, w.wo, y);
    Tensor dout = zeros({N, nq}), dq = zeros({N, nq}), dk = zeros({N, nk}), dv = zeros({N, nk});
    linear_backward(dy, o, w.wo, dout, g.wo);
    Tensor dq4 = heads(dq), dk4 = heads(dk), dv4 = heads(dv);
    attention_backward_naive(heads(dout), heads(q), heads(k), heads(v), o4, lse, nullptr, dq4, dk4, dv4);
    Tensor no_dx;
    linear_backward(dq, x, w.wq, dx, g.wq);
    linear_backward_input_add(dk, w.wk, dx);  // x feeds q, k and v: dx sums all three
    linear_backward(dk, x, w.wk, no_dx, g.wk);
    linear_backward_input_add(dv, w.wv, dx);
    linear_backward(dv, x, w.wv, no_dx, g.wv);
}

}  // namespace

void check_head_split_attention(TensorParallel& b, bool seq_split) {
    Comm& tp = b.group();
    const int t = tp.size(), r = tp.rank();
    const int64_t B = 2, T = 2 * t, N = B * T, hd = 4, h = 6, nq = 2 * t * hd, nk = t * hd;  // 2t heads, t kv heads
    AttnWeights w{random_tensor({nq, h}, 41, 0.5f), random_tensor({nk, h}, 42, 0.5f), random_tensor({nk, h}, 43, 0.5f),
                  random_tensor({h, nq}, 44, 0.5f)};
    Tensor X = random_tensor({N, h}, 45), dY = random_tensor({N, h}, 46), Y = zeros({N, h}), dX = zeros({N, h});
    AttnWeights g{zeros({nq, h}), zeros({nk, h}), zeros({nk, h}), zeros({h, nq})};
    attention_block(X, w, dY, B, hd, Y, dX, g);
    // rank r: query heads [2r, 2r+2) and the kv head r they share (GQA), the same columns of Wo
    const int64_t ql = nq / t, kl = nk / t, nl = seq_split ? N / t : N, n0 = seq_split ? r * nl : 0;
    auto rows = [&](const Tensor& m, int64_t n) { return host(block(m.to_host(), h, r * n, n, 0, h), {n, h}); };
    AttnWeights wr{rows(w.wq, ql), rows(w.wk, kl), rows(w.wv, kl), host(block(w.wo.to_host(), nq, 0, h, r * ql, ql), {h, ql})};
    AttnWeights gr{zeros({ql, h}), zeros({kl, h}), zeros({kl, h}), zeros({h, ql})};
    Tensor x = b.enter_forward(host(block(X.to_host(), h, n0, nl, 0, h), {nl, h}));               // f
    Tensor dy = b.exit_backward(host(block(dY.to_host(), h, n0, nl, 0, h), {nl, h}));              // g^T
    Tensor yp = zeros({N, h}), dxp = zeros({N, h});
    attention_block(x, wr, dy, B, hd, yp, dxp, gr);
    check_close(b.exit_forward(yp).to_host(), block(Y.to_host(), h, n0, nl, 0, h), 1e-5, 1e-6, "attention y");  // g
    check_close(b.enter_backward(dxp).to_host(), block(dX.to_host(), h, n0, nl, 0, h), 1e-5, 1e-6, "attention dx");  // f^T
    check_close(gr.wq.to_host(), block(g.wq.to_host(), h, r * ql, ql, 0, h), 1e-5, 1e-6, "dWq (this rank's heads)");
    check_close(gr.wk.to_host(), block(g.wk.to_host(), h, r * kl, kl, 0, h), 1e-5, 1e-6, "dWk (this rank's kv head)");
    check_close(gr.wv.to_host(), block(g.wv.to_host(), h, r * kl, kl, 0, h), 1e-5, 1e-6, "dWv");
    check_close(gr.wo.to_host(), block(g.wo.to_host(), nq, 0, h, r * ql, ql), 1e-5, 1e-6, "dWo (its columns)");
}

void check_vocab_embedding(TensorParallel& b, int64_t V, bool seq_split) {
    Comm& tp = b.group();
    const int t = tp.size(), r = tp.rank();
    const int64_t N = 4 * t, h = 5;
    const ParamLayout layout = tensor_parallel_layout(tp_config(V), t, r);
    const int64_t rows = layout.vocab_rows, start = layout.vocab_start;
    const int64_t real = std::clamp<int64_t>(V - start, 0, rows);
    Tensor tokens = random_tokens({N}, (int32_t)V, 5), table = random_tensor({V, h}, 6), dY = random_tensor({N, h}, 7);
    Tensor ref = zeros({N, h}), dtable = zeros({V, h});
    embedding_forward(tokens, table, ref);
    embedding_backward(tokens, dY, dtable);
    std::vector<float> shard(rows * h, 0.0f);  // this rank's rows; padding rows zero
    std::vector<float> mine = block(table.to_host(), h, start, real, 0, h);
    std::copy(mine.begin(), mine.end(), shard.begin());
    const int64_t nl = seq_split ? N / t : N, n0 = seq_split ? r * nl : 0;
    Tensor x = zeros({N, h});
    embedding_forward(tokens, host(shard, {rows, h}), x, start);  // zero rows for other ranks' tokens
    Tensor y = b.exit_forward(x);
    check_close(y.to_host(), block(ref.to_host(), h, n0, nl, 0, h), 1e-6, 1e-7, "embedding forward");
    Tensor dy = b.exit_backward(host(block(dY.to_host(), h, n0, nl, 0, h), {nl, h}));
    Tensor g = zeros({rows, h});
    embedding_backward(tokens, dy, g, start);
    std::vector<float> want(rows * h, 0.0f), got = g.to_host();
    std::vector<float> ref_rows = block(dtable.to_host(), h, start, real, 0, h);
    std::copy(ref_rows.begin(), ref_rows.end(), want.begin());
    check_close(got, want, 1e-6, 1e-7, "embedding backward (padding rows stay zero)");
}

void check_model_step(const LlamaConfig& cfg, TensorParallel& b, Recompute rc, bool sequence_parallel) {
    Comm& tp = b.group();
    const int64_t B = 2, T = 8;
    ModelOptions o;
    o.recompute = rc;
    o.attention = AttentionKernel::naive;
    Model ref(cfg, Device::cpu, 3, o);
    o = tensor_parallel_options(o, tp, sequence_parallel);  // SP: the model sums the norms' gradients over tp itself
    Model model(cfg, Device::cpu, 3, o);
    VocabParallelCrossEntropy loss(tp, model.layout(), cfg.vocab);
    model.set_boundary(&b);
    model.set_loss(&loss);
    std::vector<int32_t> tg = random_tokens({B * T}, (int32_t)cfg.vocab, 9).to_host_i32();
    tg[5] = -1;
    Tensor tokens = random_tokens({B * T}, (int32_t)cfg.vocab, 8), targets = Tensor::from_host_i32(tg, {B * T}, Device::cpu);
    const double l_ref = ref.forward_backward(tokens, targets, B, T, (double)(B * T - 1));
    const double l = model.forward_backward(tokens, targets, B, T, (double)(B * T - 1));
    CHECK(std::abs(l - l_ref) <= 1e-6 * std::abs(l_ref));
    // per tensor, relative to its largest gradient; every tensor has a nonzero gradient to compare
    const double smallest = check_close_per_tensor(cfg, gather_tensor_parallel(cfg, model.layout(), model.grads(), tp),
                                                   ref.grads().to_host(), 1e-4, 1e-5, "gradient");
    CHECK(smallest > 0);
    // evaluation: the gathered vocab shards are the unsharded logits
    Tensor full = gather_vocab_logits(tp, model.forward_logits(tokens, B, T), cfg.vocab);
    check_close(full.to_host(), ref.forward_logits(tokens, B, T).to_host(), 1e-5, 1e-6, "gathered logits");
}

// the layer traffic of run_layout's measured micro-batch: forward == backward == half the formula, exactly
void check_layer_traffic(const Run& run, const Layout& L, int64_t h) {
    const double half = tp_layer_comm_elements(L.tp, L.seq, L.micro_batch, h) * 4 / 2;  // f32 bytes
    REQUIRE(!run.traffic.empty());
    for (size_t i = 0; i < run.traffic.size(); i++) {
        INFO("layer " << i << ": forward " << run.traffic[i].forward << " backward " << run.traffic[i].backward
                      << " bytes, formula 8(t-1)/t·sbh·4 / 2 = " << half);
        CHECK(run.traffic[i].forward == half);
        CHECK(run.traffic[i].backward == half);
    }
    // the same bytes by other collectives (seed 000's TP table is TP + SP's). Plain TP closes its region with
    // all-reduces only: g forward and f backward, two a layer each way, and the vocab-parallel embedding's exit and
    // the head's entrance. SP makes each of them an all-gather and a reduce-scatter (an all-reduce is the two in
    // one): an all-gather entering forward and leaving backward, a reduce-scatter the other way round; no all-reduce
    auto calls = [&](CommOp op) { return run.region_calls[(int)op]; };
    INFO(std::string(run.sequence_parallel ? "SP" : "TP") << " region edges: " << calls(CommOp::all_reduce)
         << " all-reduces, " << calls(CommOp::all_gather) << " all-gathers, " << calls(CommOp::reduce_scatter)
         << " reduce-scatters; " << run.traffic.size() << " layers");
    const int64_t edges = 4 * (int64_t)run.traffic.size() + 2;
    CHECK(calls(CommOp::all_reduce) == (run.sequence_parallel ? 0 : edges));
    CHECK(calls(CommOp::all_gather) == (run.sequence_parallel ? edges : 0));
    CHECK(calls(CommOp::reduce_scatter) == (run.sequence_parallel ? edges : 0));
}

}  // namespace penta::tp_testing
