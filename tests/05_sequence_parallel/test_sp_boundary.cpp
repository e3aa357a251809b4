// test_sp_boundary.cpp — chapter 05, the two SP boundary pairs each on their own, with no layer between them:
// entering the tp region (g) all-gathers the sequence-split rows forward, in token order, and reduce-scatters
// their gradient backward; leaving it (g-bar) reduce-scatters the partial products forward and all-gathers the
// gradient backward. Each direction sends (t-1)/t of the (N, h) tensor and keeps the input's allocation tag.
// One test case per pair, so each grades its workshop exercise (05.1, 05.2: tests/exercises/05_*.txt) alone.
// Playbook: "Sequence parallelism". Run: `make test CH=05`, or
//   mpirun --allow-run-as-root --oversubscribe -np 2 build/bin/tests_05 -ts='ch05 np2' -tc='SP * the tp region alone*'
#include <functional>

#include "../../05_sequence_parallel/sequence_parallel.hpp"
#include "sp_testing.hpp"

using namespace penta;
using namespace penta::testing;
using namespace penta::tp_testing;

namespace {

constexpr int64_t kH = 6;
using Boundary = std::function<Tensor(const Tensor&)>;
int64_t tokens(const Comm& tp) { return 4 * tp.size(); }  // N: 4 rows per rank

// the (N/t, h) -> (N, h) direction: every rank's rows, in token order, exactly
void check_gathers(const Boundary& gather, const Comm& tp, const std::string& what) {
    const int64_t N = tokens(tp), nl = N / tp.size();
    const std::vector<float> X = random_tensor({N, kH}, 11).to_host();
    const Tensor mine = Tensor::from_host(block(X, kH, tp.rank() * nl, nl, 0, kH), {nl, kH}, Device::cpu, Tag::activations);
    const Tensor y = gather(mine);
    CHECK(y.shape == Shape{N, kH});
    CHECK(y.tag() == Tag::activations);
    check_close(y.to_host(), X, 0, 0, what);
}

// the (N, h) -> (N/t, h) direction: this rank's rows of the sum over ranks (rank q's input: seed 20 + q)
void check_scatters(const Boundary& scatter, const Comm& tp, const std::string& what) {
    const int64_t N = tokens(tp), nl = N / tp.size();
    std::vector<float> want(nl * kH, 0.0f);
    for (int q = 0; q < tp.size(); q++) {
        const std::vector<float> part = block(random_tensor({N, kH}, 20 + q).to_host(), kH, tp.rank() * nl, nl, 0, kH);
        for (size_t i = 0; i < want.size(); i++) want[i] += part[i];
    }
    const Tensor y = scatter(random_tensor({N, kH}, 20 + tp.rank(), 1.0f, Device::cpu, Tag::activations));
    CHECK(y.shape == Shape{nl, kH});
    CHECK(y.tag() == Tag::activations);
    check_close(y.to_host(), want, 1e-6, 1e-6, what);
}

// one all-gather or reduce-scatter of the (N, h) f32 tensor: (t-1)/t of it per rank, ring accounting
double one_collective_bytes(const Comm& tp) { return (tp.size() - 1.0) / tp.size() * (double)(tokens(tp) * kH * 4); }

// SP's boundary on a tp t group (the whole world), one pair of it alone: entering (gather forward, scatter
// backward) or leaving (scatter forward, gather backward); each direction sends one collective's bytes. At
// t 3 a rank's two neighbours differ, so rows placed by the wrong neighbour or the ring's other direction show.
void check_pair(bool entering, int t) {
    ParallelGrid g = tp_grid(t == 3 ? tp3_config(64) : tp_config(64), t);
    SequenceParallel b(g.tp());
    const Comm& tp = b.group();
    if (entering) {
        check_gathers([&](const Tensor& x) { return b.enter_forward(x); }, tp, "enter_forward");
        check_scatters([&](const Tensor& dx) { return b.enter_backward(dx); }, tp, "enter_backward");
    } else {
        check_scatters([&](const Tensor& y) { return b.exit_forward(y); }, tp, "exit_forward");
        check_gathers([&](const Tensor& dy) { return b.exit_backward(dy); }, tp, "exit_backward");
    }
    CHECK(b.forward_bytes() == one_collective_bytes(tp));
    CHECK(b.backward_bytes() == one_collective_bytes(tp));
}

}  // namespace

TEST_SUITE("ch05 np2") {
    TEST_CASE("SP entering the tp region alone: all-gather forward in token order, reduce-scatter d x backward, their bytes") {
        check_pair(true, 2);
    }
    TEST_CASE("SP leaving the tp region alone: reduce-scatter the partial products forward, all-gather d y backward, their bytes") {
        check_pair(false, 2);
    }
}

TEST_SUITE("ch05 np3") {
    TEST_CASE("SP entering the tp region alone at tp 3 (an odd ring): all-gather forward in token order, reduce-scatter backward") {
        check_pair(true, 3);
    }
    TEST_CASE("SP leaving the tp region alone at tp 3 (an odd ring): reduce-scatter forward, all-gather backward") {
        check_pair(false, 3);
    }
}
