// test_comm.cpp — every Comm collective against its definition, the ring byte counters, split(), and
// chapter 02's ring all-reduce built from send/recv. (ParallelGrid: test_grid.cpp.)
//
// Each rank makes its input from its rank by a deterministic rule, so every rank can compute what every
// collective must return. Inputs are small integers where the result must be exact (sums of integers are
// exact in f32 in any order), random normals where the ring all-reduce meets a different summation order.
// Sizes include 0, 1 and sizes that 2 and 4 do not divide (7, 1000 over 3 parts, 4099), since parts are
// uneven then (comm.hpp: the first M % K ranks hold one element more).
//   mpirun -np 4 build/bin/tests_02 -ts='ch02 np4' -tc='*all_reduce*'      (also np1, np2, np3; `make test CH=02`)
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <numeric>

#include "../../02_data_parallel/ring_all_reduce.hpp"
#include "../../common/comm.hpp"
#include "../../common/runtime.hpp"
#include "../testing.hpp"

using namespace penta;
using penta::testing::check_close;
using penta::testing::comm_members;
using penta::testing::contains;
using penta::testing::error_of;
using penta::testing::random_tensor;

namespace {

const int64_t kSizes[] = {0, 1, 7, 1000, 4099};

std::unique_ptr<Comm> world() { return make_world_comm(CommBackend::mpi); }

// A build without MPI (MPI=0) has only the one-rank Comm, which has no messages, not even to itself: the
// cases that send skip there (on one rank of an MPI build they send to themselves through MPI).
#define SKIP_WITHOUT_MPI() \
    if (!mpi_enabled()) SKIP_TEST("send/recv: a build without MPI has no messages, not even to itself")

// rank r's input element i: an integer in [-11, 11], different per rank, element and salt
float value(int rank, int64_t i, int salt) { return float((rank * 131 + i * 7 + salt * 17) % 23 - 11); }

// the sum and the max of value(q, i, salt) over the K ranks q: what all_reduce must give
float rank_sum(int K, int64_t i, int salt) {
    float s = 0;
    for (int q = 0; q < K; q++) s += value(q, i, salt);
    return s;
}
float rank_max(int K, int64_t i, int salt) {
    float m = value(0, i, salt);
    for (int q = 1; q < K; q++) m = std::max(m, value(q, i, salt));
    return m;
}

std::vector<float> expected(int64_t n, const std::function<float(int64_t)>& f) {
    std::vector<float> v(n);
    for (int64_t i = 0; i < n; i++) v[i] = f(i);
    return v;
}

// a 1-D tensor of dtype dt (f32, i32 or bf16; the values are integers, exact in all three)
Tensor make(DType dt, int64_t n, const std::function<float(int64_t)>& f) {
    std::vector<float> v = expected(n, f);
    if (dt == DType::i32) return Tensor::from_host_i32(std::vector<int32_t>(v.begin(), v.end()), {n}, Device::cpu);
    return Tensor::from_host(v, {n}, Device::cpu, Tag::workspace, dt);
}

// the rank that owns element i of a buffer of M split over K parts
int owner(int64_t M, int K, int64_t i) {
    int q = 0;
    while (part_start(M, K, q + 1) <= i) q++;
    return q;
}

std::string what(const char* op, DType dt, int64_t M, int K) {
    return strfmt("%s %s M=%lld K=%d", op, dtype_name(dt), (long long)M, K);
}

// ---- collectives against their definitions ------------------------------------------------------------

void all_reduce_sum_and_max() {
    auto comm = world();
    const int K = comm->size(), r = comm->rank();
    for (DType dt : {DType::f32, DType::i32})
        for (int64_t M : kSizes)
            for (ReduceOp op : {ReduceOp::sum, ReduceOp::max}) {
                Tensor x = make(dt, M, [&](int64_t i) { return value(r, i, 1); });
                comm->all_reduce(x, op);
                auto want = expected(M, [&](int64_t i) { return op == ReduceOp::sum ? rank_sum(K, i, 1) : rank_max(K, i, 1); });
                // playbook: 000.A.3 — every rank ends with the element-wise sum (max)
                check_close(x.to_host(), want, 0, 0, what(op == ReduceOp::sum ? "all_reduce sum" : "all_reduce max", dt, M, K));
            }
}

void reduce_scatter_sums_each_part() {
    auto comm = world();
    const int K = comm->size(), r = comm->rank();
    for (DType dt : {DType::f32, DType::i32})
        for (int64_t M : kSizes) {
            const int64_t start = part_start(M, K, r);
            Tensor in = make(dt, M, [&](int64_t i) { return value(r, i, 2); });
            Tensor out = make(dt, part_count(M, K, r), [](int64_t) { return 99.0f; });
            comm->reduce_scatter(in, out);
            auto want = expected(part_count(M, K, r), [&](int64_t j) { return rank_sum(K, start + j, 2); });
            // playbook: 000.04.5 000.A.7 — rank r ends with the sum of its part only
            check_close(out.to_host(), want, 0, 0, what("reduce_scatter", dt, M, K));
            check_close(in.to_host(), expected(M, [&](int64_t i) { return value(r, i, 2); }), 0, 0,
                        what("reduce_scatter leaves its input alone", dt, M, K));
        }
}

void all_gather_concatenates_parts() {
    auto comm = world();
    const int K = comm->size(), r = comm->rank();
    for (DType dt : {DType::f32, DType::i32, DType::bf16})
        for (int64_t M : kSizes) {
            const int64_t start = part_start(M, K, r);
            Tensor in = make(dt, part_count(M, K, r), [&](int64_t j) { return value(r, start + j, 3); });
            Tensor out = make(dt, M, [](int64_t) { return 99.0f; });
            comm->all_gather(in, out);
            // playbook: 000.A.5 — every rank ends with the parts concatenated
            check_close(out.to_host(), expected(M, [&](int64_t i) { return value(owner(M, K, i), i, 3); }), 0, 0,
                        what("all_gather", dt, M, K));
        }
}

// ZeRO keeps its shard inside the full flat buffer: the part handed in is a view of the output (all_gather)
// or the output is a view of the input (reduce_scatter). MPI forbids overlapping buffers, so the backend
// handles these itself (MPI_IN_PLACE, or a copy of the input). Open MPI 4.1 happens to tolerate the
// overlap, so here this checks the results; MPICH would reject the overlapping call outright.
void collectives_in_place() {
    auto comm = world();
    const int K = comm->size(), r = comm->rank();
    for (int64_t M : kSizes) {
        const int64_t start = part_start(M, K, r), n = part_count(M, K, r);
        Tensor full = make(DType::f32, M, [&](int64_t i) { return value(r, i, 4); });
        Tensor mine = full.flat(start, n);
        comm->reduce_scatter(full, mine);
        auto sums = expected(M, [&](int64_t i) { return rank_sum(K, i, 4); });
        check_close(mine.to_host(), std::vector<float>(sums.begin() + start, sums.begin() + start + n), 0, 0,
                    what("reduce_scatter into a view of its input", DType::f32, M, K));
        auto rest = full.to_host();  // the other parts of the input are as they were
        check_close(rest, expected(M, [&](int64_t i) { return i >= start && i < start + n ? rest[i] : value(r, i, 4); }),
                    0, 0, what("reduce_scatter in place leaves the other parts alone", DType::f32, M, K));
        comm->all_gather(mine, full);
        check_close(full.to_host(), sums, 0, 0, what("all_gather from a view of its output", DType::f32, M, K));
    }
}

void broadcast_from_each_root() {
    auto comm = world();
    const int K = comm->size(), r = comm->rank();
    for (DType dt : {DType::f32, DType::i32, DType::bf16})
        for (int root = 0; root < K; root++)
            for (int64_t M : kSizes) {
                Tensor x = make(dt, M, [&](int64_t i) { return value(r, i, 5); });
                comm->broadcast(x, root);
                // playbook: 000.A.1 — every rank ends with the root's buffer
                check_close(x.to_host(), expected(M, [&](int64_t i) { return value(root, i, 5); }), 0, 0,
                            what(strfmt("broadcast from root %d", root).c_str(), dt, M, K));
            }
    CHECK(contains(error_of([&] {
                       Tensor x = make(DType::f32, 1, [](int64_t) { return 0.0f; });
                       comm->broadcast(x, K);
                   }),
                   strfmt("broadcast root %d is not a rank", K)));
}

void send_recv_ring_and_pairwise() {
    SKIP_WITHOUT_MPI();
    auto comm = world();
    const int K = comm->size(), r = comm->rank(), next = (r + 1) % K, prev = (r + K - 1) % K;
    for (DType dt : {DType::f32, DType::i32, DType::bf16})
        for (int64_t M : kSizes) {
            // ring: everyone sends right and receives from the left at once (send started first: no deadlock)
            Tensor x = make(dt, M, [&](int64_t i) { return value(r, i, 6); });
            Tensor got = make(dt, M, [](int64_t) { return 99.0f; });
            CommHandle s = comm->send_async(x, next, 3);
            comm->recv(got, prev, 3);
            s.wait();
            check_close(got.to_host(), expected(M, [&](int64_t i) { return value(prev, i, 6); }), 0, 0,
                        what("send/recv ring", dt, M, K));
        }
    // pairwise: every rank sends a different buffer to every other rank; the tag tells two buffers from
    // the same peer apart
    const int64_t M = 1000;
    std::vector<Tensor> out;
    std::vector<CommHandle> hs;
    for (int p = 0; p < K; p++) {
        if (p == r) continue;
        for (int t = 0; t < 2; t++) {
            out.push_back(make(DType::f32, M, [&](int64_t i) { return value(r * K + p, i, 7 + t); }));
            hs.push_back(comm->send_async(out.back(), p, t));
        }
    }
    for (int p = K - 1; p >= 0; p--) {  // receive in another order than the peers send
        if (p == r) continue;
        for (int t = 1; t >= 0; t--) {
            Tensor g = make(DType::f32, M, [](int64_t) { return 99.0f; });
            comm->recv(g, p, t);
            check_close(g.to_host(), expected(M, [&](int64_t i) { return value(p * K + r, i, 7 + t); }), 0, 0,
                        strfmt("pairwise recv from %d tag %d", p, t));
        }
    }
    for (auto& h : hs) h.wait();
}

// element e of the chunk that rank src sends to rank dst: distinct for every (src, dst, e)
float a2a_value(int src, int dst, int64_t e) { return float(src * 100000 + dst * 10000 + e); }

void all_to_all_swaps_chunks() {
    auto comm = world();
    const int K = comm->size(), r = comm->rank();
    for (DType dt : {DType::f32, DType::i32})
        for (int64_t c : {0, 1, 7, 1000}) {
            Tensor in = make(dt, K * c, [&](int64_t i) { return a2a_value(r, int(i / c), i % c); });
            Tensor out = make(dt, K * c, [](int64_t) { return -1.0f; });
            comm->all_to_all(in, out);
            // chunk q of out is what rank q sent to this rank
            check_close(out.to_host(), expected(K * c, [&](int64_t i) { return a2a_value(int(i / c), r, i % c); }), 0,
                        0, what("all_to_all", dt, K * c, K));
        }
}

// uneven counts: rank s sends count(s, d) elements to rank d (0 included), each part followed by a gap
void all_to_all_v_uneven() {
    auto comm = world();
    const int K = comm->size(), r = comm->rank();
    for (int64_t scale : {1, 300}) {
        auto count = [&](int s, int d) { return int64_t((s * 3 + d * 5 + 1) % 4) * scale; };
        std::vector<int64_t> sc(K), so(K), rc(K), ro(K);
        int64_t in_n = 0, out_n = 0;
        for (int q = 0; q < K; q++) {
            sc[q] = count(r, q), so[q] = in_n, in_n += sc[q] + 1;   // one unsent element after each part
            rc[q] = count(q, r), ro[q] = out_n, out_n += rc[q] + 2;  // two untouched elements after each part
        }
        for (DType dt : {DType::f32, DType::i32}) {
            std::vector<float> in_v(in_n, -5.0f), want(out_n, -1.0f);
            for (int q = 0; q < K; q++) {
                for (int64_t e = 0; e < sc[q]; e++) in_v[so[q] + e] = a2a_value(r, q, e);
                for (int64_t e = 0; e < rc[q]; e++) want[ro[q] + e] = a2a_value(q, r, e);
            }
            Tensor in = make(dt, in_n, [&](int64_t i) { return in_v[i]; });
            Tensor out = make(dt, out_n, [](int64_t) { return -1.0f; });
            comm->reset_counters();
            comm->all_to_all_v(in, sc, so, out, rc, ro);
            check_close(out.to_host(), want, 0, 0, what("all_to_all_v (gaps keep their values)", dt, out_n, K));
            // counted: the bytes that leave this rank, i.e. every part but the one to itself
            const double sent = double(std::accumulate(sc.begin(), sc.end(), int64_t(0)) - sc[r]) * 4;
            CHECK(comm->counters().bytes[(int)CommOp::all_to_all] == sent);
            CHECK(comm->counters().calls[(int)CommOp::all_to_all] == 1);
        }
    }
}

// No rank leaves a barrier before every rank has entered it. Each rank creates a file, then passes the
// barrier, then looks for every rank's file: without the barrier a slower rank's file may be missing.
void barrier_waits_for_everyone() {
    auto comm = world();
    const int K = comm->size(), r = comm->rank();
    Tensor id = Tensor::from_host_i32({(int32_t)getpid()}, {1}, Device::cpu);
    comm->broadcast(id, 0);  // one directory for the whole job, named by rank 0's process id
    const std::string dir = strfmt("/tmp/penta_barrier_test_%d", id.to_host_i32()[0]);
    if (r == 0) mkdir(dir.c_str(), 0700);
    comm->barrier();
    for (int round = 0; round < 3; round++) {
        std::fclose(std::fopen(strfmt("%s/%d_%d", dir.c_str(), round, r).c_str(), "w"));
        comm->barrier();
        for (int q = 0; q < K; q++)
            // playbook: 000.A.9 — every rank's file of the round exists when any rank leaves the barrier
            CHECK_MESSAGE(access(strfmt("%s/%d_%d", dir.c_str(), round, q).c_str(), F_OK) == 0,
                          "round " << round << ": rank " << q << "'s file is missing after the barrier");
    }
    comm->barrier();  // every rank has looked; rank 0 cleans up
    if (r == 0) {
        for (int round = 0; round < 3; round++)
            for (int q = 0; q < K; q++) std::remove(strfmt("%s/%d_%d", dir.c_str(), round, q).c_str());
        rmdir(dir.c_str());
    }
    CHECK(comm->counters().calls[(int)CommOp::barrier] == 5);
    CHECK(comm->counters().bytes[(int)CommOp::barrier] == 0);
}

// ---- asynchronous forms -----------------------------------------------------------------------------------

void async_waited_in_any_order() {
    SKIP_WITHOUT_MPI();
    auto comm = world();
    const int K = comm->size(), r = comm->rank(), next = (r + 1) % K, prev = (r + K - 1) % K;
    const int64_t M = 4099, start = part_start(M, K, r);
    Tensor a = make(DType::f32, M, [&](int64_t i) { return value(r, i, 10); });
    Tensor part = make(DType::f32, part_count(M, K, r), [&](int64_t j) { return value(r, start + j, 11); });
    Tensor gathered = make(DType::f32, M, [](int64_t) { return 99.0f; });
    Tensor b = make(DType::i32, 7, [&](int64_t i) { return value(r, i, 12); });
    Tensor out = make(DType::f32, 1000, [&](int64_t i) { return value(r, i, 13); });
    Tensor in = make(DType::f32, 1000, [](int64_t) { return 99.0f; });
    Tensor m = make(DType::f32, 7, [&](int64_t i) { return value(r, i, 14); });
    // collectives start in the same order on every rank (MPI's rule); they may finish in any order
    std::vector<CommHandle> hs;
    hs.push_back(comm->all_reduce_async(a));
    hs.push_back(comm->all_gather_async(part, gathered));
    hs.push_back(comm->broadcast_async(b, K - 1));
    hs.push_back(comm->recv_async(in, prev, 4));
    hs.push_back(comm->send_async(out, next, 4));
    hs.push_back(comm->all_reduce_async(m, ReduceOp::max));
    for (auto& h : hs) CHECK(h.pending());
    // even ranks wait last-started first, odd ranks in a shuffled order
    const std::vector<int> order = r % 2 == 0 ? std::vector<int>{5, 4, 3, 2, 1, 0} : std::vector<int>{3, 0, 5, 1, 4, 2};
    for (int i : order) hs[i].wait();
    for (auto& h : hs) {
        CHECK_FALSE(h.pending());
        h.wait();  // waiting twice does nothing
    }
    check_close(a.to_host(), expected(M, [&](int64_t i) { return rank_sum(K, i, 10); }), 0, 0, "async all_reduce");
    check_close(gathered.to_host(), expected(M, [&](int64_t i) { return value(owner(M, K, i), i, 11); }), 0, 0,
                "async all_gather");
    check_close(b.to_host(), expected(7, [&](int64_t i) { return value(K - 1, i, 12); }), 0, 0, "async broadcast");
    check_close(in.to_host(), expected(1000, [&](int64_t i) { return value(prev, i, 13); }), 0, 0, "async recv");
    check_close(m.to_host(), expected(7, [&](int64_t i) { return rank_max(K, i, 14); }), 0, 0, "async all_reduce max");
}

// test() is false while the operation cannot have finished, and true (the handle done) once it has.
void test_reports_completion() {
    SKIP_WITHOUT_MPI();
    auto comm = world();
    const int K = comm->size(), r = comm->rank(), next = (r + 1) % K, prev = (r + K - 1) % K;
    Tensor got = make(DType::f32, 1000, [](int64_t) { return 99.0f; });
    CommHandle recv = comm->recv_async(got, prev, 5);
    // the left neighbour sends only after the barrier below, so this receive cannot be complete yet
    CHECK_FALSE(recv.test());
    CHECK(recv.pending());
    comm->barrier();
    Tensor x = make(DType::f32, 1000, [&](int64_t i) { return value(r, i, 15); });
    CommHandle send = comm->send_async(x, next, 5);
    while (!recv.test()) {
    }  // MPI makes progress inside test(), so this ends once the message is here
    CHECK_FALSE(recv.pending());
    check_close(got.to_host(), expected(1000, [&](int64_t i) { return value(prev, i, 15); }), 0, 0,
                "recv completed through test()");
    send.wait();

    Tensor y = make(DType::f32, 4099, [&](int64_t i) { return value(r, i, 16); });
    CommHandle ar = comm->all_reduce_async(y);
    while (!ar.test()) {
    }
    check_close(y.to_host(), expected(4099, [&](int64_t i) { return rank_sum(K, i, 16); }), 0, 0,
                "all_reduce completed through test()");
    CommHandle none;
    CHECK(none.test());  // a default handle has nothing in flight
    none.wait();
}

// ---- counters: the ring algorithm's accounting -------------------------------------------------------------

void counters_follow_ring_accounting() {
    SKIP_WITHOUT_MPI();
    auto comm = world();
    const int K = comm->size(), r = comm->rank(), next = (r + 1) % K, prev = (r + K - 1) % K;
    const int64_t M = 1000 * K;   // elements; K divides M, so every part has M/K
    const double B = 4.0 * M;     // bytes of the f32 buffer
    const double f = double(K - 1) / K, once = K > 1 ? 1 : 0;  // a group of one sends nothing
    Tensor x = make(DType::f32, M, [&](int64_t i) { return value(r, i, 20); });
    Tensor part = make(DType::f32, M / K, [](int64_t) { return 0.0f; });
    const CommCounters& c = comm->counters();
    auto bytes = [&](CommOp op) { return c.bytes[(int)op]; };
    auto calls = [&](CommOp op) { return c.calls[(int)op]; };

    comm->all_reduce(x);
    CHECK(bytes(CommOp::all_reduce) == 2 * f * B);
    CHECK(calls(CommOp::all_reduce) == 1);
    comm->all_reduce(x, ReduceOp::max);
    CHECK(bytes(CommOp::all_reduce) == 4 * f * B);
    CHECK(calls(CommOp::all_reduce) == 2);
    comm->reduce_scatter(x, part);
    // playbook: 000.04.4 — a reduce-scatter counts (K-1)/K·M, half an all-reduce's 2(K-1)/K·M
    CHECK(bytes(CommOp::reduce_scatter) == f * B);  // M counts the whole buffer, not the part
    comm->all_gather(part, x);
    CHECK(bytes(CommOp::all_gather) == f * B);
    comm->broadcast(x, 0);
    CHECK(bytes(CommOp::broadcast) == once * B);
    CommHandle s = comm->send_async(x, next);
    comm->recv(x, prev);
    s.wait();
    CHECK(bytes(CommOp::send) == B);
    CHECK(calls(CommOp::recv) == 1);
    CHECK(bytes(CommOp::recv) == 0);  // the sender counted them
    Tensor y = make(DType::f32, M, [](int64_t) { return 0.0f; });
    comm->all_to_all(x, y);
    CHECK(bytes(CommOp::all_to_all) == f * B);
    comm->barrier();
    CHECK(calls(CommOp::barrier) == 1);
    CHECK(c.total_calls() == 9);
    CHECK(c.total_bytes() == doctest::Approx((4 * f + f + f + once + 1 + f) * B).epsilon(1e-15));

    // a 2-byte dtype counts 2 bytes per element; a size that K does not divide counts (K-1)/K of it too
    const CommCounters before = c;
    Tensor h = make(DType::bf16, 4099, [](int64_t) { return 1.0f; });
    Tensor hp = make(DType::bf16, part_count(4099, K, r), [](int64_t) { return 1.0f; });
    comm->all_gather(hp, h);
    Tensor u = make(DType::f32, 4099, [](int64_t) { return 1.0f; });
    comm->all_reduce(u);
    const CommCounters d = c - before;
    CHECK(d.calls[(int)CommOp::all_gather] == 1);
    CHECK(d.bytes[(int)CommOp::all_gather] == doctest::Approx(f * 2 * 4099).epsilon(1e-15));
    CHECK(d.bytes[(int)CommOp::all_reduce] == doctest::Approx(2 * f * 4 * 4099).epsilon(1e-15));
    CHECK(d.total_calls() == 2);

    comm->reset_counters();
    CHECK(c.total_calls() == 0);
    CHECK(c.total_bytes() == 0);
}

// ---- split -----------------------------------------------------------------------------------------------

void split_groups_by_color_ordered_by_key() {
    auto comm = world();
    const int K = comm->size(), r = comm->rank();
    // same parity, in DEScending world rank (key = -r)
    auto parity = comm->split(r % 2, -r, "parity");
    std::vector<float> want;
    for (int q = K - 1; q >= 0; q--)
        if (q % 2 == r % 2) want.push_back((float)q);
    CHECK(parity->name() == "parity");
    CHECK(parity->size() == (int)want.size());
    CHECK(parity->rank() == int(std::find(want.begin(), want.end(), (float)r) - want.begin()));
    check_close(comm_members(*parity, r), want, 0, 0, "members of the parity group");
    // everyone, rotated by one: world rank K-1 becomes rank 0
    auto rotated = comm->split(0, (r + 1) % K, "rotated");
    CHECK(rotated->rank() == (r + 1) % K);
    want.clear();
    for (int j = 0; j < K; j++) want.push_back(float((j + K - 1) % K));
    check_close(comm_members(*rotated, r), want, 0, 0, "members of the rotated group");
    // each Comm counts its own traffic
    CHECK(rotated->counters().calls[(int)CommOp::all_gather] == 1);
    CHECK(comm->counters().total_calls() == 0);
}

// ---- chapter 02: the ring all-reduce from send/recv ----------------------------------------------------

// Against comm.all_reduce and against a double-precision sum. K = 2: every element is a0 + a1 on both
// sides, and float addition is commutative, so the results are bitwise equal. K > 2: the ring adds the
// contributions in ring order ((a_(r+1) + a_(r+2)) + ...) while MPI uses its own tree or order, and float
// addition is not associative, so the last bits may differ (a few ulp of the partial sums).
void ring_all_reduce_equals_all_reduce() {
    auto comm = world();
    const int K = comm->size(), r = comm->rank();
    // 12 first: 2, 3 and 4 divide it, so a ring that pairs the wrong parts fails an assertion before an uneven
    // size makes its messages mismatch (MPI aborts the job on a truncated receive)
    const std::vector<Shape> shapes = {{12}, {0}, {1}, {7}, {1000}, {4099}, {4096}, {37, 11}};
    for (const Shape& shape : shapes) {
        Tensor x = random_tensor(shape, 100 + r);
        Tensor y = x.clone(Device::cpu, Tag::workspace);
        ring_all_reduce(*comm, x);
        comm->all_reduce(y);
        const int64_t M = x.numel();
        const std::string name = strfmt("ring_all_reduce M=%lld K=%d", (long long)M, K);
        if (K <= 2)
            check_close(x.to_host(), y.to_host(), 0, 0, name + " vs all_reduce (bitwise)");
        else
            check_close(x.to_host(), y.to_host(), 1e-5, 1e-6, name + " vs all_reduce");
        std::vector<double> sum(M, 0.0);
        for (int q = 0; q < K; q++) {
            auto xq = random_tensor(shape, 100 + q).to_host();
            for (int64_t i = 0; i < M; i++) sum[i] += xq[i];
        }
        // playbook: 000.A.8 — the ring from send/recv = the sum
        check_close(x.to_host(), std::vector<float>(sum.begin(), sum.end()), 1e-5, 1e-6, name + " vs double sum");
    }
    Tensor ints = Tensor::from_host_i32({1, 2}, {2}, Device::cpu);
    CHECK(contains(error_of([&] { ring_all_reduce(*comm, ints); }), "ring_all_reduce sums f32 tensors, got i32"));
}

// The bytes it really sent (the send counter) against the ring formula. Rank r sends every part but its
// own in the reduce-scatter and every part but part r+1 in the all-gather: 2M - n_r - n_(r+1) elements
// (n_j = part_count(M, K, j)), which is 2(K-1)/K·M when K divides M. Summed over the ranks it is always
// 2(K-1)·M: uneven parts move bytes between ranks, not in total.
void ring_all_reduce_sends_ring_bytes() {
    auto comm = world();
    const int K = comm->size(), r = comm->rank();
    for (int64_t M : {int64_t(0), int64_t(K), int64_t(1024 * K), int64_t(1), int64_t(7), int64_t(1001), int64_t(4099)}) {
        Tensor x = random_tensor({M}, 7 + r);
        comm->reset_counters();
        ring_all_reduce(*comm, x);
        const CommCounters& c = comm->counters();
        const double sent = c.bytes[(int)CommOp::send];
        const std::string name = strfmt("ring_all_reduce M=%lld K=%d", (long long)M, K);
        const int64_t elems = K == 1 ? 0 : 2 * M - part_count(M, K, r) - part_count(M, K, (r + 1) % K);
        CHECK_MESSAGE(sent == 4.0 * elems, name << ": sent " << sent << " bytes");
        // playbook: 000.03.1 000.A.8 003.1.2 — each rank sends 2(K-1)/K·M bytes
        if (M % K == 0) CHECK_MESSAGE(sent == 2.0 * (K - 1) / K * 4 * M, name << ": sent " << sent << " bytes");
        CHECK(comm->all_reduce_scalar(sent) == 2.0 * (K - 1) * 4 * M);
        CHECK(c.calls[(int)CommOp::send] == 2 * (K - 1));
        CHECK(c.calls[(int)CommOp::recv] == 2 * (K - 1));
        CHECK(c.total_calls() == 4 * (K - 1));  // send and recv only: no collective inside
    }
}

// The MPI backend stages device tensors through host memory; the results must be the host results.
void mpi_backend_stages_cuda_tensors() {
    SKIP_WITHOUT_GPU();
    auto comm = world();
    const int K = comm->size(), r = comm->rank(), next = (r + 1) % K, prev = (r + K - 1) % K;
    const int64_t M = 4099, start = part_start(M, K, r), n = part_count(M, K, r);
    Tensor x = random_tensor({M}, 50 + r), xd = x.clone(Device::cuda, Tag::workspace);
    comm->all_reduce(x);
    comm->all_reduce(xd);
    check_close(xd.to_host(), x.to_host(), 0, 0, "all_reduce of a cuda tensor");
    Tensor ring = random_tensor({M}, 50 + r, 1.0f, Device::cuda);
    ring_all_reduce(*comm, ring);
    check_close(ring.to_host(), x.to_host(), 1e-5, 1e-6, "ring_all_reduce of a cuda tensor");
    Tensor part = random_tensor({n}, 60 + r, 1.0f, Device::cuda);
    Tensor full = Tensor::zeros({M}, DType::f32, Device::cuda, Tag::workspace);
    comm->all_gather(part, full);
    auto f = full.to_host();
    check_close(std::vector<float>(f.begin() + start, f.begin() + start + n), part.to_host(), 0, 0,
                "all_gather of cuda tensors");
    Tensor got = Tensor::zeros({M}, DType::f32, Device::cuda, Tag::workspace);
    CommHandle s = comm->send_async(xd, next);
    comm->recv(got, prev);
    s.wait();
    check_close(got.to_host(), x.to_host(), 0, 0, "send/recv of cuda tensors");
}

}  // namespace

