// pp_report.cpp — PipelineTraining::print_measured (pp_training.hpp): the last step of every stage, gathered,
// shown on the logical clock and the wall clock beside the playbook's formulas.
// Playbook: "Pipeline parallelism". Run: `mpirun -np 4 build/bin/07_pipeline_parallel --pp 4 --grad-accum 8`.
#include <algorithm>
#include <cstdio>

#include "../../common/formulas.hpp"
#include "../../common/runtime.hpp"
#include "../pp_training.hpp"

namespace penta {

namespace {

// the formula of the schedule's bubble with these costs, and what it says
std::pair<double, std::string> bubble_formula(const PipelinePlan& P, const LogicalCosts& c) {
    const int p = P.stages, m = P.micro_batches, v = P.chunks;
    switch (P.kind) {
        case PipeScheduleKind::afab:
        case PipeScheduleKind::one_f_one_b: return {pipeline_bubble_1f1b(p, m), "(p-1)/m"};
        case PipeScheduleKind::interleaved:
            return {pipeline_bubble_interleaved(p, m, v),
                    m % p ? "(p-1)/(v·m) for full rounds; a short last round idles more" : "(p-1)/(v·m)"};
        case PipeScheduleKind::zb1:
            return {pipeline_bubble_zb1(p, m, c.f, c.b, c.w),
                    c.w <= c.f && m >= p ? "(p-1)(F+B-W)/(m(F+B+W))" : "(p-1)(F+B-W)/(m(F+B+W)), for W <= F, m >= p only"};
        case PipeScheduleKind::dualpipe: return {pipeline_bubble_dualpipe_bound(p, m, c.f, c.b, c.w), "at most (p/2-1)(F+2B-W)/(m(F+B+W))"};
    }
    return {0, ""};
}

// the most chunks between F and W on stage i, by formula; -1 when the playbook has none for this case
int in_flight_formula(const PipelinePlan& P, int i) {
    const int p = P.stages, m = P.micro_batches;
    switch (P.kind) {
        case PipeScheduleKind::afab: return pipeline_in_flight_afab(m);
        case PipeScheduleKind::one_f_one_b: return pipeline_in_flight_1f1b(p, i, m);
        case PipeScheduleKind::interleaved: return m % p ? -1 : pipeline_in_flight_interleaved(p, i, m, P.chunks);
        case PipeScheduleKind::zb1: return pipeline_in_flight_zb1(p, m);
        case PipeScheduleKind::dualpipe: return m >= 2 * p && m % 2 == 0 ? pipeline_in_flight_dualpipe(p) : -1;
    }
    return -1;
}

const char* in_flight_text(PipeScheduleKind k) {
    switch (k) {
        case PipeScheduleKind::afab: return "m";
        case PipeScheduleKind::one_f_one_b: return "p-i";
        case PipeScheduleKind::interleaved: return "2(p-i-1)+(v-1)p+1 chunks";
        case PipeScheduleKind::zb1: return "p";
        case PipeScheduleKind::dualpipe: return "p+1 (m >= 2p)";
    }
    return "";
}

std::string mark(bool equal) { return equal ? "(equal)" : "(DIFFERENT)"; }

}  // namespace

void PipelineTraining::print_measured() {
    const PipelinePlan& P = parts->plan;
    const PipelineStepRecords R = gather_step_records(grid->pp(), parts->executor->last_step(), P.chunks);
    if (world_rank() != 0) return;
    const int p = P.stages, m = P.micro_batches;
    const std::vector<std::vector<PipeOp>> ran = R.ops();

    const LogicalCosts set{1, pf.cost_b, pf.cost_w};
    const LogicalClock L = replay(P, ran, set);
    std::printf("\n%s on %d stages, %d micro-batches, the last step as it ran, on the logical clock:\n%s",
                pipe_schedule_name(kind), p, m, ascii_timeline(P, ran, L, set).c_str());

    const LogicalCosts meas = measured_costs(R);
    const LogicalClock LM = replay(P, ran, meas);
    const std::vector<double> wall = wall_bubble(R);
    const auto [f_set, text] = bubble_formula(P, set);
    const double f_meas = bubble_formula(P, meas).first;
    bool split = false;  // did any B run apart from its W (else the measured B : W is taken as 2 : 1)
    for (const auto& ops : ran)
        for (const PipeOp& o : ops) split |= o.kind == PipeOpKind::W;
    std::printf("\nbubble = idle / compute time of a stage in the step; formula %s%s\n", text.c_str(),
                split ? "" : "; the measured fused backward split B : W = 2 : 1");
    std::printf("  stage   logical (F=1 B=%g W=%g)  formula   | measured costs (F=1 B=%.2f W=%.2f)  formula | wall clock\n",
                set.b, set.w, meas.b, meas.w);
    for (int r = 0; r < p; r++) {
        // exact: AFAB, 1F1B, interleaved with full rounds, ZB-H1 for W <= F and m >= p; a bound for the others
        const bool exact = P.kind != PipeScheduleKind::dualpipe && (P.kind != PipeScheduleKind::zb1 || (set.w <= set.f && m >= p)) &&
                           (P.kind != PipeScheduleKind::interleaved || m % p == 0);
        const bool ok = exact ? std::abs(L.bubble(r) - f_set) < 1e-9 : L.bubble(r) <= f_set + 1e-9;
        std::printf("  %5d   %22.4f  %7.4f %-11s | %34.4f  %7.4f | %10.4f\n", r, L.bubble(r), f_set,
                    exact ? mark(ok).c_str() : (ok ? "(below)" : P.kind == PipeScheduleKind::interleaved ? "(above)" : "(ABOVE)"), LM.bubble(r), f_meas, wall[r]);
    }
    if (P.kind == PipeScheduleKind::zb1 && meas.w > meas.f)
        std::printf("  (measured W > F: a deferred W no longer fits where 1F1B idles, and ZB-H1's formula stops holding)\n");
    std::printf("  (1F1B's bubble is AFAB's: (p-1)/m = %.4f; the wall clock adds the messages' time, and on oversubscribed "
                "cores the other ranks' compute)\n", pipeline_bubble_1f1b(p, m));

    std::printf("\nheld between F and W at once, per stage (peak over the step): micro-batch chunks, formula %s; and "
                "the activations they keep (Tag::activations)\n", in_flight_text(kind));
    const bool one_piece = P.chunks == 1 && P.kind != PipeScheduleKind::zb1;
    for (int r = 0; r < p; r++) {
        int peak = 0;
        int64_t bytes = 0;
        for (const PipeOpRecord& o : R.stages[r]) {
            peak = std::max(peak, o.in_flight);
            bytes = std::max(bytes, o.activation_bytes - R.activations_before[r]);
        }
        const int f = in_flight_formula(P, r);
        std::printf("  stage %d: %3d in flight  formula %s %-11s  activations %s", r, peak,
                    f < 0 ? "  -" : strfmt("%3d", f).c_str(), f < 0 ? "" : mark(peak == f).c_str(),
                    human_bytes(bytes).c_str());
        if (one_piece) {  // every micro-batch keeps the same bytes until its fused backward frees them
            const int64_t want = (int64_t)peak * R.forward_bytes[r][0];
            std::printf(" = %d x %s one forward keeps %s", peak, human_bytes(R.forward_bytes[r][0]).c_str(),
                        mark(bytes == want).c_str());
        }
        std::printf("\n");
    }
    if (!one_piece)
        std::printf("  (with chunks of different sizes, or what B leaves for a deferred W, the bytes are not a count times "
                    "one forward's)\n");

    // bytes: one (b·s, h) tensor per message that leaves the stage, activations forward and gradients back
    const int64_t tokens = cfg.micro_batch * cfg.seq / (cfg.sp ? cfg.tp : 1);  // SP: this rank's share of the sequence
    const int64_t elem = dtype_size(parts->model->precision().act);
    std::printf("\nbytes each stage sent on the pipeline group in the step (one (%ld, %ld) tensor of %ld-byte elements "
                "per activation passed on and per gradient passed back):\n", (long)tokens, (long)mc.hidden, (long)elem);
    for (int r = 0; r < p; r++) {
        int64_t sends = 0;
        for (const PipeOp& op : ran[r]) {
            const int s = P.virtual_stage(r, op.chunk, op.mb);
            if (op.kind == PipeOpKind::F && s < P.virtual_stages - 1 && P.where(op.mb, s + 1).first != r) sends++;
            if ((op.kind == PipeOpKind::B || op.kind == PipeOpKind::BW) && s > 0 && P.where(op.mb, s - 1).first != r)
                sends++;
        }
        const double f = pipeline_stage_bytes(sends, tokens, mc.hidden, elem);
        std::printf("  stage %d: %10.0f bytes  formula %3ld messages x %ld x %ld x %ld = %10.0f %s\n", r, R.sent_bytes[r],
                    (long)sends, (long)tokens, (long)mc.hidden, (long)elem, f,
                    mark(formula_matches(R.sent_bytes[r], f)).c_str());
    }
    if (parts->replicas)
        std::printf("  (and the tensors two stages hold, summed over the mirror pair once per step: %.0f bytes so far on "
                    "rank 0)\n", parts->replicas->bytes());
}

}  // namespace penta
