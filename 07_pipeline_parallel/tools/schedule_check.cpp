// schedule_check.cpp — check_plan (pipeline_schedule.hpp): proves a pipeline schedule runs before any rank runs
// it, or names the stage and the op where it would not.
//
// The executor (pipeline_executor.hpp) never blocks on a send and blocks on every receive. So a list runs iff
// the stages can be advanced, each by its own next op whenever that op's message has been sent, to the end:
// the check replays exactly that. Before it: every op's inputs exist on its stage (the B of a micro-batch
// after its F, the W after its B; each micro-batch through each virtual stage once), and every pair of
// stages receives its messages in the order they are sent (NCCL matches sends and receives by order only).
// Playbook: "Pipeline parallelism". Test: `build/bin/tests_07 -ts='ch07 np1'`.
#include <map>
#include <set>
#include <tuple>

#include "../../common/core.hpp"
#include "../pipeline_schedule.hpp"

namespace penta {

namespace {

// one message of the pipeline: micro-batch mb's activation (forward) or its gradient, for virtual stage `to`
struct Message {
    bool forward;
    int mb, to;
    bool operator==(const Message& o) const { return forward == o.forward && mb == o.mb && to == o.to; }
};
std::string message_str(const Message& m) {
    return strfmt("micro-batch %d's %s for virtual stage %d", m.mb, m.forward ? "activation" : "gradient", m.to);
}

struct Checker {
    const PipelinePlan& P;
    std::string prefix() const { return strfmt("pipeline schedule %s (p %d, m %d, %d chunk(s) per stage): ", pipe_schedule_name(P.kind), P.stages, P.micro_batches, P.chunks); }
    std::string at(int stage, int k) const {
        return strfmt("stage %d, op %d (%s)", stage, k, pipe_op_str(P.ops[stage][k]).c_str());
    }

    void shape() const {
        CHECK((int)P.ops.size() == P.stages, "%sthe plan lists %zu stages", prefix().c_str(), P.ops.size());
        CHECK((int)P.direction.size() == P.micro_batches, "%s%zu directions for %d micro-batches", prefix().c_str(),
              P.direction.size(), P.micro_batches);
        for (const auto& p : P.place) {
            CHECK((int)p.size() == P.virtual_stages, "%sa direction places %zu of %d virtual stages", prefix().c_str(),
                  p.size(), P.virtual_stages);
            for (const auto& [stage, chunk] : p)
                CHECK(stage >= 0 && stage < P.stages && chunk >= 0 && chunk < P.chunks,
                      "%sa virtual stage is placed on stage %d chunk %d", prefix().c_str(), stage, chunk);
        }
    }

    // every op names a micro-batch that visits its chunk; F, B (or BW) and W of each (micro-batch, virtual
    // stage) once each, in that order, on the stage that runs it
    void inputs() const {
        std::map<std::pair<int, int>, std::tuple<int, int, int>> seen;  // (mb, vs) -> index+1 of F, B, W
        for (int r = 0; r < P.stages; r++)
            for (int k = 0; k < (int)P.ops[r].size(); k++) {
                const PipeOp& op = P.ops[r][k];
                CHECK(op.mb >= 0 && op.mb < P.micro_batches && op.chunk >= 0 && op.chunk < P.chunks,
                      "%s%s: no such micro-batch or chunk", prefix().c_str(), at(r, k).c_str());
                const int s = P.virtual_stage(r, op.chunk, op.mb);
                CHECK(s >= 0, "%s%s: micro-batch %d (direction %d) never visits chunk %d of stage %d", prefix().c_str(),
                      at(r, k).c_str(), op.mb, P.direction[op.mb], op.chunk, r);
                auto& [f, b, w] = seen[{op.mb, s}];
                auto twice = [&](int before) {
                    CHECK(before == 0, "%s%s runs again: the stage ran it as its op %d", prefix().c_str(),
                          at(r, k).c_str(), before - 1);
                };
                switch (op.kind) {
                    case PipeOpKind::F: twice(f), f = k + 1; break;
                    case PipeOpKind::B:
                    case PipeOpKind::BW:
                        twice(b);
                        CHECK(f > 0, "%s%s: its input does not exist: the forward of micro-batch %d has not run on "
                              "this stage yet", prefix().c_str(), at(r, k).c_str(), op.mb);
                        b = k + 1;
                        if (op.kind == PipeOpKind::BW) w = k + 1;
                        break;
                    case PipeOpKind::W:
                        CHECK(b > 0 && P.ops[r][b - 1].kind == PipeOpKind::B,
                              "%s%s: its input does not exist: no B of micro-batch %d ran on this stage before it "
                              "(a W follows a B; BW is both)", prefix().c_str(), at(r, k).c_str(), op.mb);
                        twice(w), w = k + 1;
                        break;
                }
            }
        for (int j = 0; j < P.micro_batches; j++)
            for (int s = 0; s < P.virtual_stages; s++) {
                const auto it = seen.find({j, s});
                const auto [stage, chunk] = P.where(j, s);
                const char* missing = it == seen.end() || std::get<0>(it->second) == 0 ? "F"
                                      : std::get<1>(it->second) == 0                   ? "B"
                                      : std::get<2>(it->second) == 0                   ? "W"
                                                                                       : nullptr;
                CHECK(!missing, "%sstage %d never runs the %s of micro-batch %d on its chunk %d (virtual stage %d)",
                      prefix().c_str(), stage, missing, j, chunk, s);
            }
    }

