// test_placement.cpp — chapter 09, multi-node placement on two fake nodes (PENTA_NODE_ID set per rank): every
// rank's node and GPU, tp groups inside a node accepted, a tp group across the nodes refused naming the ranks, the
// nodes and --force-tp-across-nodes (and accepted when forced), nodes filled round-robin refused for tp 2.
// bad_inputs_test.sh runs the same refusal through the program (mpirun's MPMD form, one PENTA_NODE_ID per half).
// Playbook: "5D parallelism" (tp inside a node). Run: `make test CH=09`, or
//   mpirun --allow-run-as-root --oversubscribe -np 4 build/bin/tests_09 -ts='ch09 np4' -tc='*node*'
#include <cstdlib>
#include <string>

#include "../../09_5d/placement.hpp"
#include "../../common/runtime.hpp"
#include "../../common/train_loop.hpp"
#include "../testing.hpp"

using namespace penta;

namespace {
// the placement with this rank's PENTA_NODE_ID set to node_of(rank), unset again after
template <class F>
Placement fake_nodes(Comm& world, F node_of) {
    setenv("PENTA_NODE_ID", std::to_string(node_of(world.rank())).c_str(), 1);
    Placement p = discover_placement(world);
    unsetenv("PENTA_NODE_ID");
    return p;
}
std::string error_of(const GridShape& s, const Placement& p, bool force) {
    try {
        check_placement(s, p, force);
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}
}  // namespace

TEST_SUITE("ch09 np4") {
    TEST_CASE("two fake nodes: each rank's node and GPU, tp inside a node accepted, tp across nodes refused") {
        std::unique_ptr<Comm> world = make_world_comm(CommBackend::mpi);
        REQUIRE(world->size() == 4);
        const Placement p = fake_nodes(*world, [](int r) { return r / 2; });  // ranks 0, 1 on node 0; 2, 3 on node 1
        CHECK(p.faked);
        CHECK(p.nodes == 2);
        CHECK(p.node == std::vector<int>{0, 0, 1, 1});
        CHECK(p.gpu == std::vector<int>{0, 1, 0, 1});  // one process per GPU, counted per node

        CHECK(error_of(GridShape{2, 1, 1, 2}, p, false).empty());  // dp 2 × tp 2: each tp pair on one node
        CHECK(error_of(GridShape{1, 2, 1, 2}, p, false).empty());  // pp 2 × tp 2: the stages on two nodes
        CHECK(error_of(GridShape{1, 1, 2, 2}, p, false).empty());  // cp across nodes is allowed
        const std::string e = error_of(GridShape{1, 1, 1, 4}, p, false);  // tp 4 over both nodes
        INFO(e);
        // playbook: 000.10.6 — tp across two nodes refused; dp, pp, cp may cross
        CHECK(e.find("--tp 4 across nodes") != std::string::npos);
        CHECK(e.find("ranks 0 (node 0), 1 (node 0), 2 (node 1), 3 (node 1)") != std::string::npos);
        CHECK(e.find("--force-tp-across-nodes") != std::string::npos);
        CHECK(error_of(GridShape{1, 1, 1, 4}, p, true).empty());  // forced
    }

    TEST_CASE("nodes filled round-robin put every tp pair on two nodes: refused") {
        std::unique_ptr<Comm> world = make_world_comm(CommBackend::mpi);
        const Placement p = fake_nodes(*world, [](int r) { return r % 2; });
        CHECK(p.node == std::vector<int>{0, 1, 0, 1});
        CHECK(p.gpu == std::vector<int>{0, 0, 1, 1});
        CHECK(tp_groups_across_nodes(GridShape{2, 1, 1, 2}, p) == "ranks 0 (node 0), 1 (node 1); ranks 2 (node 0), 3 (node 1)");
        // playbook: 000.10.6 — round-robin nodes split every tp pair: refused
        CHECK(!error_of(GridShape{2, 1, 1, 2}, p, false).empty());
        CHECK(error_of(GridShape{4, 1, 1, 1}, p, false).empty());  // no tp: nothing to keep together
    }

    TEST_CASE("without PENTA_NODE_ID the ranks' host names decide: one node here") {
        std::unique_ptr<Comm> world = make_world_comm(CommBackend::mpi);
        unsetenv("PENTA_NODE_ID");
        const Placement p = discover_placement(*world);
        CHECK(!p.faked);
        CHECK(p.nodes == 1);
        CHECK(p.gpu == std::vector<int>{0, 1, 2, 3});
        CHECK(error_of(GridShape{1, 1, 1, 4}, p, false).empty());
    }
}
