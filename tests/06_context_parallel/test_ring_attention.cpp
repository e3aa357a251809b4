// test_ring_attention.cpp — chapter 06, the kernel: ring and all-gather attention over cp ranks against
// attention over the whole sequence on one rank — output, log-sum-exp, dQ, dK, dV of every held token — for
// cp 2 and 4 × contiguous / zig-zag × GQA, several micro-batch shapes; the bytes each variant sends beside
// its formula; the causal work per rank (zig-zag balanced to the block, contiguous r+1 blocks); sequence
// lengths that do not cut into equal chunks refused naming --seq; the contiguous and zig-zag positions.
// Playbook: "Context parallelism". Run: `make test CH=06`, or
//   mpirun --allow-run-as-root --oversubscribe -np 4 build/bin/tests_06 -ts='ch06 np4'
#include "../../06_context_parallel/ring_attention.hpp"
#include "../../common/ops.hpp"
#include "../testing.hpp"

using namespace penta;
using namespace penta::testing;

namespace {

struct Shape4 {
    int64_t B, T, nh, nkv, hd;
};

// tokens [t0, t0 + len) of every sequence of the host tensor x (B, T, row) appended to out
void append_tokens(const std::vector<float>& x, int64_t B, int64_t T, int64_t row, int64_t t0, int64_t len,
                   std::vector<std::vector<float>>& per_b) {
    for (int64_t b = 0; b < B; b++)
        per_b[b].insert(per_b[b].end(), x.begin() + (b * T + t0) * row, x.begin() + (b * T + t0 + len) * row);
}
// the rows of this rank's tokens (positions) of x (B, T, row), in the order the rank holds them
std::vector<float> held(const std::vector<float>& x, int64_t B, int64_t T, int64_t row, const std::vector<int32_t>& pos) {
    std::vector<std::vector<float>> per_b(B);
    for (int32_t p : pos) append_tokens(x, B, T, row, p, 1, per_b);
    std::vector<float> out;
    for (auto& v : per_b) out.insert(out.end(), v.begin(), v.end());
    return out;
}
// the same for lse (B, nh, T): the held positions of each (b, head) row
std::vector<float> held_lse(const std::vector<float>& lse, int64_t rows, int64_t T, const std::vector<int32_t>& pos) {
    std::vector<float> out;
    for (int64_t i = 0; i < rows; i++)
        for (int32_t p : pos) out.push_back(lse[i * T + p]);
    return out;
}

// One forward and backward of cp attention on this rank's tokens against the whole sequence's, checked
// for every held token; and the bytes the cp group counted for it against the variant's formula.
void check_cp_attention(Comm& cp, const Shape4& s, CpShard shard, CpAttn variant) {
    const int P = cp.size();
    INFO("cp " << P << " " << cp_shard_name(shard) << " " << cp_attn_name(variant) << ": B " << s.B << " T " << s.T
               << " heads " << s.nh << "/" << s.nkv << " hd " << s.hd);
    // the whole problem, the same on every rank (same seeds)
    Tensor q = random_tensor({s.B, s.T, s.nh, s.hd}, 1), k = random_tensor({s.B, s.T, s.nkv, s.hd}, 2);
    Tensor v = random_tensor({s.B, s.T, s.nkv, s.hd}, 3), dout = random_tensor({s.B, s.T, s.nh, s.hd}, 4);
    Tensor out = Tensor::zeros(q.shape, DType::f32, Device::cpu, Tag::workspace);
    Tensor lse = Tensor::zeros({s.B, s.nh, s.T}, DType::f32, Device::cpu, Tag::workspace);
    attention_forward_naive(q, k, v, out, lse, nullptr);  // the reference: the other kernel, on one rank
    Tensor dq = Tensor::zeros(q.shape, DType::f32, Device::cpu, Tag::workspace), dk = Tensor::zeros(k.shape, DType::f32,
           Device::cpu, Tag::workspace), dv = Tensor::zeros(k.shape, DType::f32, Device::cpu, Tag::workspace);
    attention_backward_naive(dout, q, k, v, out, lse, nullptr, dq, dk, dv);

    ContextParallelAttention attn(cp, shard, variant, s.T);
    const std::vector<int32_t> pos = attn.sharder().positions(s.T);
    const int64_t Tl = (int64_t)pos.size(), qrow = s.nh * s.hd, krow = s.nkv * s.hd;
    REQUIRE(Tl * P == s.T);
    auto mine = [&](const Tensor& x, int64_t row, const Shape& shape) {
        return Tensor::from_host(held(x.to_host(), s.B, s.T, row, pos), shape, Device::cpu);
    };
    Tensor ql = mine(q, qrow, {s.B, Tl, s.nh, s.hd}), kl = mine(k, krow, {s.B, Tl, s.nkv, s.hd});
    Tensor vl = mine(v, krow, {s.B, Tl, s.nkv, s.hd}), doutl = mine(dout, qrow, {s.B, Tl, s.nh, s.hd});
    Tensor positions = Tensor::from_host_i32(pos, {Tl}, Device::cpu);
    Tensor outl = Tensor::zeros(ql.shape, DType::f32, Device::cpu, Tag::workspace);
    Tensor lsel = Tensor::zeros({s.B, s.nh, Tl}, DType::f32, Device::cpu, Tag::workspace);
    const double bytes0 = cp.counters().total_bytes();
    attn.attend(ql, kl, vl, positions, outl, lsel, nullptr);
    const double fwd_bytes = cp.counters().total_bytes() - bytes0;
    Tensor dql = Tensor::zeros(ql.shape, DType::f32, Device::cpu, Tag::workspace);
    Tensor dkl = Tensor::zeros(kl.shape, DType::f32, Device::cpu, Tag::workspace);
    Tensor dvl = Tensor::zeros(kl.shape, DType::f32, Device::cpu, Tag::workspace);
    attn.attend_backward(doutl, ql, kl, vl, positions, outl, lsel, nullptr, dql, dkl, dvl);
    const double bwd_bytes = cp.counters().total_bytes() - bytes0 - fwd_bytes;

    check_close(outl.to_host(), held(out.to_host(), s.B, s.T, qrow, pos), 1e-5, 1e-6, "out");
    check_close(lsel.to_host(), held_lse(lse.to_host(), s.B * s.nh, s.T, pos), 1e-5, 1e-6, "lse");
    check_close(dql.to_host(), held(dq.to_host(), s.B, s.T, qrow, pos), 1e-5, 1e-5, "dq");
    check_close(dkl.to_host(), held(dk.to_host(), s.B, s.T, krow, pos), 1e-5, 1e-5, "dk");
    check_close(dvl.to_host(), held(dv.to_host(), s.B, s.T, krow, pos), 1e-5, 1e-5, "dv");

    // M: this rank's K and V, f32. Ring: (cp-1) M forward, (2cp-1) M backward; allgather: (cp-1) M, 2(cp-1) M
    const double M = 2.0 * s.B * Tl * s.nkv * s.hd * 4;
    CHECK(fwd_bytes == (P - 1) * M);
    CHECK(bwd_bytes == (variant == CpAttn::ring ? (2 * P - 1) * M : 2 * (P - 1) * M));
    // the work: exactly the causal blocks of this rank's chunks, the future ones skipped
    const CausalWork w = causal_work(attn.sharder(), cp.rank(), s.T);
    CHECK(attn.stats().blocks == w.blocks);
    CHECK(attn.stats().pairs == w.pairs);
    CHECK(attn.stats().blocks + attn.stats().skipped == (int64_t)attn.sharder().chunks_of(0).size() * attn.sharder().chunks());
}

void check_all_variants(Comm& cp) {
    const Shape4 shapes[] = {{2, 8 * cp.size(), 4, 2, 8}, {1, 4 * cp.size(), 2, 1, 4}, {3, 12 * cp.size(), 6, 3, 4}};
    for (const Shape4& s : shapes)
        for (CpShard shard : {CpShard::contiguous, CpShard::zigzag})
            for (CpAttn variant : {CpAttn::ring, CpAttn::allgather}) check_cp_attention(cp, s, shard, variant);
}

}  // namespace

