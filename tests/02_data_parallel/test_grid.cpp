// test_grid.cpp — ParallelGrid: world rank <-> (pp, dp, cp, tp) coordinates, the layout checks and their
// messages, and, on a real world of 1, 2 or 4 ranks, that every axis Comm holds the documented ranks.
// Playbook: "5D parallelism in a nutshell" (rank order: tp fastest, so TP stays inside a node).
//   mpirun -np 4 build/bin/tests_02 -ts='ch02 np4' -tc='*ParallelGrid*'      (also np1, np2; `make test CH=02`)
#include <functional>

#include "../../common/grid.hpp"
#include "../testing.hpp"

using namespace penta;
using penta::testing::check_close;
using penta::testing::comm_members;
using penta::testing::contains;
using penta::testing::error_of;

namespace {
std::unique_ptr<Comm> world() { return make_world_comm(CommBackend::mpi); }
}  // namespace

TEST_SUITE("ch02 np1") {

// ---- ParallelGrid: rank layout and checks ---------------------------------------------------------------

TEST_CASE("grid_coords and grid_rank: inverse, tp fastest, pp slowest") {
    const GridShape shapes[] = {{2, 2, 2, 2, 1}, {3, 1, 1, 4, 3}, {2, 3, 2, 2, 2}, {4, 1, 2, 1, 8}, {1, 1, 1, 1, 1}};
    for (const GridShape& s : shapes)
        for (int rank = 0; rank < s.ranks(); rank++) {
            const GridCoords c = grid_coords(s, rank);
            CAPTURE(s.str());
            CAPTURE(rank);
            CHECK(grid_rank(s, c) == rank);
            // playbook: 000.05.7 000.10.6 003.4.3 — rank = tp + tp·(cp + cp·(dp + dp·pp)): tp fastest, pp slowest
            CHECK(rank == c.tp + s.tp * (c.cp + s.cp * (c.dp + s.dp * c.pp)));
            CHECK((c.tp < s.tp && c.cp < s.cp && c.dp < s.dp && c.pp < s.pp));
            const int d = c.cp + s.cp * c.dp;  // position in the dp × cp plane
            CHECK(c.ep == d % s.ep);
            CHECK(c.edp == d / s.ep);
        }
    // the example of grid.hpp: world 8 = dp 2 × tp 4; rank 5 is tp 1 of dp 1
    const GridCoords c = grid_coords(GridShape{2, 1, 1, 4, 1}, 5);
    CHECK((c.dp == 1 && c.tp == 1 && c.pp == 0 && c.cp == 0));
    CHECK(GridShape{2, 1, 1, 4, 1}.str() == "dp 2 × pp 1 × cp 1 × tp 4 (ep 1)");
}

TEST_CASE("validate_grid: errors name the flags, the values and the rule") {
    LlamaConfig tiny = preset("tiny");  // 4 heads, 2 kv heads, ffn 64, 2 layers
    validate_grid({2, 2, 1, 2, 1}, 8, &tiny);
    validate_grid({4, 1, 2, 1, 8}, 8, nullptr);
    std::string e = error_of([] { validate_grid({2, 1, 1, 2, 1}, 8, nullptr); });
    // playbook: 003.4.4 — N = t·p·d (× cp): the product must be the world
    CHECK(contains(e, "--dp 2 × --pp 1 × --cp 1 × --tp 2 = 4 ranks, but the job has 8"));
    e = error_of([&] { validate_grid({1, 1, 1, 4, 1}, 4, &tiny); });
    CHECK(contains(e, "--tp 4 must divide the model's 2 key/value heads (tiny)"));
    e = error_of([] { validate_grid({2, 1, 1, 1, 4}, 2, nullptr); });
    CHECK(contains(e, "--ep 4 must divide --dp 2 × --cp 1 = 2"));
    e = error_of([] { validate_grid({3, 1, 2, 1, 4}, 6, nullptr); });
    CHECK(contains(e, "--ep 4 must divide --dp 3 × --cp 2 = 6"));
    e = error_of([] { validate_grid({0, 1, 1, 1, 1}, 1, nullptr); });
    CHECK(contains(e, "--dp 0"));
    CHECK(contains(e, "must be >= 1"));
    e = error_of([&] { validate_grid({1, 4, 1, 1, 1}, 4, &tiny); });
    CHECK(contains(e, "--pp 4 must be <= the model's 2 layers (tiny)"));
}

}  // TEST_SUITE

