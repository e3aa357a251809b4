// test_comm_rooted.cpp — Comm's rooted collectives (reduce, gather, scatter: comm.hpp) against their
// definitions, from every root, on sizes the ranks do not divide; and what they count.
//
// Playbook: appendix "A quick primer on collective operations" (seed 000's table of primitives: reduce N -> 1,
// gather N -> 1, scatter 1 -> N). On 3 ranks a root's neighbours differ and 4099, 1000 and 7 leave uneven parts.
//   make test CH=00     or     mpirun -np 3 build/bin/tests_00 -ts='ch00 np3' -tc='rooted*'
#include "../../common/comm.hpp"
#include "../../common/runtime.hpp"
#include "../testing.hpp"

using namespace penta;
using penta::testing::check_close;
using penta::testing::contains;
using penta::testing::error_of;

namespace {

const int64_t kSizes[] = {0, 1, 7, 1000, 4099};

// rank r's element i: an integer in [-11, 11], different per rank and element (sums of a few are exact in f32)
float value(int rank, int64_t i) { return float((rank * 131 + i * 7 + 5) % 23 - 11); }

Tensor make(int64_t n, const std::function<float(int64_t)>& f, DType dt = DType::f32) {
    std::vector<float> v(n);
    for (int64_t i = 0; i < n; i++) v[i] = f(i);
    return Tensor::from_host(v, {n}, Device::cpu, Tag::workspace, dt);
}
std::vector<float> values(int64_t n, const std::function<float(int64_t)>& f) {
    std::vector<float> v(n);
    for (int64_t i = 0; i < n; i++) v[i] = f(i);
    return v;
}
int owner(int64_t M, int K, int64_t i) {
    int q = 0;
    while (part_start(M, K, q + 1) <= i) q++;
    return q;
}

void reduce_sums_on_the_root() {
    auto comm = make_world_comm(CommBackend::mpi);
    const int K = comm->size(), r = comm->rank();
    for (int root = 0; root < K; root++)
        for (int64_t M : kSizes) {
            Tensor in = make(M, [&](int64_t i) { return value(r, i); });
            Tensor out = make(M, [](int64_t) { return 99.0f; });
            comm->reduce(in, out, root);
            const std::string what = strfmt("reduce M=%lld K=%d root=%d", (long long)M, K, root);
            if (r == root) {
                // playbook: 000.A.2 — the root's output = the element-wise sum over ranks
                check_close(out.to_host(), values(M, [&](int64_t i) {
                                float s = 0;
                                for (int q = 0; q < K; q++) s += value(q, i);
                                return s;
                            }), 0, 0, what);
            } else {  // a non-root's output is not touched
                check_close(out.to_host(), values(M, [](int64_t) { return 99.0f; }), 0, 0, what + " (not root)");
            }
            check_close(in.to_host(), values(M, [&](int64_t i) { return value(r, i); }), 0, 0, what + " (input)");
        }
    // in place on the root: out is in
    Tensor x = make(1000, [&](int64_t i) { return value(r, i); });
    comm->reduce(x, x, 0);
    if (r == 0)
        check_close(x.to_host(), values(1000, [&](int64_t i) {
                        float s = 0;
                        for (int q = 0; q < K; q++) s += value(q, i);
                        return s;
                    }), 0, 0, "reduce in place");
    // f32 only, and the root must be a rank: refused by name
    Tensor b = make(4, [](int64_t) { return 1.0f; }, DType::bf16);
    CHECK(contains(error_of([&] { comm->reduce(b, b, 0); }), "f32 only"));
    CHECK(contains(error_of([&] { comm->reduce(x, x, K); }), "is not a rank of"));
}

void gather_concatenates_on_the_root() {
    auto comm = make_world_comm(CommBackend::mpi);
    const int K = comm->size(), r = comm->rank();
    for (DType dt : {DType::f32, DType::bf16})
        for (int root = 0; root < K; root++)
            for (int64_t M : kSizes) {
                const int64_t start = part_start(M, K, r);
                Tensor in = make(part_count(M, K, r), [&](int64_t j) { return value(r, start + j); }, dt);
                Tensor out = make(M, [](int64_t) { return 99.0f; }, dt);
                comm->gather(in, out, root);
                const std::string what =
                    strfmt("gather %s M=%lld K=%d root=%d", dtype_name(dt), (long long)M, K, root);
                if (r == root)
                    // playbook: 000.A.4 — the root's output = the parts in rank order
                    check_close(out.to_host(), values(M, [&](int64_t i) { return value(owner(M, K, i), i); }), 0, 0,
                                what);
                else
                    check_close(out.to_host(), values(M, [](int64_t) { return 99.0f; }), 0, 0, what + " (not root)");
            }
}

void scatter_gives_each_rank_its_part() {
    auto comm = make_world_comm(CommBackend::mpi);
    const int K = comm->size(), r = comm->rank();
    for (int root = 0; root < K; root++)
        for (int64_t M : kSizes) {
            // only the root's buffer matters: the others hold something else
            Tensor in = make(M, [&](int64_t i) { return r == root ? value(root, i) : -99.0f; });
            Tensor out = make(part_count(M, K, r), [](int64_t) { return 99.0f; });
            comm->scatter(in, out, root);
            const int64_t start = part_start(M, K, r);
            // playbook: 000.A.6 — rank r receives part r
            check_close(out.to_host(), values(part_count(M, K, r), [&](int64_t j) { return value(root, start + j); }),
                        0, 0, strfmt("scatter M=%lld K=%d root=%d", (long long)M, K, root));
        }
}

// counted as the sends they are made of: every non-root sends its buffer (reduce) or its part (gather) once;
// the root sends the K-1 other parts (scatter)
void rooted_counters() {
    auto comm = make_world_comm(CommBackend::mpi);
    const int K = comm->size(), r = comm->rank();
    const int64_t M = 4099;
    Tensor whole = make(M, [&](int64_t i) { return value(r, i); });
    Tensor part = make(part_count(M, K, r), [](int64_t) { return 1.0f; });
    const int root = K - 1;
    comm->reset_counters();
    comm->reduce(whole, whole, root);
    comm->gather(part, whole, root);
    comm->scatter(whole, part, root);
    const CommCounters& c = comm->counters();
    const double sent = c.bytes[(int)CommOp::send];
    if (r == root)
        CHECK(sent == doctest::Approx(4.0 * double(M - part_count(M, K, r))));  // the scatter's other parts
    else
        CHECK(sent == doctest::Approx(4.0 * double(M + part_count(M, K, r))));  // reduce: M; gather: its part
    CHECK(c.calls[(int)CommOp::all_reduce] + c.calls[(int)CommOp::all_gather] + c.calls[(int)CommOp::reduce_scatter] ==
          0);
}

}  // namespace

#define ROOTED_CASES(X)                                                                                   \
    X("rooted: reduce gives the root the element-wise sum, added in rank order; others untouched", \
      reduce_sums_on_the_root)                                                                            \
    X("rooted: gather gives the root the parts in rank order (f32, bf16, uneven parts)",                  \
      gather_concatenates_on_the_root)                                                                    \
    X("rooted: scatter gives rank r part r of the root's buffer", scatter_gives_each_rank_its_part)      \
    X("rooted: reduce, gather and scatter are counted as the sends they are made of", rooted_counters)
#define ROOTED_CASE(name, body) \
    TEST_CASE(name) {           \
        if (!mpi_enabled()) SKIP_TEST("rooted collectives: a build without MPI has no messages");   \
        body();                 \
    }

TEST_SUITE("ch00 np3") { ROOTED_CASES(ROOTED_CASE) }
TEST_SUITE("ch00 np4") { ROOTED_CASES(ROOTED_CASE) }
