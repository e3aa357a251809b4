// test_tp.cpp — chapter 04, tensor parallelism: every sharded piece (column/row linears, head-split
// attention, vocab-parallel embedding and cross-entropy) against the unsharded computation, forward and
// backward; N training steps of tp 2, tp 4 and tp 2 × dp 2 (DP and ZeRO-1/2/3) against one rank (losses,
// grad norms, gathered weights, rtol 1e-5; model state per rank = the ZeRO formula of the tp shard; one
// grad-norm all-reduce per step), vocabularies tp does not divide, the counted bytes per layer against
// 8(t-1)/t·s·b·h, and the layouts that must be refused. The helpers are tp_testing.hpp's.
// Playbook: "Tensor parallelism". Run: `make test CH=04`, or
//   mpirun --allow-run-as-root --oversubscribe -np 2 build/bin/tests_04 -ts='ch04 np2'
#include <algorithm>
#include <cmath>

#include "../../04_tensor_parallel/vocab_parallel.hpp"
#include "../../common/grid.hpp"
#include "tp_testing.hpp"

using namespace penta;
using namespace penta::testing;
using namespace penta::tp_testing;

namespace {

// a model of vocabulary V whose heads tp t divides (tiny's 4 heads for t 2 and 4, tp3_config's 6 for t 3)
LlamaConfig config_for(int t, int64_t V) { return t == 3 ? tp3_config(V) : tp_config(V); }

void vocab_cross_entropy_matches(Comm& tp, int64_t V) {
    const int t = tp.size(), r = tp.rank();
    const int64_t N = 7;
    const ParamLayout layout = tensor_parallel_layout(config_for(t, V), t, r);
    const int64_t rows = layout.vocab_rows, start = layout.vocab_start;
    const int64_t real = std::clamp<int64_t>(V - start, 0, rows);
    Tensor logits = random_tensor({N, V}, 21, 3.0f);
    std::vector<int32_t> tg = random_tokens({N}, (int32_t)V, 22).to_host_i32();
    tg[2] = -1;
    tg[4] = (int32_t)V - 1;  // the last real id sits next to the padding
    Tensor targets = Tensor::from_host_i32(tg, {N}, Device::cpu);
    Tensor dref = Tensor::empty({N, V}, DType::f32, Device::cpu, Tag::workspace), no_losses;
    const double l_ref = cross_entropy_forward_backward(logits, targets, dref, 0.5f, -1, no_losses);
    // this rank's columns; padding columns hold a large logit that must not count
    std::vector<float> shard(N * rows, 50.0f), full = logits.to_host();
    for (int64_t n = 0; n < N; n++)
        for (int64_t v = 0; v < real; v++) shard[n * rows + v] = full[n * V + start + v];
    Tensor z = Tensor::from_host(shard, {N, rows}, Device::cpu);
    Tensor local = z.clone(Device::cpu, Tag::workspace);
    VocabParallelCrossEntropy ce(tp, layout, V);
    const double l = ce.forward_backward(z, targets, z, 0.5f);  // dlogits aliases the logits, as in the model
    CHECK(std::abs(l - l_ref) <= 1e-6 * std::abs(l_ref));
    std::vector<float> want(N * rows, 0.0f), d_ref = dref.to_host();
    for (int64_t n = 0; n < N; n++)
        for (int64_t v = 0; v < real; v++) want[n * rows + v] = d_ref[n * V + start + v];
    check_close(z.to_host(), want, 1e-5, 1e-7, "d logits of this shard (padding columns 0)");
    // the loss alone (no gradient), as evaluation calls it
    Tensor none;
    CHECK(std::abs(ce.forward_backward(local, targets, none, 1.0f) - l_ref) <= 1e-6 * std::abs(l_ref));
}

// The same with every logit shifted by `shift` on `device`: +1000 overflows exp(z) unless the GLOBAL row
// max (over every shard) is subtracted, -1000 underflows the sum to 0. Against a double-precision softmax
// of the same f32 values; the padding columns hold shift + 50, which must not count.
void vocab_cross_entropy_shifted(Comm& tp, int64_t V, float shift, Device device) {
    CAPTURE(shift);
    CAPTURE(V);
    const int t = tp.size(), r = tp.rank();
    const int64_t N = 5;
    const ParamLayout layout = tensor_parallel_layout(config_for(t, V), t, r);
    const int64_t rows = layout.vocab_rows, start = layout.vocab_start;
    const int64_t real = std::clamp<int64_t>(V - start, 0, rows);
    std::vector<float> full = random_tensor({N, V}, 23, 3.0f).to_host();
    for (float& v : full) v += shift;
    std::vector<int32_t> tg = random_tokens({N}, (int32_t)V, 24).to_host_i32();
    tg[1] = -1;
    const float gscale = 0.5f;
    std::vector<float> dfull, dwant(N * rows, 0.0f), shard(N * rows, shift + 50.0f);
    const double want = cross_entropy_reference(full, V, tg, gscale, dfull);
    for (int64_t n = 0; n < N; n++)
        for (int64_t v = 0; v < real; v++) {
            shard[n * rows + v] = full[n * V + start + v];
            dwant[n * rows + v] = dfull[n * V + start + v];
        }
    Tensor z = Tensor::from_host(shard, {N, rows}, device);
    VocabParallelCrossEntropy ce(tp, layout, V);
    const double l = ce.forward_backward(z, Tensor::from_host_i32(tg, {N}, device), z, gscale);
    CHECK_MESSAGE(std::isfinite(l), "the loss of logits shifted by " << shift << " is " << l);
    CHECK(std::abs(l - want) <= 1e-5 * std::abs(want));
    check_close(z.to_host(), dwant, 1e-4, 1e-7, strfmt("d logits of this shard, logits shifted by %g", shift));
}

// One logit 200 above the rest of its row, at each shard's first real column, at its last, and next to the
// padding (the last real id): exp(200) overflows f32 unless the row max subtracted is the true one, which
// here is one element of one shard, so a max that skips a shard's first (or last) column, or that misses a
// boundary, overflows that row. Against a double-precision softmax, the target on and off the dominant column.
void vocab_cross_entropy_dominant(Comm& tp, int64_t V) {
    CAPTURE(V);
    const int t = tp.size(), r = tp.rank();
    std::vector<int64_t> cols;  // every shard's first and last real column (global ids)
    for (int k = 0; k < t; k++) {
        const ParamLayout lk = tensor_parallel_layout(config_for(t, V), t, k);
        const int64_t real_k = std::clamp<int64_t>(V - lk.vocab_start, 0, lk.vocab_rows);
        if (real_k == 0) continue;
        cols.push_back(lk.vocab_start);
        cols.push_back(lk.vocab_start + real_k - 1);
    }
    const int64_t N = 2 * (int64_t)cols.size();
    const ParamLayout layout = tensor_parallel_layout(config_for(t, V), t, r);
    const int64_t rows = layout.vocab_rows, start = layout.vocab_start;
    const int64_t real = std::clamp<int64_t>(V - start, 0, rows);
    std::vector<float> full = random_tensor({N, V}, 25, 1.0f).to_host();
    std::vector<int32_t> tg = random_tokens({N}, (int32_t)V, 26).to_host_i32();
    for (int64_t n = 0; n < N; n++) {
        const int64_t c = cols[n / 2];
        full[n * V + c] += 200.0f;
        if (n % 2 == 0) tg[n] = (int32_t)c;  // the target is the dominant logit: loss ~ 0
        else if (tg[n] == (int32_t)c) tg[n] = (int32_t)((c + 1) % V);  // another target: loss ~ 200
    }
    const float gscale = 0.5f;
    std::vector<float> dfull, dwant(N * rows, 0.0f), shard(N * rows, 250.0f);  // padding: larger still, never counted
    const double want = cross_entropy_reference(full, V, tg, gscale, dfull);
    for (int64_t n = 0; n < N; n++)
        for (int64_t v = 0; v < real; v++) {
            shard[n * rows + v] = full[n * V + start + v];
            dwant[n * rows + v] = dfull[n * V + start + v];
        }
    Tensor z = Tensor::from_host(shard, {N, rows}, Device::cpu);
    VocabParallelCrossEntropy ce(tp, layout, V);
    const double l = ce.forward_backward(z, Tensor::from_host_i32(tg, {N}, Device::cpu), z, gscale);
    CHECK_MESSAGE(std::isfinite(l), "the loss with one logit 200 above the rest at a shard's edge is " << l);
    CHECK(std::abs(l - want) <= 1e-5 * std::abs(want));
    check_close(z.to_host(), dwant, 1e-4, 1e-7, "d logits of this shard, one dominant logit per row");
}

}  // namespace

