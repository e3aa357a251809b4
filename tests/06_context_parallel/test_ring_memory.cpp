// test_ring_memory.cpp — chapter 06, what ring attention holds: the rank's own K/V block and ONE more, the
// block arriving from the previous rank while it attends to the one here — measured by the allocator's
// workspace peak over one forward, against the all-gather variant's (every rank's block at once) on the same
// tokens. Seed 000 §07: "All-to-All (Ring): passes one piece at a time — memory-friendly (each GPU stores only
// one extra piece)". Its name for the ring is "All-to-All"; this code's ring is send/recv between neighbours
// (06_context_parallel/ring_attention.hpp), and the all-to-all of chapter 06's README is Ulysses'.
// Playbook: "Context parallelism" (AllGather vs All-to-All). Run: `make test CH=06`, or
//   mpirun --allow-run-as-root --oversubscribe -np 4 build/bin/tests_06 -ts='ch06 np4' -tc='*extra K/V block*'
#include "../../06_context_parallel/ring_attention.hpp"
#include "../../common/ops.hpp"
#include "../testing.hpp"

using namespace penta;
using namespace penta::testing;

namespace {

// One forward of cp attention over this rank's Tl = T/cp tokens of B sequences: the Tag::workspace peak
// above what was in use before it, and the bytes of this rank's packed K/V block (K and V of its tokens)
struct ForwardPeak {
    int64_t peak = 0, block = 0;
};

ForwardPeak forward_peak(Comm& cp, CpAttn variant, int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd) {
    ContextParallelAttention attn(cp, CpShard::zigzag, variant, T);
    const std::vector<int32_t> pos = attn.sharder().positions(T);
    const int64_t Tl = (int64_t)pos.size();
    Tensor q = random_tensor({B, Tl, nh, hd}, 1 + cp.rank()), k = random_tensor({B, Tl, nkv, hd}, 11 + cp.rank());
    Tensor v = random_tensor({B, Tl, nkv, hd}, 21 + cp.rank());
    Tensor positions = Tensor::from_host_i32(pos, {Tl}, Device::cpu);
    Tensor out = Tensor::zeros(q.shape, DType::f32, Device::cpu, Tag::workspace);        // (B, Tl, nh, hd)
    Tensor lse = Tensor::zeros({B, nh, Tl}, DType::f32, Device::cpu, Tag::workspace);    // (B, nh, Tl)
    const int64_t before = mem_stats(Device::cpu).current[(int)Tag::workspace];
    mem_reset_peak(Device::cpu);
    attn.attend(q, k, v, positions, out, lse, nullptr);
    ForwardPeak r;
    r.peak = mem_stats(Device::cpu).peak[(int)Tag::workspace] - before;
    r.block = 2 * B * Tl * nkv * hd * 4;  // K and V of this rank's tokens, f32
    return r;
}

// The ring holds its own block and one more; the all-gather every rank's block besides its own packed copy:
// on the same tokens the all-gather's peak is exactly (cp - 1) blocks above the ring's, and the ring's peak
// does not grow with cp when a rank's tokens stay the same (T = cp · Tl)
void ring_holds_one_extra_block(Comm& cp) {
    const int P = cp.size();
    const int64_t B = 2, Tl = 32, nh = 4, nkv = 2, hd = 8;
    const ForwardPeak ring = forward_peak(cp, CpAttn::ring, B, P * Tl, nh, nkv, hd);
    const ForwardPeak gathered = forward_peak(cp, CpAttn::allgather, B, P * Tl, nh, nkv, hd);
    MESSAGE("cp " << P << ": ring peak " << ring.peak << " B, all-gather peak " << gathered.peak << " B, one block "
               << ring.block << " B");
    REQUIRE(ring.block == gathered.block);
    // playbook: 000.07.5 — ring: own block + 1 arriving; all-gather: own + cp blocks; the difference, by the allocator
    CHECK(gathered.peak - ring.peak == (int64_t)(P - 1) * ring.block);
    CHECK(ring.peak >= 2 * ring.block);  // its own packed block and the one arriving
}

}  // namespace

TEST_SUITE("ch06 np2") {
    TEST_CASE("ring attention holds one extra K/V block (the arriving one); the all-gather holds all cp, cp 2") {
        auto world = make_world_comm(CommBackend::mpi);
        ring_holds_one_extra_block(*world);
    }
}

TEST_SUITE("ch06 np4") {
    TEST_CASE("ring attention holds one extra K/V block (the arriving one); the all-gather holds all cp, cp 4") {
        auto world = make_world_comm(CommBackend::mpi);
        ring_holds_one_extra_block(*world);
    }
}
