// schedule_play.cpp — play_schedule (schedule_play.hpp): the pipeline played on the logical clock, every stage
// at once, writing down what each stage runs.
// Playbook: "Pipeline parallelism". Test: `build/bin/tests_07 -ts='ch07 np1'`.
#include "schedule_play.hpp"

#include <deque>
#include <map>
#include <set>
#include <tuple>

#include "../../common/core.hpp"

namespace penta {

namespace {

using Key = std::tuple<bool, int, int>;  // a message: (activation?, micro-batch, the virtual stage it is for)
struct Sent {
    Key key;
    int arrives;  // the sender's op ends
};

struct Player {
    PipelinePlan& P;
    const std::vector<StageWish>& wishes;
    std::map<std::pair<int, int>, std::vector<Sent>> channel;  // (from, to) in the order sent
    std::map<std::pair<int, int>, size_t> received;           // how many of them `to` received
    struct Stage {
        std::vector<int> done;                 // ops run per stream
        std::set<std::pair<int, int>> fwd;     // (mb, chunk) whose F ran here
        std::deque<PipeOp> pending_w;          // W's of B's that ran
        int busy_until = 0, in_flight = 0;
    };
    std::vector<Stage> st;

    static int cost(PipeOpKind k) { return k == PipeOpKind::BW ? 2 : 1; }
    bool exhausted(int r, int s) const { return st[r].done[s] >= (int)wishes[r].streams[s].size(); }
    const PipeOp& head(int r, int s) const { return wishes[r].streams[s][st[r].done[s]]; }

    // the message op receives and from which stage; false: none
    bool input(int r, const PipeOp& op, int& from, Key& key) const {
        const int s = P.virtual_stage(r, op.chunk, op.mb);
        if (op.kind == PipeOpKind::F && s > 0) {
            from = P.where(op.mb, s - 1).first, key = {true, op.mb, s};
            return true;
        }
        if ((op.kind == PipeOpKind::B || op.kind == PipeOpKind::BW) && s < P.virtual_stages - 1) {
            from = P.where(op.mb, s + 1).first, key = {false, op.mb, s};
            return true;
        }
        return false;
    }

    // can stage r run op at time t? behind: its message was sent, after another not yet received from that peer
    bool ready(int r, const PipeOp& op, int t, bool& behind) const {
        behind = false;
        if (op.kind != PipeOpKind::F && !st[r].fwd.count({op.mb, op.chunk})) return false;
        int from;
        Key key;
        if (!input(r, op, from, key)) return true;
        const auto ch = channel.find({from, r});
        if (ch == channel.end()) return false;
        const size_t at = from == r ? 0 : received.at({from, r});  // a stage's own messages: in any order
        for (size_t i = at; i < ch->second.size(); i++)
            if (ch->second[i].key == key) {
                behind = from != r && i > at;
                return !behind && ch->second[i].arrives <= t;
            }
        return false;
    }

    void run(int r, const PipeOp& op, int t) {
        Stage& S = st[r];
        int from;
        Key key;
        if (input(r, op, from, key)) {
            if (from == r) {
                auto& ch = channel[{r, r}];
                for (size_t i = 0; i < ch.size(); i++)
                    if (ch[i].key == key) { ch.erase(ch.begin() + (long)i); break; }
            } else {
                received[{from, r}]++;
            }
        }
        const int end = t + cost(op.kind), s = P.virtual_stage(r, op.chunk, op.mb);
        if (op.kind == PipeOpKind::F && s < P.virtual_stages - 1) {
            const int to = P.where(op.mb, s + 1).first;
            channel[{r, to}].push_back({{true, op.mb, s + 1}, end});
            received.insert({{r, to}, 0});
        }
        if ((op.kind == PipeOpKind::B || op.kind == PipeOpKind::BW) && s > 0) {
            const int to = P.where(op.mb, s - 1).first;
            channel[{r, to}].push_back({{false, op.mb, s - 1}, end});
            received.insert({{r, to}, 0});
        }
        if (op.kind == PipeOpKind::F) S.fwd.insert({op.mb, op.chunk}), S.in_flight++;
        if (op.kind == PipeOpKind::B) S.pending_w.push_back({PipeOpKind::W, op.mb, op.chunk});
        if (op.writes_weight_grads()) S.in_flight--;
        P.ops[r].push_back(op);
        S.busy_until = end;
    }

