// pipeline_clock.cpp — the logical clock's replay, the ASCII timeline, the wall bubble, and the gathering of
// every stage's records (pipeline_clock.hpp).
// Playbook: "Pipeline parallelism". Test: `build/bin/tests_07 -ts='ch07 np1'`.
#include "pipeline_clock.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <tuple>

#include "../../common/core.hpp"

namespace penta {

double LogicalCosts::of(PipeOpKind k) const {
    switch (k) {
        case PipeOpKind::F: return f;
        case PipeOpKind::B: return b;
        case PipeOpKind::W: return w;
        case PipeOpKind::BW: return b + w;
    }
    return 0;
}

LogicalClock replay(const PipelinePlan& P, const std::vector<std::vector<PipeOp>>& ran, const LogicalCosts& c) {
    LogicalClock L;
    const int p = P.stages, S = P.virtual_stages;
    L.busy.assign(p, 0), L.peak_in_flight.assign(p, 0);
    L.start.resize(p), L.end.resize(p);
    std::map<std::tuple<bool, int, int>, double> arrives;  // (forward, mb, for virtual stage) -> time
    std::vector<int> next(p, 0), in_flight(p, 0);
    std::vector<double> free_at(p, 0);
    for (bool progress = true; progress;) {
        progress = false;
        for (int r = 0; r < p; r++)
            while (next[r] < (int)ran[r].size()) {
                const PipeOp& op = ran[r][next[r]];
                const int s = P.virtual_stage(r, op.chunk, op.mb);
                double ready = free_at[r];
                const bool fwd = op.kind == PipeOpKind::F;
                if ((fwd && s > 0) || ((op.kind == PipeOpKind::B || op.kind == PipeOpKind::BW) && s < S - 1)) {
                    auto it = arrives.find({fwd, op.mb, s});
                    if (it == arrives.end()) break;  // its message is not sent yet: another stage goes first
                    ready = std::max(ready, it->second);
                }
                const double end = ready + c.of(op.kind);
                L.start[r].push_back(ready), L.end[r].push_back(end);
                free_at[r] = end, L.busy[r] += c.of(op.kind);
                if (fwd && s < S - 1) arrives[{true, op.mb, s + 1}] = end;
                if ((op.kind == PipeOpKind::B || op.kind == PipeOpKind::BW) && s > 0) arrives[{false, op.mb, s - 1}] = end;
                in_flight[r] += fwd ? 1 : op.writes_weight_grads() ? -1 : 0;
                L.peak_in_flight[r] = std::max(L.peak_in_flight[r], in_flight[r]);
                next[r]++, progress = true;
            }
    }
    for (int r = 0; r < p; r++)
        CHECK(next[r] == (int)ran[r].size(), "logical clock: stage %d cannot go on at its op %d (a list check_plan "
              "refuses)", r, next[r]);
    L.makespan = *std::max_element(free_at.begin(), free_at.end());
    return L;
}

std::string ascii_timeline(const PipelinePlan& P, const std::vector<std::vector<PipeOp>>& ran, const LogicalClock& L,
                           const LogicalCosts& c) {
    auto label = [&](const PipeOp& op) {
        std::string s = strfmt("%c%d", pipe_op_name(op.kind)[0], op.mb);
        if (P.chunks > 1) s += (char)('a' + op.chunk);
        return s;
    };
    size_t width = 2;
    for (const auto& ops : ran)
        for (const PipeOp& op : ops) width = std::max(width, label(op).size() + 1);
    const int64_t units = (int64_t)std::llround(L.makespan);
    std::string out;
    for (int r = 0; r < P.stages; r++) {
        std::string row((size_t)units * width, ' ');
        for (int64_t u = 0; u < units; u++) row[u * width] = '.';
        for (size_t k = 0; k < ran[r].size(); k++) {
            const int64_t a = std::llround(L.start[r][k]), b = std::llround(L.end[r][k]);
            for (int64_t u = a; u < b; u++)
                for (size_t i = 0; i < width; i++) row[u * width + i] = u == a ? ' ' : '-';
            const std::string t = label(ran[r][k]);
            std::memcpy(&row[a * width], t.data(), t.size());
            if (b - a == 1) continue;
            for (size_t i = t.size(); i < width; i++) row[a * width + i] = '-';
        }
        while (!row.empty() && row.back() == ' ') row.pop_back();
        out += strfmt("  stage %d |%s\n", r, row.c_str());
    }
    out += strfmt("  (a column per time unit, F = %g, B = %g, W = %g: F<mb> forward, B<mb> backward (the input gradient, "
                  "or B and W fused), W<mb> weight gradient, '.' idle%s)\n", c.f, c.b, c.w,
                  P.chunks > 1 ? "; the letter after the micro-batch is the chunk, a = 0" : "");
    return out;
}

std::vector<std::vector<int64_t>> all_gather_int64(Comm& group, const std::vector<int64_t>& mine) {
    const int K = group.size();
    const int64_t len = (int64_t)group.all_reduce_scalar((double)mine.size(), ReduceOp::max);
    // each value as two i32 halves, length first
    std::vector<int32_t> words(2 * (len + 1), 0);
    auto put = [&](int64_t i, int64_t v) {
        const uint64_t u = (uint64_t)v;
        words[2 * i] = (int32_t)(uint32_t)(u & 0xffffffffu), words[2 * i + 1] = (int32_t)(uint32_t)(u >> 32);
    };
    put(0, (int64_t)mine.size());
    for (size_t i = 0; i < mine.size(); i++) put((int64_t)i + 1, mine[i]);
    const int64_t n = (int64_t)words.size();
    Tensor in = Tensor::from_host_i32(words, {n}, Device::cpu, Tag::comm);
    Tensor out = Tensor::empty({n * K}, DType::i32, Device::cpu, Tag::comm);
    if (K > 1) group.all_gather(in, out);
    else out = in;
    const std::vector<int32_t> all = out.to_host_i32();
    std::vector<std::vector<int64_t>> res(K);
    auto get = [&](int r, int64_t i) {
        const uint64_t lo = (uint32_t)all[r * n + 2 * i], hi = (uint32_t)all[r * n + 2 * i + 1];
        return (int64_t)(lo | (hi << 32));
    };
    for (int r = 0; r < K; r++) {
        const int64_t m = get(r, 0);
        for (int64_t i = 0; i < m; i++) res[r].push_back(get(r, i + 1));
    }
    return res;
}

std::vector<std::vector<PipeOp>> PipelineStepRecords::ops() const {
    std::vector<std::vector<PipeOp>> o(stages.size());
    for (size_t r = 0; r < stages.size(); r++)
        for (const PipeOpRecord& rec : stages[r]) o[r].push_back(rec.op);
    return o;
}

PipelineStepRecords gather_step_records(Comm& pp, const PipelineStepRecord& mine, int chunks) {
    // flat: sent bytes, activations before, chunks forward bytes, then 9 numbers per op (times in ns)
    std::vector<int64_t> flat = {(int64_t)std::llround(mine.sent_bytes), mine.activations_before};
    for (int c = 0; c < chunks; c++) flat.push_back(c < (int)mine.forward_bytes.size() ? mine.forward_bytes[c] : -1);
    auto ns = [](double s) { return (int64_t)std::llround(s * 1e9); };
    for (const PipeOpRecord& r : mine.ops)
        for (int64_t v : {(int64_t)r.op.kind, (int64_t)r.op.mb, (int64_t)r.op.chunk, ns(r.start), ns(r.end), ns(r.posted),
                          ns(r.wait), r.activation_bytes, (int64_t)r.in_flight})
            flat.push_back(v);
    const std::vector<std::vector<int64_t>> all = all_gather_int64(pp, flat);
    PipelineStepRecords R;
    for (const std::vector<int64_t>& f : all) {
        R.sent_bytes.push_back((double)f[0]);
        R.activations_before.push_back(f[1]);
        R.forward_bytes.emplace_back(f.begin() + 2, f.begin() + 2 + chunks);
        std::vector<PipeOpRecord> ops;
        for (size_t i = 2 + chunks; i + 9 <= f.size(); i += 9) {
            PipeOpRecord r;
            r.op = {(PipeOpKind)f[i], (int)f[i + 1], (int)f[i + 2]};
            r.start = f[i + 3] * 1e-9, r.end = f[i + 4] * 1e-9, r.posted = f[i + 5] * 1e-9, r.wait = f[i + 6] * 1e-9;
            r.activation_bytes = f[i + 7], r.in_flight = (int)f[i + 8];
            ops.push_back(r);
        }
        R.stages.push_back(std::move(ops));
    }
    return R;
}

LogicalCosts measured_costs(const PipelineStepRecords& R) {
    double t[4] = {0, 0, 0, 0};
    int n[4] = {0, 0, 0, 0};
    for (const auto& ops : R.stages)
        for (const PipeOpRecord& r : ops) t[(int)r.op.kind] += r.end - r.start, n[(int)r.op.kind]++;
    auto mean = [&](PipeOpKind k) { return n[(int)k] ? t[(int)k] / n[(int)k] : 0.0; };
    const double f = mean(PipeOpKind::F);
    CHECK(f > 0, "no forward ran: nothing to measure the costs by");
    LogicalCosts c;
    double b = mean(PipeOpKind::B), w = mean(PipeOpKind::W);
    if (n[(int)PipeOpKind::BW]) {
        const double bw = mean(PipeOpKind::BW);
        const double share = b + w > 0 ? b / (b + w) : 2.0 / 3.0;  // the split ones' ratio, else B:W = 2:1
        if (!n[(int)PipeOpKind::B]) b = bw * share;
        if (!n[(int)PipeOpKind::W]) w = bw * (1 - share);
    }
    c.f = 1, c.b = b / f, c.w = w / f;
    return c;
}

std::vector<double> wall_bubble(const PipelineStepRecords& R) {
    double makespan = 0;
    for (const auto& ops : R.stages)
        for (const PipeOpRecord& r : ops) makespan = std::max(makespan, r.end);
    std::vector<double> bubble;
    for (const auto& ops : R.stages) {
        double busy = 0;
        for (const PipeOpRecord& r : ops) busy += r.end - r.start;
        bubble.push_back(busy > 0 ? (makespan - busy) / busy : 0);
    }
    return bubble;
}

}  // namespace penta
