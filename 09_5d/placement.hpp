// placement.hpp — which node and which GPU each rank of a 5D layout sits on, and the rule that keeps tensor
// parallelism inside a node.
//
// Playbook: "5D parallelism" / "Finding the best training configuration": tp communicates inside every layer
// (several all-reduces per micro-batch), so its ranks must share a node's NVLink; pp sends one activation per
// micro-batch and may cross nodes; dp and cp sit in between. The grid puts tp fastest (grid.hpp: rank =
// tp_i + tp·(cp_i + cp·(dp_i + dp·pp_i))), so with ranks filled node by node (mpirun --map-by slot, Slurm's
// block distribution) a tp group is consecutive ranks — inside one node whenever tp divides the ranks per node.
// This file checks it, on the nodes the ranks really have:
//   - a rank's node is its host name (every rank's gathered), or PENTA_NODE_ID when set (an integer: fakes a
//     multi-node job on one machine, e.g. `mpirun -np 4 -x PENTA_NODE_ID=0 prog : -np 4 -x PENTA_NODE_ID=1 prog`);
//   - its GPU is its place among the ranks of its node (one process per GPU);
//   - a tp group spread over nodes is refused, naming the ranks, the nodes and --force-tp-across-nodes.
// Test: tests/09_5d/test_placement.cpp (two fake nodes).
#pragma once
#include <string>
#include <vector>

#include "../common/comm.hpp"
#include "../common/grid.hpp"

namespace penta {

struct Placement {
    std::vector<int> node;   // per world rank: the node's number (first seen in rank order, or PENTA_NODE_ID)
    std::vector<int> gpu;    // per world rank: its index among the ranks of its node
    int nodes = 1;
    bool faked = false;      // PENTA_NODE_ID was set
};

// Collective over world (one scalar all-gather): every rank's node and GPU. Throws naming PENTA_NODE_ID when it
// is set and not an integer >= 0.
Placement discover_placement(Comm& world);

// Throws, before any work, when a tp group of `shape` spans nodes and `force` is false: the rule, the group's
// ranks and nodes, and the fix (a --tp that divides the ranks per node, or --force-tp-across-nodes).
void check_placement(const GridShape& shape, const Placement& p, bool force);

// the ranks of a tp group that straddle nodes, "" when every tp group sits in one node
std::string tp_groups_across_nodes(const GridShape& shape, const Placement& p);

}  // namespace penta