    // What op k of `stage` receives (first) and sends (second); `none` when it does neither.
    std::pair<std::vector<std::pair<int, Message>>, std::vector<std::pair<int, Message>>> messages(int stage,
                                                                                                 const PipeOp& op) const {
        std::vector<std::pair<int, Message>> in, out;  // (peer stage, message)
        const int s = P.virtual_stage(stage, op.chunk, op.mb), S = P.virtual_stages;
        if (op.kind == PipeOpKind::F) {
            if (s > 0) in.push_back({P.where(op.mb, s - 1).first, {true, op.mb, s}});
            if (s < S - 1) out.push_back({P.where(op.mb, s + 1).first, {true, op.mb, s + 1}});
        } else if (op.kind != PipeOpKind::W) {
            if (s < S - 1) in.push_back({P.where(op.mb, s + 1).first, {false, op.mb, s}});
            if (s > 0) out.push_back({P.where(op.mb, s - 1).first, {false, op.mb, s - 1}});
        }
        return {in, out};
    }

    // per ordered pair of stages: the messages in the order the sender sends them and the receiver receives them
    void message_order() const {
        std::map<std::pair<int, int>, std::vector<Message>> sent, received;
        std::map<std::pair<int, int>, std::vector<int>> received_at;  // the receiving op's index
        for (int r = 0; r < P.stages; r++)
            for (int k = 0; k < (int)P.ops[r].size(); k++) {
                const auto [in, out] = messages(r, P.ops[r][k]);
                for (const auto& [from, m] : in) received[{from, r}].push_back(m), received_at[{from, r}].push_back(k);
                for (const auto& [to, m] : out) sent[{r, to}].push_back(m);
            }
        for (const auto& [pair, recv] : received) {
            const std::vector<Message>& send = sent[pair];
            for (size_t i = 0; i < recv.size() && i < send.size(); i++)
                CHECK(recv[i] == send[i],
                      "%s%s receives %s as its message %zu from stage %d, which sends %s as that message: a pair of "
                      "stages must receive in the order they send (NCCL matches by order)", prefix().c_str(),
                      at(pair.second, received_at.at(pair)[i]).c_str(), message_str(recv[i]).c_str(), i, pair.first,
                      message_str(send[i]).c_str());
        }
    }

    // advance every stage while its next op's message has been sent; what is left when none can is a deadlock
    void deadlock() const {
        std::set<std::tuple<bool, int, int>> sent;  // (forward, mb, to)
        std::vector<int> next(P.stages, 0);
        for (bool progress = true; progress;) {
            progress = false;
            for (int r = 0; r < P.stages; r++)
                while (next[r] < (int)P.ops[r].size()) {
                    const auto [in, out] = messages(r, P.ops[r][next[r]]);
                    bool ready = true;
                    for (const auto& [from, m] : in) ready &= sent.count({m.forward, m.mb, m.to}) > 0;
                    if (!ready) break;
                    for (const auto& [to, m] : out) sent.insert({m.forward, m.mb, m.to});
                    next[r]++, progress = true;
                }
        }
        std::string stuck;
        for (int r = 0; r < P.stages; r++) {
            if (next[r] == (int)P.ops[r].size()) continue;
            const auto [in, out] = messages(r, P.ops[r][next[r]]);
            for (const auto& [from, m] : in) {
                if (sent.count({m.forward, m.mb, m.to})) continue;
                int k = 0;  // where the sender lists the op that sends it
                for (; k < (int)P.ops[from].size(); k++) {
                    const auto [fin, fout] = messages(from, P.ops[from][k]);
                    bool sends = false;
                    for (const auto& [to, fm] : fout) sends |= to == r && fm == m;
                    if (sends) break;
                }
                stuck += strfmt("\n  %s waits for %s from stage %d, which sends it at its op %d (%s) but is stuck at "
                                "its op %d", at(r, next[r]).c_str(), message_str(m).c_str(), from, k,
                                k < (int)P.ops[from].size() ? pipe_op_str(P.ops[from][k]).c_str() : "never",
                                next[from]);
            }
        }
        CHECK(stuck.empty(), "%sdeadlock: no stage can go on (sends do not block, receives do):%s", prefix().c_str(),
              stuck.c_str());
    }
};

}  // namespace

void check_plan(const PipelinePlan& plan) {
    Checker c{plan};
    c.shape();
    c.inputs();
    c.message_order();
    c.deadlock();
}

}  // namespace penta