    // the streams stage r would take, in order, leaving out the finished ones
    std::vector<int> preference(int r) const {
        std::vector<int> order;
        for (int s : wishes[r].prefer(st[r].done, wishes[r]))
            if (!exhausted(r, s)) order.push_back(s);
        return order;
    }

    bool finished(int r) const {
        for (int s = 0; s < (int)wishes[r].streams.size(); s++)
            if (!exhausted(r, s)) return false;
        return st[r].pending_w.empty();
    }

    // stage r, free at t, runs what its wish allows; departures counts the ops out of the wanted order
    bool step(int r, int t, bool strict, int& departures) {
        Stage& S = st[r];
        const std::vector<int> order = preference(r);
        for (size_t i = 0; i < order.size(); i++) {
            const PipeOp& op = head(r, order[i]);
            const bool capped = !strict && op.kind == PipeOpKind::F && wishes[r].cap > 0 && S.in_flight >= wishes[r].cap;
            bool behind = false;
            if (!capped && ready(r, op, t, behind)) {
                run(r, op, t);
                st[r].done[order[i]]++;
                departures += strict && i > 0;
                return true;
            }
            if (strict && !behind) break;  // wait for the wanted op (or, behind another message, take that one)
        }
        if (!S.pending_w.empty() && (!strict || order.empty())) {
            run(r, S.pending_w.front(), t);
            S.pending_w.pop_front();
            return true;
        }
        return false;
    }

    // nothing runs and nothing is under way: the first stage with any op ready departs from its wish
    bool unblock(int t, int& departures) {
        for (int r = 0; r < P.stages; r++) {
            const std::vector<int> order = preference(r);
            for (int s : order) {
                bool behind;
                if (ready(r, head(r, s), t, behind)) {
                    run(r, head(r, s), t);
                    st[r].done[s]++, departures++;
                    return true;
                }
            }
            if (!st[r].pending_w.empty()) {
                run(r, st[r].pending_w.front(), t);
                st[r].pending_w.pop_front();
                return true;
            }
        }
        return false;
    }
};

}  // namespace

PlayResult play_schedule(PipelinePlan& plan, const std::vector<StageWish>& wishes, bool strict) {
    CHECK((int)wishes.size() == plan.stages, "play_schedule: %zu wishes for %d stages", wishes.size(), plan.stages);
    Player pl{plan, wishes, {}, {}, {}};
    plan.ops.assign(plan.stages, {});
    pl.st.resize(plan.stages);
    for (int r = 0; r < plan.stages; r++) pl.st[r].done.assign(wishes[r].streams.size(), 0);
    PlayResult res;
    for (int t = 0;;) {
        bool all_done = true, ran = false, busy = false;
        for (int r = 0; r < plan.stages; r++) {
            if (pl.st[r].busy_until > t) busy = true;  // its last op may still be sending
            if (pl.finished(r)) continue;
            all_done = false;
            if (pl.st[r].busy_until > t) continue;
            ran |= pl.step(r, t, strict, res.departures);
        }
        if (all_done) break;
        if (!ran && !busy)
            CHECK(pl.unblock(t, res.departures), "pipeline schedule %s (p %d, m %d): no stage can run any op at time %d",
                  pipe_schedule_name(plan.kind), plan.stages, plan.micro_batches, t);
        int next = -1;  // the next time a stage is free
        for (int r = 0; r < plan.stages; r++)
            if (pl.st[r].busy_until > t && (next < 0 || pl.st[r].busy_until < next)) next = pl.st[r].busy_until;
        t = next < 0 ? t : next;
    }
    return res;
}

}  // namespace penta