TEST_SUITE("ch06 np1") {
    TEST_CASE("context sharding: contiguous chunk r, zig-zag chunks r and 2cp-1-r, each token at its global position") {
        CHECK(ContextSharder(4, 1, CpShard::contiguous).positions(8) == std::vector<int32_t>{2, 3});
        CHECK(ContextSharder(4, 1, CpShard::zigzag).positions(16) == std::vector<int32_t>{2, 3, 12, 13});
        CHECK(ContextSharder(2, 0, CpShard::zigzag).positions(8) == std::vector<int32_t>{0, 1, 6, 7});
        CHECK(ContextSharder(1, 0, CpShard::zigzag).positions(4) == std::vector<int32_t>{0, 1, 2, 3});
        // every position held exactly once over the cp ranks
        for (CpShard sh : {CpShard::contiguous, CpShard::zigzag}) {
            std::vector<int> seen(24, 0);
            for (int r = 0; r < 3; r++)
                for (int32_t p : ContextSharder(3, r, sh).positions(24)) seen[p]++;
            CHECK(seen == std::vector<int>(24, 1));
        }
    }
    TEST_CASE("a --seq that does not cut into equal chunks is refused naming --seq and the rule") {
        const std::string e = error_of([] { ContextSharder(4, 0, CpShard::zigzag).positions(20); });
        CHECK(contains(e, "--seq 20"));
        CHECK(contains(e, "multiple of 8"));
        CHECK(contains(error_of([] { ContextSharder(3, 0, CpShard::contiguous).check_seq(10); }), "multiple of 3"));
        CHECK(error_of([] { ContextSharder(4, 0, CpShard::contiguous).check_seq(20); }).empty());
        CHECK(contains(error_of([] { parse_cp_shard("striped"); }), "--cp-shard 'striped'"));
        CHECK(contains(error_of([] { parse_cp_attn("a2a"); }), "--cp-attn 'a2a'"));
    }
    TEST_CASE("causal work: zig-zag gives every rank 2cp+1 blocks, contiguous gives rank r r+1 (the playbook's imbalance)") {
        for (int P : {2, 4, 8}) {
            for (int r = 0; r < P; r++) {
                // playbook: 000.07.4 — zig-zag: every rank 2cp+1 causal blocks; contiguous: rank r r+1
                CHECK(causal_work(ContextSharder(P, r, CpShard::zigzag), r, 16 * P).blocks == 2 * P + 1);
                CHECK(causal_work(ContextSharder(P, r, CpShard::contiguous), r, 16 * P).blocks == r + 1);
            }
            // and in (query, key) pairs zig-zag is exactly even too: chunks a and 2P-1-a see 2P chunks' worth
            const int64_t c = 8, T = 2 * P * c;
            const int64_t want = causal_work(ContextSharder(P, 0, CpShard::zigzag), 0, T).pairs;
            for (int r = 1; r < P; r++) CHECK(causal_work(ContextSharder(P, r, CpShard::zigzag), r, T).pairs == want);
        }
    }
}

TEST_SUITE("ch06 np2") {
    TEST_CASE("ring and all-gather attention on cp 2 equal one rank's: out, lse, dq, dk, dv; bytes = formula") {
        auto world = make_world_comm(CommBackend::mpi);
        // playbook: 000.07.2 000.07.3 — ring and all-gather = one rank's out, lse, dq, dk, dv; the ring's forward
        //   sends (cp-1)M
        check_all_variants(*world);
    }
}

TEST_SUITE("ch06 np4") {
    TEST_CASE("ring and all-gather attention on cp 4 equal one rank's: out, lse, dq, dk, dv; bytes = formula") {
        auto world = make_world_comm(CommBackend::mpi);
        check_all_variants(*world);
    }
}
