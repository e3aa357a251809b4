// test_sharded_grads.cpp — chapter 03, ZeRO-2's gradient sink on its own (03_zero/sharded_grads.hpp): units
// declared ready in backward order over two micro-batches leave in each rank's shard exactly its part of the
// gradients summed over ranks and micro-batches; at most kMaxInFlight reduce-scatters hold their buffers at
// once; one reduce-scatter per unit per micro-batch; nothing transient left after wait_all. No model and no
// ZeRO-3: this is what grades workshop exercise 03.2 (tests/exercises/03_zero.txt), whatever 03.1's state.
// Playbook: "ZeRO-2: adding gradient partitioning". Run: `make test CH=03`, or by hand
//   mpirun -np 2 build/bin/tests_03 -ts='ch03 np2' -tc='ZeRO-2 gradient sink*'
#include <algorithm>

#include "../../03_zero/sharded_grads.hpp"
#include "../../common/data.hpp"
#include "../testing.hpp"

using namespace penta;
using namespace penta::testing;

namespace {

// rank q's gradient of the whole flat buffer in micro-batch mb: every rank can make every rank's
Tensor rank_grads(const ParamLayout& layout, int mb, int q) { return random_tensor({layout.numel}, 900 + 10 * mb + q); }

int64_t comm_bytes_now() { return mem_stats(Device::cpu).current[(int)Tag::comm]; }

// the sink over every rank of the world (2: even pieces; 3: the units' numels do not divide by 3, so the
// first numel % 3 ranks hold one element more and an offset that assumes equal pieces fails)
void check_gradient_sink() {
    auto dp = make_world_comm(CommBackend::mpi);
    const int K = dp->size(), r = dp->rank();
    LlamaConfig c = preset("tiny");
    c.vocab = kByteVocab;
    const ParamLayout layout = ParamLayout::build(c);
    const UnitShards shards(layout, K, r);
    const int units = shards.units();
    REQUIRE(units > (int)ShardedGradients::kMaxInFlight + 1);  // enough units for the bound to bite
    Tensor shard = Tensor::zeros({shards.numel()}, DType::f32, Device::cpu, Tag::grads);
    ShardedGradients sink(shards, *dp, shard);
    const int64_t comm0 = comm_bytes_now();
    const CommCounters before = dp->counters();
    std::vector<int> ready;  // units declared ready so far, in order (no wait between micro-batches)
    for (int mb = 0; mb < 2; mb++) {
        CAPTURE(mb);
        const Tensor mine = rank_grads(layout, mb, r);
        // the tied head writes into the embedding's buffer first and the embedding backward adds to it
        // last: unit 0 stays open the whole pass, declared ready at its end
        Tensor g0 = sink.grads(0);
        REQUIRE(g0.numel() == shards.unit(0).numel);
        add_inplace(g0, shards.unit_of(mine, 0), 0.5f);
        for (int u = units - 1; u >= 0; u--) {
            CAPTURE(u);
            Tensor g = sink.grads(u);  // unit 0: the same buffer again, holding the head's half
            add_inplace(g, shards.unit_of(mine, u), u == 0 ? 0.5f : 1.0f);
            sink.layer_grads_ready(u);
            ready.push_back(u);
            // in flight: at most the last kMaxInFlight units readied (their whole gradients and parts);
            // open: unit 0's buffer until it is readied itself
            int64_t bound = u == 0 ? 0 : shards.unit(0).numel * 4;
            for (size_t i = ready.size() - std::min(ready.size(), ShardedGradients::kMaxInFlight); i < ready.size(); i++)
                bound += (shards.unit(ready[i]).numel + shards.piece(ready[i]).count) * 4;
            CHECK(comm_bytes_now() - comm0 <= bound);
        }
    }
    sink.wait_all();
    CHECK(comm_bytes_now() == comm0);  // every transient buffer dropped
    const CommCounters t = dp->counters() - before;
    CHECK(t.calls[(int)CommOp::reduce_scatter] == 2 * units);  // one per unit per micro-batch
    CHECK(t.calls[(int)CommOp::all_reduce] == 0);

    // the reference: every rank's gradients of both micro-batches summed, cut to this rank's pieces
    Tensor sum = Tensor::zeros({layout.numel}, DType::f32, Device::cpu, Tag::workspace);
    for (int mb = 0; mb < 2; mb++)
        for (int q = 0; q < K; q++) add_inplace(sum, rank_grads(layout, mb, q));
    Tensor want = Tensor::zeros({shards.numel()}, DType::f32, Device::cpu, Tag::workspace);
    shards.copy_from_full(sum, want);
    check_close(shard.to_host(), want.to_host(), 1e-6, 1e-6, "ZeRO-2 gradient shard");
}

}  // namespace

TEST_SUITE("ch03 np2") {
    TEST_CASE("ZeRO-2 gradient sink alone: per-unit reduce-scatters in backward order fill each rank's shard, two at a time") {
        check_gradient_sink();
    }
}

TEST_SUITE("ch03 np3") {
    TEST_CASE("ZeRO-2 gradient sink alone at 3 ranks: uneven pieces, the first numel % 3 one element longer") {
        check_gradient_sink();
        LlamaConfig c = preset("tiny");
        c.vocab = kByteVocab;
        const ParamLayout layout = ParamLayout::build(c);
        bool uneven = false;
        for (const ParamUnit& u : layout.units) uneven |= u.numel % 3 != 0;
        CHECK(uneven);  // the input is adversarial: some unit does not divide by 3
    }
}
