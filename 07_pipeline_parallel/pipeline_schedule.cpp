// pipeline_schedule.cpp — the five schedules' lists, where each virtual stage runs, and how the layers are cut
// (pipeline_schedule.hpp). The checker is tools/schedule_check.cpp.
// Playbook: "Pipeline parallelism". Test: `build/bin/tests_07 -ts='ch07 np1'`.
#include "pipeline_schedule.hpp"

#include <deque>
#include <sstream>

#include "../common/config.hpp"
#include "../common/core.hpp"
#include "tools/schedule_play.hpp"

namespace penta {

const char* pipe_op_name(PipeOpKind k) {
    switch (k) {
        case PipeOpKind::F: return "F";
        case PipeOpKind::B: return "B";
        case PipeOpKind::W: return "W";
        case PipeOpKind::BW: return "BW";
    }
    return "?";
}

std::string pipe_op_str(const PipeOp& op) {
    return strfmt("%s mb %d chunk %d", pipe_op_name(op.kind), op.mb, op.chunk);
}

PipeScheduleKind parse_pipe_schedule(const std::string& v) {
    if (v == "afab") return PipeScheduleKind::afab;
    if (v == "1f1b") return PipeScheduleKind::one_f_one_b;
    if (v == "interleaved") return PipeScheduleKind::interleaved;
    if (v == "zb1") return PipeScheduleKind::zb1;
    CHECK(v == "dualpipe", "--pp-schedule '%s' must be afab, 1f1b, interleaved, zb1 or dualpipe", v.c_str());
    return PipeScheduleKind::dualpipe;
}

const char* pipe_schedule_name(PipeScheduleKind k) {
    switch (k) {
        case PipeScheduleKind::afab: return "afab";
        case PipeScheduleKind::one_f_one_b: return "1f1b";
        case PipeScheduleKind::interleaved: return "interleaved";
        case PipeScheduleKind::zb1: return "zb1";
        case PipeScheduleKind::dualpipe: return "dualpipe";
    }
    return "?";
}

int PipelinePlan::virtual_stage(int stage, int chunk, int mb) const {
    const std::vector<std::pair<int, int>>& p = place.at(direction.at(mb));
    for (int s = 0; s < (int)p.size(); s++)
        if (p[s].first == stage && p[s].second == chunk) return s;
    return -1;
}

int PipelinePlan::piece(int stage, int chunk) const {
    for (const auto& p : place)
        for (int s = 0; s < (int)p.size(); s++)
            if (p[s].first == stage && p[s].second == chunk) return s;
    FAIL("pipeline plan: stage %d holds no chunk %d", stage, chunk);
}

namespace {

PipeOp F(int mb, int chunk = 0) { return {PipeOpKind::F, mb, chunk}; }
PipeOp B(int mb, int chunk = 0) { return {PipeOpKind::B, mb, chunk}; }
PipeOp W(int mb, int chunk = 0) { return {PipeOpKind::W, mb, chunk}; }
PipeOp BW(int mb, int chunk = 0) { return {PipeOpKind::BW, mb, chunk}; }

// one direction, one chunk per stage: virtual stage s on stage s
PipelinePlan linear_plan(PipeScheduleKind kind, int p, int m) {
    PipelinePlan P;
    P.kind = kind, P.stages = p, P.chunks = 1, P.micro_batches = m, P.virtual_stages = p;
    P.direction.assign(m, 0);
    P.place.resize(1);
    for (int s = 0; s < p; s++) P.place[0].push_back({s, 0});
    P.ops.resize(p);
    return P;
}

// AFAB, all-forward-all-backward (GPipe): bubble (p-1)/m; every stage holds all m micro-batches' activations.
// Every forward, then every backward.
PipelinePlan afab(int p, int m) {
    PipelinePlan P = linear_plan(PipeScheduleKind::afab, p, m);
    // EXERCISE 07.2 begin: AFAB (GPipe)'s op list: every forward, then every backward
    for (int i = 0; i < p; i++) {
        for (int j = 0; j < m; j++) P.ops[i].push_back(F(j));
        for (int j = 0; j < m; j++) P.ops[i].push_back(BW(j));
    }
    // EXERCISE 07.2 end
    return P;
}

// 1F1B, one-forward-one-backward (PipeDream-flush, Megatron-LM): bubble (p-1)/m, AFAB's; stage i holds p-i.
// Stage i runs p-i-1 forwards ahead, then alternates, so at most p-i micro-batches wait for their backward on it.
PipelinePlan one_f_one_b(int p, int m) {
    PipelinePlan P = linear_plan(PipeScheduleKind::one_f_one_b, p, m);
    // EXERCISE 07.1 begin: 1F1B's op list: stage i runs p-i-1 warm-up forwards, then alternates one forward and one backward, then drains
    for (int i = 0; i < p; i++) {
        const int warmup = std::min(p - i - 1, m);
        int f = 0;
        for (; f < warmup; f++) P.ops[i].push_back(F(f));
        for (int b = 0; b < m; b++) {
            if (f < m) P.ops[i].push_back(F(f++));
            P.ops[i].push_back(BW(b));
        }
    }
    // EXERCISE 07.1 end
    return P;
}

// ZB-H1, zero bubble (Qi et al. 2024): bubble (p-1)(F+B-W)/(m(F+B+W)), a third of 1F1B's at F = B = W.
// The 1F1B order with B and W apart. Stage i keeps i W's pending: stage 0, whose backwards come last and
// end the step, runs each W at once (B0 W0); the last stage, whose backwards are done first and which would idle
// through the cool-down while the gradients travel back to stage 0, fills it with its p-1 deferred W's (... B7
// W4 W5 W6 W7 at p 4, m 8).
// At most p micro-batches are between their F and their W on any stage: 1F1B's first stage's count.
PipelinePlan zb1(int p, int m) {
    PipelinePlan P = linear_plan(PipeScheduleKind::zb1, p, m);
    for (int i = 0; i < p; i++) {
        std::vector<PipeOp>& L = P.ops[i];
        const int warmup = std::min(p - i - 1, m);
        int f = 0;
        std::deque<int> pending;  // micro-batches whose B ran and whose W has not
        for (; f < warmup; f++) L.push_back(F(f));
        for (int b = 0; b < m; b++) {
            if (f < m) L.push_back(F(f++));
            L.push_back(B(b));
            pending.push_back(b);
            while ((int)pending.size() > i) L.push_back(W(pending.front())), pending.pop_front();
        }
        for (int b : pending) L.push_back(W(b));
    }
    return P;
}

// interleaved's wish (streams: forwards, backwards): a forward while one is left and fewer than hint + 1 run
// ahead of the backwards (the warm-up, then 1F1B), else a backward
std::vector<int> one_f_one_b_wish(const std::vector<int>& done, const StageWish& w) {
    const int nf = done[0], nb = done[1];
    if (nf < (int)w.streams[0].size() && nf < w.hint + 1 + nb) return {0, 1};
    return {1, 0};
}

// Interleaved 1F1B (Megatron-LM, v model chunks per stage): bubble (p-1)/(v·m) with full rounds of p.
// Virtual stage s = c·p + i lives on stage i as its chunk c. Forwards go in rounds of p micro-batches through chunk
// 0, then chunk 1, ...; backwards the same rounds through the chunks in reverse; with m not a multiple of p the last
// round is short (m mod p micro-batches), as Megatron-LM's schedule table does. Stage i wants 2(p-i-1) + (v-1)p
// forwards ahead, then to alternate. With full rounds those lists run as they are; with a short one the play
// (tools/schedule_play.hpp) runs a backward early where the wanted order would receive from a peer out of the order
// it sends (p 2) or deadlock (p 4, v 3).
PipelinePlan interleaved(int p, int m, int v) {
    PipelinePlan P;
    P.kind = PipeScheduleKind::interleaved, P.stages = p, P.chunks = v, P.micro_batches = m, P.virtual_stages = p * v;
    P.direction.assign(m, 0);
    P.place.resize(1);
    for (int s = 0; s < p * v; s++) P.place[0].push_back({s % p, s / p});
    std::vector<PipeOp> fwd, bwd;  // the order every stage follows
    for (int g0 = 0; g0 < m; g0 += p) {
        const int g = std::min(p, m - g0);  // the last round: what is left
        for (int c = 0; c < v; c++)
            for (int j = 0; j < g; j++) fwd.push_back(F(g0 + j, c));
        for (int c = v - 1; c >= 0; c--)
            for (int j = 0; j < g; j++) bwd.push_back(BW(g0 + j, c));
    }
    std::vector<StageWish> wishes(p);
    for (int i = 0; i < p; i++) {
        wishes[i].streams = {fwd, bwd};
        wishes[i].prefer = one_f_one_b_wish;
        wishes[i].hint = std::min(2 * (p - i - 1) + (v - 1) * p, m * v);
    }
    P.departures = play_schedule(P, wishes, true).departures;
    return P;
}

// both directions' places: stage i runs virtual stage i of direction 0 (chunk 0) and p-1-i of direction 1 (chunk
// 1); the first `down` micro-batches go down, the rest up
PipelinePlan dualpipe_places(int p, int m, int down) {
    PipelinePlan P;
    P.kind = PipeScheduleKind::dualpipe, P.stages = p, P.chunks = 2, P.micro_batches = m, P.virtual_stages = p;
    for (int j = 0; j < m; j++) P.direction.push_back(j < down ? 0 : 1);
    P.place.resize(2);
    for (int s = 0; s < p; s++) P.place[0].push_back({s, 0}), P.place[1].push_back({p - 1 - s, 1});
    P.ops.resize(p);
    return P;
}

// streams f0, f1, b0, b1: the backwards first (they free memory and feed the stages behind), the one of the
// direction entering at this end first; then the forwards that came from the far end (a stage down the line
// waits for them); a new micro-batch of the near direction last. (Near-direction forwards first idle more:
// 0.1333 instead of 0.0667 at p 4, m 5.)
std::vector<int> dualpipe_wish(const std::vector<int>& done, const StageWish& w) {
    return w.hint == 0 ? std::vector<int>{2, 3, 1, 0} : std::vector<int>{3, 2, 0, 1};
}

// DualPipe for the m its eight steps do not take (odd, or fewer than 2p - 2): the same two directions and places,
// ceil(m/2) micro-batches down and floor(m/2) up, played greedily (tools/schedule_play.hpp): a stage runs the first
// ready op of its wish — a backward (B now, its W when nothing else is ready), else a forward, at most p + 1
// micro-batch chunks held at once as DualPipe does.
PipelinePlan dualpipe_played(int p, int m) {
    const int down = (m + 1) / 2;
    PipelinePlan P = dualpipe_places(p, m, down);
    std::vector<StageWish> wishes(p);
    for (int r = 0; r < p; r++) {
        std::vector<PipeOp> f0, f1, b0, b1;
        for (int j = 0; j < m; j++) {
            const int d = P.direction[j];
            (d ? f1 : f0).push_back(F(j, d));
            (d ? b1 : b0).push_back(B(j, d));
        }
        wishes[r].streams = {f0, f1, b0, b1};
        wishes[r].prefer = dualpipe_wish;
        wishes[r].hint = r >= p / 2;  // which direction enters here: 0 down (first half), 1 up
        wishes[r].cap = p + 1;
    }
    P.departures = play_schedule(P, wishes, false).departures;
    return P;
}

// DualPipe (DeepSeek-V3), two directions: bubble at most (p/2-1)(F+2B-W)/(m(F+B+W)), two model copies a stage.
// Stage i holds virtual stage i of direction 0 (its chunk 0: micro-batches 0..m/2-1
// enter at stage 0) and virtual stage p-1-i of direction 1 (its chunk 1: micro-batches m/2..m-1 enter at
// stage p-1). The op order is the eight steps of DeepSeek's dualpipe.py step(): a stage calls its two
// directions "phase 0" and "phase 1", phase 0 being direction 0 on the first half of the stages and direction 1
// on the second half. An F&B step of theirs (one chunk's forward overlapped with the other's backward) is F
// then BW here; their zero-bubble backwards (enable_zb) are B now and W later, in first-in first-out order. The
// steps need m even and m >= 2p - 2; other m are played (dualpipe_played).
PipelinePlan dualpipe(int p, int m) {
    if (m % 2 || m < 2 * p - 2) return dualpipe_played(p, m);
    const int half = p / 2, hm = m / 2;
    PipelinePlan P = dualpipe_places(p, m, hm);
    for (int r = 0; r < p; r++) {
        std::vector<PipeOp>& L = P.ops[r];
        const int second = r >= half, hr = std::min(r, p - 1 - r);
        int f[2] = {0, 0}, b[2] = {0, 0};
        std::deque<PipeOp> deferred;  // B's whose W is still to run
        auto fwd = [&](int phase) {
            const int d = phase ^ second;
            L.push_back(F(d * hm + f[d]++, d));
        };
        auto bwd = [&](int phase, bool zero_bubble) {
            const int d = phase ^ second, mb = d * hm + b[d]++;
            L.push_back(zero_bubble ? B(mb, d) : BW(mb, d));
            if (zero_bubble) deferred.push_back(W(mb, d));
        };
        auto weight = [&] {
            L.push_back(deferred.front());
            deferred.pop_front();
        };
        for (int i = 0; i < (half - hr - 1) * 2; i++) fwd(0);              // step 1: nF0
        for (int i = 0; i < hr + 1; i++) fwd(0), fwd(1);                   // step 2: nF0F1
        for (int i = 0; i < half - hr - 1; i++) bwd(1, true), weight(), fwd(1);  // step 3: nB1W1F1
        for (int i = 0; i < hm - p + hr + 1; i++)                           // step 4: nF0B1F1B0
            fwd(0), bwd(1, false), fwd(1), bwd(0, false);
        for (int i = 0; i < half - hr - 1; i++) bwd(1, false), fwd(1), bwd(0, false);  // step 5: nB1F1B0
        bool zb = false;                                                    // step 6: nB1B0, the second half zero-bubble
        for (int i = 0; i < hr + 1; i++) {
            if (i == (hr + 1) / 2 && hr % 2 == 1) zb = true;
            bwd(1, zb);
            if (i == (hr + 1) / 2 && hr % 2 == 0) zb = true;
            bwd(0, zb);
        }
        for (int i = 0; i < half - hr - 1; i++) weight(), bwd(0, true);    // step 7: nWB0
        while (!deferred.empty()) weight();                                // step 8: nW
    }
    return P;
}

}  // namespace

PipelinePlan generate_pipeline_plan(PipeScheduleKind kind, int p, int m, int v) {
    CHECK(p >= 1 && m >= 1 && v >= 1, "a pipeline needs p >= 1 stages, m >= 1 micro-batches, v >= 1 chunks");
    switch (kind) {
        case PipeScheduleKind::afab: return afab(p, m);
        case PipeScheduleKind::one_f_one_b: return one_f_one_b(p, m);
        case PipeScheduleKind::interleaved: return interleaved(p, m, v);
        case PipeScheduleKind::zb1: return zb1(p, m);
        case PipeScheduleKind::dualpipe: return dualpipe(p, m);
    }
    FAIL("unknown pipeline schedule");
}

void check_pipeline_shape(PipeScheduleKind kind, int p, int v) {
    CHECK(v == 1 || kind == PipeScheduleKind::interleaved,
          "--pp-chunks %d: only --pp-schedule interleaved gives a stage several model chunks (dualpipe holds two, one "
          "per direction, by itself)", v);
    if (kind == PipeScheduleKind::dualpipe)
        CHECK(p % 2 == 0,
              "--pp-schedule dualpipe pairs stage i with stage p-1-i, the two copies of one piece of the model: with --pp "
              "%d (odd) the middle stage would pair with itself and hold one piece twice: --pp must be even", p);
}

PipelinePlan make_pipeline_plan(PipeScheduleKind kind, int p, int m, int v) {
    check_pipeline_shape(kind, p, v);
    PipelinePlan P = generate_pipeline_plan(kind, p, m, v);
    check_plan(P);
    return P;
}

std::vector<int64_t> parse_layer_sizes(const std::string& v) {
    std::vector<int64_t> sizes;
    const std::string rule = "--pp-layers '" + v + "': each entry must be a number of layers >= 1, as in 3,3,2";
    // every comma separates two entries: "2,2," has an empty third one, refused rather than dropped
    for (size_t at = 0;;) {
        const size_t comma = v.find(',', at);
        const std::string item = v.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
        CHECK(!item.empty() && item.find_first_not_of("0123456789") == std::string::npos, "%s", rule.c_str());
        sizes.push_back(parse_integer("--pp-layers '" + v + "': entry", item, 1, kIntFlagMax));  // a sum cannot wrap
        if (comma == std::string::npos) break;
        at = comma + 1;
    }
    return sizes;
}

std::vector<LayerRange> split_layers(int64_t n_layers, int64_t S, const std::vector<int64_t>& sizes) {
    std::vector<int64_t> n = sizes;
    if (n.empty()) {
        CHECK(n_layers >= S,
              "the model has %lld layers, fewer than the pipeline's %lld virtual stages (--pp × --pp-chunks): every "
              "stage needs at least one layer", (long long)n_layers, (long long)S);
        for (int64_t s = 0; s < S; s++) n.push_back(n_layers / S + (s < n_layers % S ? 1 : 0));
    }
    CHECK((int64_t)n.size() == S, "--pp-layers lists %zu stages; the pipeline has %lld virtual stages (--pp × "
          "--pp-chunks)", n.size(), (long long)S);
    int64_t total = 0;
    for (int64_t k : n) total += k;
    CHECK(total == n_layers, "--pp-layers adds up to %lld layers; the model has %lld", (long long)total,
          (long long)n_layers);
    std::vector<LayerRange> pieces;
    int64_t at = 0;
    for (int64_t k : n) pieces.push_back({at, at + k}), at += k;
    return pieces;
}

PipelineSlice stage_slice(const PipelinePlan& plan, const std::vector<LayerRange>& pieces, int stage) {
    PipelineSlice s;
    s.has_embedding = s.has_head = false;
    for (int c = 0; c < plan.chunks; c++) {
        const int v = plan.piece(stage, c);
        const LayerRange r = pieces.at(v);
        if (c == 0) s.layer_begin = r.begin, s.layer_end = r.end;
        else s.more_chunks.push_back(r);
        s.has_embedding |= v == 0;
        s.has_head |= v == plan.virtual_stages - 1;
    }
    if (plan.kind == PipeScheduleKind::dualpipe)
        s.mirror = stage < plan.stages / 2 ? PipelineSlice::Mirror::primary : PipelineSlice::Mirror::replica;
    return s;
}

}  // namespace penta
