// placement.cpp — node and GPU of every rank, and the tp-inside-a-node rule (placement.hpp).
//   mpirun -np 4 -x PENTA_NODE_ID=0 build/bin/09_5d --tp 2 --dp 4 : -np 4 -x PENTA_NODE_ID=1 build/bin/09_5d ...
#include "placement.hpp"

#include <unistd.h>

#include <cstdlib>
#include <functional>
#include <map>

#include "../common/core.hpp"

namespace penta {

namespace {
// this rank's node as a number every rank can compare: PENTA_NODE_ID, or its host name hashed to 48 bits (a
// double holds it exactly)
double node_key(bool* faked) {
    if (const char* v = std::getenv("PENTA_NODE_ID")) {
        char* end = nullptr;
        const long id = std::strtol(v, &end, 10);
        CHECK(*v && end && *end == 0 && id >= 0, "PENTA_NODE_ID '%s' must be an integer >= 0 (this rank's node)", v);
        *faked = true;
        return (double)id;
    }
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    *faked = false;
    return (double)(std::hash<std::string>{}(host) & ((uint64_t(1) << 48) - 1)) + (double)(uint64_t(1) << 48);
}
}  // namespace

Placement discover_placement(Comm& world) {
    bool faked = false;
    const std::vector<double> keys = world.all_gather_scalar(node_key(&faked));
    Placement p;
    p.faked = faked;
    std::map<double, int> number, seen;  // node key -> its number; -> ranks placed on it so far
    for (double k : keys) {
        if (!number.count(k)) number[k] = k < (double)(uint64_t(1) << 48) ? (int)k : (int)number.size();
        p.node.push_back(number[k]);
        p.gpu.push_back(seen[k]++);
    }
    p.nodes = (int)number.size();
    return p;
}

std::string tp_groups_across_nodes(const GridShape& s, const Placement& p) {
    // EXERCISE 09.1 begin: the tp-inside-a-node rule: every tp group (tp consecutive ranks, tp innermost) whose ranks sit on more than one node, listed
    std::string out;
    for (int r = 0; r < (int)p.node.size(); r += s.tp) {  // the tp groups are runs of tp consecutive ranks
        bool split = false;
        for (int i = 1; i < s.tp; i++) split |= p.node[r + i] != p.node[r];
        if (!split) continue;
        std::string g;
        for (int i = 0; i < s.tp; i++) g += strfmt("%s%d (node %d)", i ? ", " : "", r + i, p.node[r + i]);
        out += (out.empty() ? "" : "; ") + ("ranks " + g);
    }
    return out;
    // EXERCISE 09.1 end
}

void check_placement(const GridShape& s, const Placement& p, bool force) {
    const std::string across = tp_groups_across_nodes(s, p);
    CHECK(across.empty() || force,
          "--tp %d across nodes: the tensor-parallel group of %s spans nodes, and tp all-reduces inside every layer "
          "(several times per micro-batch), which the inter-node network is far too slow for; keep tp inside a node "
          "(a --tp that divides the ranks per node, with ranks filled node by node) or pass --force-tp-across-nodes",
          s.tp, across.c_str());
}

}  // namespace penta