// ---- ParallelGrid on a real world: every axis Comm holds the documented ranks ----------------------------

namespace {

// every shape (dp, pp, cp, tp, ep) whose degrees multiply to K, with ep dividing dp × cp
std::vector<GridShape> shapes_of(int K) {
    std::vector<GridShape> out;
    for (int dp = 1; dp <= K; dp++)
        for (int pp = 1; pp <= K; pp++)
            for (int cp = 1; cp <= K; cp++)
                for (int tp = 1; tp <= K; tp++)
                    if (dp * pp * cp * tp == K)
                        for (int ep = 1; ep <= dp * cp; ep++)
                            if ((dp * cp) % ep == 0) out.push_back(GridShape{dp, pp, cp, tp, ep});
    return out;
}

void grid_axes_hold_the_documented_ranks() {
    const int K = world()->size(), r = world()->rank();
    for (const GridShape& s : shapes_of(K)) {
        CAPTURE(s.str());
        ParallelGrid grid(world(), s);
        const GridCoords me = grid_coords(s, r);
        CHECK(grid.coords().dp == me.dp);
        CHECK(grid.coords().ep == me.ep);
        CHECK(contains(grid.describe(), strfmt("rank %d = (pp %d, dp %d, cp %d, tp %d", r, me.pp, me.dp, me.cp, me.tp)));
        // the world rank of the point that differs from me only in what `vary` changes
        auto at = [&](const std::function<void(GridCoords&, int)>& vary, int i) {
            GridCoords c = me;
            vary(c, i);
            return (float)grid_rank(s, c);
        };
        auto dp_cp = [&](GridCoords& c, int d) { c.dp = d / s.cp, c.cp = d % s.cp; };  // d = cp_i + cp · dp_i
        struct Axis {
            const char* name;
            Comm& comm;
            int size, index;
            std::function<void(GridCoords&, int)> vary;
        };
        const Axis axes[] = {
            {"dp", grid.dp(), s.dp, me.dp, [](GridCoords& c, int i) { c.dp = i; }},
            {"pp", grid.pp(), s.pp, me.pp, [](GridCoords& c, int i) { c.pp = i; }},
            {"cp", grid.cp(), s.cp, me.cp, [](GridCoords& c, int i) { c.cp = i; }},
            {"tp", grid.tp(), s.tp, me.tp, [](GridCoords& c, int i) { c.tp = i; }},
            {"dp×cp", grid.dp_cp(), s.dp * s.cp, me.cp + s.cp * me.dp, dp_cp},
            // ep: ep consecutive positions of the dp × cp plane; edp: the same ep_i in every such group
            {"ep", grid.ep(), s.ep, me.ep, [&](GridCoords& c, int i) { dp_cp(c, me.edp * s.ep + i); }},
            {"edp", grid.edp(), s.dp * s.cp / s.ep, me.edp, [&](GridCoords& c, int j) { dp_cp(c, j * s.ep + me.ep); }},
        };
        for (const Axis& a : axes) {
            CAPTURE(a.name);
            CHECK(a.comm.name() == a.name);
            CHECK(a.comm.size() == a.size);
            CHECK(a.comm.rank() == a.index);
            std::vector<float> want;
            for (int i = 0; i < a.size; i++) want.push_back(at(a.vary, i));
            check_close(comm_members(a.comm, r), want, 0, 0, strfmt("%s members of %s", a.name, s.str().c_str()));
        }
    }
    // a shape that does not fit the world fails on every rank before any communication
    CHECK(contains(error_of([&] { ParallelGrid g(world(), GridShape{K + 1, 1, 1, 1, 1}); }),
                   strfmt("--dp %d × --pp 1 × --cp 1 × --tp 1 = %d ranks, but the job has %d", K + 1, K + 1, K)));
}

}  // namespace

TEST_SUITE("ch02 np1") { TEST_CASE("ParallelGrid: each axis Comm holds the documented ranks") { grid_axes_hold_the_documented_ranks(); } }
TEST_SUITE("ch02 np2") { TEST_CASE("ParallelGrid: each axis Comm holds the documented ranks") { grid_axes_hold_the_documented_ranks(); } }
TEST_SUITE("ch02 np4") { TEST_CASE("ParallelGrid: each axis Comm holds the documented ranks") { grid_axes_hold_the_documented_ranks(); } }