// ---- pure functions and the one-rank Comm: one rank is enough -------------------------------------------

TEST_SUITE("ch02 np1") {

TEST_CASE("part_start/part_count: contiguous parts, the first M % K one longer") {
    const int64_t starts[] = {0, 3, 6, 8, 10};
    for (int r = 0; r <= 4; r++) CHECK(part_start(10, 4, r) == starts[r]);
    const int64_t small[] = {1, 1, 0, 0};
    for (int r = 0; r < 4; r++) CHECK(part_count(2, 4, r) == small[r]);
    for (int64_t M : {0, 1, 5, 7, 1000, 4099})
        for (int K : {1, 2, 3, 4, 8}) {
            CHECK(part_start(M, K, 0) == 0);
            CHECK(part_start(M, K, K) == M);
            for (int r = 0; r < K; r++) {
                CHECK(part_count(M, K, r) == M / K + (r < M % K ? 1 : 0));
                CHECK(part_start(M, K, r) + part_count(M, K, r) == part_start(M, K, r + 1));
            }
        }
}

TEST_CASE("ring_bytes: the ring algorithm's bytes per collective") {
    CHECK(ring_bytes(CommOp::all_reduce, 4, 400) == 600);
    CHECK(ring_bytes(CommOp::reduce_scatter, 4, 400) == 300);
    CHECK(ring_bytes(CommOp::all_gather, 4, 400) == 300);
    CHECK(ring_bytes(CommOp::all_to_all, 4, 400) == 300);
    CHECK(ring_bytes(CommOp::broadcast, 4, 400) == 400);
    CHECK(ring_bytes(CommOp::send, 4, 400) == 400);
    CHECK(ring_bytes(CommOp::recv, 4, 400) == 0);
    CHECK(ring_bytes(CommOp::barrier, 4, 400) == 0);
    CHECK(ring_bytes(CommOp::all_reduce, 2, 400) == 400);
    for (CommOp op : {CommOp::all_reduce, CommOp::reduce_scatter, CommOp::all_gather, CommOp::broadcast,
                      CommOp::all_to_all})
        CHECK(ring_bytes(op, 1, 400) == 0);  // one rank: nothing leaves it
    CHECK(ring_bytes(CommOp::send, 1, 400) == 400);  // to itself: a real copy through MPI
    CHECK(ring_bytes(CommOp::recv, 1, 400) == 0);
}

TEST_CASE("the one-rank Comm: collectives are copies, counted as calls of no bytes") {
    auto self = make_self_comm("tp");
    CHECK(self->size() == 1);
    CHECK(self->rank() == 0);
    CHECK(self->name() == "tp");
    Tensor x = make(DType::f32, 7, [](int64_t i) { return value(0, i, 30); });
    self->all_reduce(x);
    check_close(x.to_host(), expected(7, [](int64_t i) { return value(0, i, 30); }), 0, 0, "self all_reduce");
    Tensor y = make(DType::f32, 7, [](int64_t) { return 0.0f; });
    self->all_gather(x, y);
    check_close(y.to_host(), x.to_host(), 0, 0, "self all_gather");
    Tensor z = make(DType::f32, 7, [](int64_t) { return 0.0f; });
    self->reduce_scatter(x, z);
    check_close(z.to_host(), x.to_host(), 0, 0, "self reduce_scatter");
    Tensor w = make(DType::f32, 9, [](int64_t) { return -1.0f; });
    self->all_to_all_v(x, {5}, {2}, w, {5}, {3});
    check_close(w.to_host(), {-1, -1, -1, value(0, 2, 30), value(0, 3, 30), value(0, 4, 30), value(0, 5, 30),
                              value(0, 6, 30), -1},
                0, 0, "self all_to_all_v");
    self->broadcast(x, 0);
    self->barrier();
    CHECK(self->all_reduce_scalar(2.5) == 2.5);
    CHECK(self->counters().total_calls() == 6);
    CHECK(self->counters().total_bytes() == 0);
    CHECK(contains(error_of([&] { self->broadcast(x, 1); }), "broadcast root 1 is not a rank of tp"));
    CHECK(contains(error_of([&] { self->send(x, 0); }), "send to 0 on a group of one rank"));
    CHECK(contains(error_of([&] { self->all_gather(x, w); }), "the part is the whole"));
    CHECK(self->split(0, 0, "sub")->name() == "sub");
}

TEST_CASE("parse_comm_backend names the flag") {
    CHECK(parse_comm_backend("mpi", Device::cpu) == CommBackend::mpi);
    CHECK(parse_comm_backend("auto", Device::cpu) == CommBackend::mpi);
    CHECK(contains(error_of([] { parse_comm_backend("gloo", Device::cpu); }), "--comm gloo must be auto, mpi or nccl"));
}

}  // TEST_SUITE

