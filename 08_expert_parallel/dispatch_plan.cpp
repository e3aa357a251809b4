// dispatch_plan.cpp — the per-sequence capacity and the send buffer's rows (dispatch_plan.hpp).
// Playbook: "Expert parallelism". Test: `make test CH=08`.
#include "dispatch_plan.hpp"

#include <cmath>

#include "../common/core.hpp"

namespace penta {

int64_t DispatchPlan::rows() const {
    int64_t n = 0;
    for (int64_t c : kept) n += c;
    return n;
}

int64_t DispatchPlan::dropped() const {
    int64_t n = 0;
    for (int64_t c : routed) n += c;
    return n - rows();
}

int64_t expert_capacity(double capacity_factor, int64_t k, int64_t T, int64_t E) {
    if (capacity_factor <= 0) return -1;
    return (int64_t)std::ceil(capacity_factor * (double)(k * T) / (double)E - 1e-9);  // exact products stay exact
}

DispatchPlan plan_dispatch(const std::vector<int32_t>& experts, int64_t B, int64_t T, int64_t k, int64_t E,
                           double capacity_factor) {
    DispatchPlan p;
    p.N = B * T, p.k = k, p.E = E;
    p.capacity = expert_capacity(capacity_factor, k, T, E);
    CHECK((int64_t)experts.size() == p.N * k, "plan_dispatch: %zu choices for %lld tokens × k %lld", experts.size(),
          (long long)p.N, (long long)k);
    // EXERCISE 08.2 begin: the per-sequence capacity: first choices before second ones, tokens in order; then each kept copy's row, expert after expert
    p.routed.assign(E, 0);
    p.kept.assign(E, 0);
    std::vector<char> keep(p.N * k, 1);
    std::vector<int64_t> taken(E);
    for (int64_t b = 0; b < B; b++) {  // each sequence is its own group
        std::fill(taken.begin(), taken.end(), 0);
        for (int64_t j = 0; j < k; j++)  // first choices first (GShard's priority), then in token order
            for (int64_t t = 0; t < T; t++) {
                const int64_t c = (b * T + t) * k + j, e = experts[c];
                CHECK(e >= 0 && e < E, "plan_dispatch: token %lld chose expert %lld of %lld", (long long)(b * T + t),
                      (long long)e, (long long)E);
                p.routed[e]++;
                if (p.capacity >= 0 && taken[e] >= p.capacity) keep[c] = 0;
                else taken[e]++, p.kept[e]++;
            }
    }
    // rows expert after expert; within an expert, its copies in token order
    std::vector<int64_t> next(E, 0);
    for (int64_t e = 1; e < E; e++) next[e] = next[e - 1] + p.kept[e - 1];
    p.pos.assign(p.N * k, -1);
    for (int64_t n = 0; n < p.N; n++)
        for (int64_t j = 0; j < k; j++)
            if (keep[n * k + j]) p.pos[n * k + j] = (int32_t)next[experts[n * k + j]]++;
    return p;
    // EXERCISE 08.2 end
}

}  // namespace penta