TEST_SUITE("ch04 np2") {
    TEST_CASE("TP column-parallel then row-parallel linear (f ... g) equals the unsharded pair, fwd and bwd") {
        ParallelGrid g = tp_grid(tp_config(64), 2);
        TensorParallel b(g.tp());
        // playbook: 000.05.1 — column then row split = the unsharded pair, forward and backward (the row output
        //   all-reduced)
        check_column_row_pair(b, false);
    }
    TEST_CASE("TP head-split attention (column-parallel q/k/v, GQA heads per rank, row-parallel o) equals the full") {
        ParallelGrid g = tp_grid(tp_config(64), 2);
        TensorParallel b(g.tp());
        // playbook: 000.05.2 — q/k/v column, o row: = the full attention
        check_head_split_attention(b, false);
    }
    TEST_CASE("TP vocab-parallel embedding equals the full table, fwd and bwd (vocab 9: one padding row)") {
        ParallelGrid g = tp_grid(tp_config(64), 2);
        TensorParallel b(g.tp());
        check_vocab_embedding(b, 9, false);
        check_vocab_embedding(b, 64, false);
    }
    TEST_CASE("TP vocab-parallel cross-entropy equals the full softmax; padded vocab masked (vocab 9 and 3)") {
        ParallelGrid g = tp_grid(tp_config(64), 2);
        vocab_cross_entropy_matches(g.tp(), 9);
        vocab_cross_entropy_matches(g.tp(), 8);
        vocab_cross_entropy_matches(g.tp(), 3);
    }
    TEST_CASE("TP vocab-parallel cross-entropy is stable for logits shifted by +1000 and -1000 (vocab 9 and 64)") {
        ParallelGrid g = tp_grid(tp_config(64), 2);
        for (int64_t V : {9, 64})
            for (float shift : {1000.0f, -1000.0f}) vocab_cross_entropy_shifted(g.tp(), V, shift, Device::cpu);
    }
    TEST_CASE("TP vocab-parallel cross-entropy is stable with one logit 200 above the rest at a shard's first or last column") {
        ParallelGrid g = tp_grid(tp_config(64), 2);
        for (int64_t V : {9, 8, 64}) vocab_cross_entropy_dominant(g.tp(), V);
    }
    TEST_CASE("[gpu] TP vocab-parallel cross-entropy on the GPU is stable for logits shifted by +1000 and -1000") {
        SKIP_WITHOUT_GPU();
        ParallelGrid g = tp_grid(tp_config(64), 2);
        for (float shift : {1000.0f, -1000.0f}) vocab_cross_entropy_shifted(g.tp(), 9, shift, Device::cuda);
    }
    TEST_CASE("TP model step: loss, every gathered gradient (head-split attention too) and logits equal one rank's") {
        for (bool tied : {false, true})
            for (int64_t V : {64, 63}) {
                LlamaConfig cfg = tp_config(V, tied);
                ParallelGrid g = tp_grid(cfg, 2);
                TensorParallel b(g.tp());
                INFO("vocab " << V << (tied ? " tied" : " untied"));
                // playbook: 000.05.2 — a model step's loss, every gathered gradient and logits = one rank's
                check_model_step(cfg, b, Recompute::none);
            }
        LlamaConfig cfg = tp_config(64);
        ParallelGrid g = tp_grid(cfg, 2);
        TensorParallel b(g.tp());
        check_model_step(cfg, b, Recompute::full);  // the recomputed block all-reduces again: same gradients
        check_model_step(cfg, b, Recompute::offload);
    }
    TEST_CASE("TP tp 2 trains like one rank: 6 steps, losses, grad norms and gathered weights (vocab 63, 64 tied)") {
        for (auto [V, tied] : {std::pair<int64_t, bool>{63, false}, {64, true}}) {
            LlamaConfig cfg = tp_config(V, tied);
            Layout L;
            L.tp = 2;
            L.grad_accum = 2;
            check_trains_like_one_rank(cfg, L, 6, 1e-5, strfmt(", vocab %lld", (long long)V));
        }
    }
    TEST_CASE("TP bytes per layer (forward + backward) == 8(t-1)/t·s·b·h elements, t = 2") {
        Layout L;
        L.tp = 2;
        // playbook: 000.01.2 000.05.4 000.05.5 000.05.6 000.C.3 003.3.1 003.3.2 — bytes a layer (forward + backward)
        //   = 8(t-1)/t·sbh elements, all-reduces only
        check_layer_traffic(run_layout(tp_config(64), L, 1), L, 32);
    }
    TEST_CASE("TP bad layouts are refused before any work, naming the rule") {
        LlamaConfig cfg = tp_config(64);
        cfg.n_kv_heads = 1;
        std::string e = error_of([&] { tp_grid(cfg, 2); });
        // playbook: 000.05.3 — tp must divide the kv heads (1 kv head: tp 2 refused)
        CHECK(contains(e, "--tp 2 must divide the model's 1 key/value heads"));
        e = error_of([&] { ParallelGrid(make_world_comm(CommBackend::mpi), GridShape{2, 1, 1, 2}, &cfg); });
        CHECK(contains(e, "= 4 ranks, but the job has 2"));
        e = error_of([&] { ParamLayout::build(cfg, 2, 0); });
        CHECK(contains(e, "tp 2 must divide n_kv_heads 1"));
    }
}