// ---- the cases that run unchanged on 1, 2 and 4 ranks: one test case each in "ch02 np1", "np2", "np4" ----
// (an X-macro, so the list is written once; doctest tells the copies apart by suite line and name)

#define COMM_CASES(X) \
    X("all_reduce sum and max equal their definition (f32, i32, uneven sizes)", all_reduce_sum_and_max) \
    X("reduce_scatter gives rank r the sum of its part", reduce_scatter_sums_each_part) \
    X("all_gather concatenates the parts (f32, i32, bf16)", all_gather_concatenates_parts) \
    X("reduce_scatter and all_gather in place (the part is a view of the whole)", collectives_in_place) \
    X("broadcast from each root", broadcast_from_each_root) \
    X("send/recv around a ring and between every pair", send_recv_ring_and_pairwise) \
    X("all_to_all: chunk j of rank r becomes chunk r of rank j", all_to_all_swaps_chunks) \
    X("all_to_all_v with uneven counts and gaps", all_to_all_v_uneven) \
    X("barrier: no rank leaves before every rank entered", barrier_waits_for_everyone) \
    X("async operations waited in any order", async_waited_in_any_order) \
    X("CommHandle::test reports completion", test_reports_completion) \
    X("comm counters follow the ring accounting exactly", counters_follow_ring_accounting) \
    X("split groups ranks by color, ordered by key", split_groups_by_color_ordered_by_key) \
    X("ring all-reduce equals all_reduce", ring_all_reduce_equals_all_reduce) \
    X("ring all-reduce sends 2(K-1)/K·M bytes", ring_all_reduce_sends_ring_bytes) \
    X("[gpu] MPI backend stages cuda tensors through host", mpi_backend_stages_cuda_tensors)
#define COMM_CASE(name, body) \
    TEST_CASE(name) { body(); }

TEST_SUITE("ch02 np1") { COMM_CASES(COMM_CASE) }
TEST_SUITE("ch02 np2") { COMM_CASES(COMM_CASE) }
// 3 ranks: a ring where rank r's neighbours differ from each other and from r's mirror (at 2 ranks next ==
// prev, so a reversed ring or a wrong neighbour goes unseen), and sizes that 3 does not divide (4099, 1000,
// 7: uneven parts, the first M % 3 one longer), so an offset that assumes equal parts fails here
TEST_SUITE("ch02 np3") { COMM_CASES(COMM_CASE) }
TEST_SUITE("ch02 np4") { COMM_CASES(COMM_CASE) }
