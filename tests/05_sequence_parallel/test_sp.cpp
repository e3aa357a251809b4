// test_sp.cpp — chapter 05, sequence parallelism: the SP boundary around column/row linears and the
// vocab-parallel embedding against the unsharded computation; a model step; N training steps of tp 2 and
// tp 4 with SP, and tp 2 × dp 2 with SP over DP, ZeRO-1 and ZeRO-3, against one rank; the bytes per layer
// (the same 8(t-1)/t·s·b·h as TP); the norm / residual regions' activation bytes exactly 1/t of TP's; the
// errors when the tokens do not split evenly and when the model was not laid out for SP.
// The helpers are tp_testing.hpp's, with SP's pieces from sp_testing.hpp (sp_parts()).
// Playbook: "Sequence parallelism". Run: `make test CH=05`, or
//   mpirun --allow-run-as-root --oversubscribe -np 2 build/bin/tests_05 -ts='ch05 np2'
#include "../../05_sequence_parallel/sequence_parallel.hpp"
#include "../../04_tensor_parallel/vocab_parallel.hpp"
#include "../../common/formulas.hpp"
#include "../../common/grid.hpp"
#include "sp_testing.hpp"

using namespace penta;
using namespace penta::testing;
using namespace penta::tp_testing;

namespace {

// SP on the layout L against the same layout without SP: same traffic per layer (the formula), norm-region
// activations exactly 1/t, and both against the formula
void check_sp_bytes(Layout L, int64_t h) {
    LlamaConfig cfg = tp_config(64);
    L.sp = false;
    Run tp = run_layout(cfg, L, 1, &sp_parts());
    L.sp = true;
    Run sp = run_layout(cfg, L, 1, &sp_parts());
    check_layer_traffic(tp, L, h);
    check_layer_traffic(sp, L, h);
    const int64_t layer = llama_norm_region_activation_bytes(L.micro_batch, L.seq, h);
    INFO("norm-region activation bytes: TP " << tp.norm_region_bytes << ", SP " << sp.norm_region_bytes);
    CHECK(tp.norm_region_bytes == cfg.n_layers * layer);
    CHECK(sp.norm_region_bytes * L.tp == tp.norm_region_bytes);
    CHECK(sp.norm_region_bytes == cfg.n_layers * llama_norm_region_activation_bytes(L.micro_batch, L.seq, h, L.tp));
}

}  // namespace

TEST_SUITE("ch05 np2") {
    TEST_CASE("SP column/row-parallel linear pair and head-split attention with sequence-split input/output equal the unsharded") {
        ParallelGrid g = tp_grid(tp_config(64), 2);
        SequenceParallel b(g.tp());
        // playbook: 000.06.2 — sequence-split input/output, all-gather in, reduce-scatter out: = the unsharded pair
        check_column_row_pair(b, true);  // and its bytes: what TP's one all-reduce sends
        check_head_split_attention(b, true);
    }
    TEST_CASE("SP vocab-parallel embedding reduce-scattered along the sequence equals the full table's rows") {
        ParallelGrid g = tp_grid(tp_config(64), 2);
        SequenceParallel b(g.tp());
        check_vocab_embedding(b, 9, true);
    }
    TEST_CASE("SP model step: loss, gathered gradients (norm grads summed over tp) and logits equal one rank's") {
        for (int64_t V : {64, 63}) {
            LlamaConfig cfg = tp_config(V, V == 63);
            ParallelGrid g = tp_grid(cfg, 2);
            SequenceParallel b(g.tp());
            INFO("vocab " << V);
            // playbook: 000.06.2 — an SP model step = one rank's
            check_model_step(cfg, b, Recompute::none, true);
            check_model_step(cfg, b, Recompute::full, true);
        }
    }
    TEST_CASE("SP tp 2 trains like one rank: 6 steps, recompute none, full and offload, grad-accum 2 (vocab 63)") {
        LlamaConfig cfg = tp_config(63);
        for (Recompute rc : {Recompute::none, Recompute::full, Recompute::offload}) {
            Layout L;
            L.tp = 2, L.sp = true, L.grad_accum = 2, L.recompute = rc;
            check_trains_like_one_rank(cfg, L, 6, 1e-5, "", &sp_parts());
        }
    }
    TEST_CASE("SP bytes per layer == TP's == 8(t-1)/t·s·b·h; norm-region activations exactly 1/t (t = 2)") {
        Layout L;
        L.tp = 2;
        // playbook: 000.05.5 000.06.1 003.3.5 — bytes a layer = TP's (all-gathers and reduce-scatters only);
        //   norm-region activations exactly 1/t
        check_sp_bytes(L, 32);
    }
    TEST_CASE("SP refuses a micro-batch whose token count tp does not divide, and a model not laid out for SP") {
        LlamaConfig cfg = tp_config(64);
        ParallelGrid g = tp_grid(cfg, 2);
        SequenceParallel b(g.tp());
        ModelOptions o;
        o = tensor_parallel_options(o, g.tp());
        {  // a model whose layout does not know its norms' tokens are split would get their gradients wrong
            Model plain(cfg, Device::cpu, 1, o);
            CHECK(contains(error_of([&] { plain.set_boundary(&b); }), "ModelOptions::sequence_parallel"));
        }
        o.sequence_parallel = true;
        Model model(cfg, Device::cpu, 1, o);
        model.set_boundary(&b);
        Tensor tokens = random_tokens({3}, 64, 1);
        std::string e = error_of([&] { model.forward_logits(tokens, 1, 3); });
        CHECK(contains(e, "the 3 tokens of a micro-batch (--micro-batch × --seq) into --tp 2 equal blocks"));
    }
}

TEST_SUITE("ch05 np4") {
    TEST_CASE("SP tp 4: linear pair, embedding and model step equal one rank's") {
        LlamaConfig cfg = tp_config(66);
        ParallelGrid g = tp_grid(cfg, 4);
        SequenceParallel b(g.tp());
        check_column_row_pair(b, true);
        check_head_split_attention(b, true);
        check_vocab_embedding(b, 66, true);
        check_model_step(cfg, b, Recompute::none, true);
    }
    TEST_CASE("SP tp 4 trains like one rank: 6 steps (vocab 66, tied)") {
        LlamaConfig cfg = tp_config(66, true);
        Layout L;
        L.tp = 4, L.sp = true;
        check_trains_like_one_rank(cfg, L, 6, 1e-5, "", &sp_parts());
    }
    TEST_CASE("SP tp 2 × dp 2 trains like one rank: DP, ZeRO-1 and ZeRO-3, 6 steps (vocab 63)") {
        LlamaConfig cfg = tp_config(63);
        for (int zero : {0, 1, 3}) {
            Layout L;
            L.tp = 2, L.dp = 2, L.sp = true, L.zero = zero;
            L.micro_batch = 2, L.grad_accum = 2;
            check_trains_like_one_rank(cfg, L, 6, 1e-5, "", &sp_parts());
        }
    }
    TEST_CASE("SP bytes per layer == TP's == formula; norm-region activations exactly 1/t (tp 4, tp 2 × dp 2)") {
        Layout L;
        L.tp = 4;
        // playbook: 000.06.3 003.3.5 — SP's bytes = TP's at tp 4 and tp 2 × dp 2: nothing halved
        check_sp_bytes(L, 32);
        L.tp = 2, L.dp = 2;
        check_sp_bytes(L, 32);
    }
}