TEST_SUITE("ch04 np3") {
    // an odd world: tp 3 cuts vocab 64 into 22 + 22 + 20 real rows (2 padding rows), 8 into 3 + 3 + 2, 9 evenly,
    // 4 into 2 + 2 + 0 (the last shard all padding)
    TEST_CASE("TP vocab-parallel cross-entropy equals the full softmax at tp 3; padded vocab masked (vocab 64, 8, 9, 4)") {
        ParallelGrid g = tp_grid(tp3_config(64), 3);
        for (int64_t V : {64, 8, 9, 4}) vocab_cross_entropy_matches(g.tp(), V);
    }
    TEST_CASE("TP vocab-parallel cross-entropy is stable at tp 3: shifted by +-1000, one dominant logit at a shard's edge") {
        ParallelGrid g = tp_grid(tp3_config(64), 3);
        for (int64_t V : {64, 8})
            for (float shift : {1000.0f, -1000.0f}) vocab_cross_entropy_shifted(g.tp(), V, shift, Device::cpu);
        for (int64_t V : {64, 8, 4}) vocab_cross_entropy_dominant(g.tp(), V);
    }
}

TEST_SUITE("ch04 np4") {
    TEST_CASE("TP tp 4: linear pair, head-split attention, vocab-parallel embedding / cross-entropy, model step") {
        LlamaConfig cfg = tp_config(66);  // 66 = 4 × 17 - 2: two padding rows on the last rank
        ParallelGrid g = tp_grid(cfg, 4);
        TensorParallel b(g.tp());
        check_column_row_pair(b, false);
        check_head_split_attention(b, false);
        check_vocab_embedding(b, 66, false);
        check_vocab_embedding(b, 5, false);  // rank 3 holds only padding
        vocab_cross_entropy_matches(g.tp(), 66);
        vocab_cross_entropy_matches(g.tp(), 5);
        check_model_step(cfg, b, Recompute::none);
    }
    TEST_CASE("TP tp 4 trains like one rank: 6 steps (vocab 66, tied)") {
        LlamaConfig cfg = tp_config(66, true);
        Layout L;
        L.tp = 4;
        check_trains_like_one_rank(cfg, L, 6, 1e-5);
    }
    TEST_CASE("TP tp 2 × dp 2 trains like one rank: DP all-reduce and ZeRO-1/2/3 (memory = formula), 6 steps (vocab 63)") {
        LlamaConfig cfg = tp_config(63);
        for (int zero : {0, 1, 2, 3}) {
            Layout L;
            L.tp = 2, L.dp = 2, L.zero = zero;
            L.micro_batch = 2, L.grad_accum = 2;
            // playbook: 000.01.2 000.10.4 — tp 2 × dp 2 (ZeRO-0..3) trains like one rank; model state per rank = the
            //   formula over the tp shard
            check_trains_like_one_rank(cfg, L, 6, 1e-5);
        }
    }
    TEST_CASE("TP bytes per layer == 8(t-1)/t·s·b·h elements: tp 4, and tp 2 × dp 2 (dp traffic not counted)") {
        Layout L;
        L.tp = 4;
        // playbook: 000.01.2 003.3.1 003.3.2 — the same bytes at tp 4 and tp 2 × dp 2
        check_layer_traffic(run_layout(tp_config(64), L, 1), L, 32);
        L.tp = 2, L.dp = 2;
        check_layer_traffic(run_layout(tp_config(64), L, 1), L, 32);
    }
    TEST_CASE("TP bad layouts: tp 4 with 2 kv heads, dp × tp != world") {
        LlamaConfig cfg = preset("tiny");  // 2 kv heads
        std::string e = error_of([&] { tp_grid(cfg, 4); });
        // playbook: 000.05.3 — tp 4 over 2 kv heads refused
        CHECK(contains(e, "--tp 4 must divide the model's 2 key/value heads"));
        e = error_of([&] { ParallelGrid(make_world_comm(CommBackend::mpi), GridShape{1, 1, 1, 2}, &cfg); });
        CHECK(contains(e, "= 2 ranks, but the job has 4"));
    }
}
