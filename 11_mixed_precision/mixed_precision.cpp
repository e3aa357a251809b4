// mixed_precision.cpp — see mixed_precision.hpp: the per-precision runs, their memory table and loss curves.
// Playbook: "Mixed precision training". Test: `make test CH=11`.
#include "mixed_precision.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "../common/metrics.hpp"
#include "../common/train_loop.hpp"
#include "fp8.hpp"
#include "loss_scaler.hpp"

namespace penta {

SchemeRun train_scheme(const TrainConfig& cfg, const LlamaConfig& mc, const Dataset& data, const std::string& precision,
                       bool print) {
    TrainConfig c = cfg;
    c.precision = precision;
    SchemeRun run;
    run.precision = precision;
    const Tag tags[] = {Tag::params, Tag::grads, Tag::master, Tag::optim};
    int64_t before[4];
    const Device device = resolve_device(c.device);
    for (int i = 0; i < 4; i++) before[i] = mem_stats(device).current[(int)tags[i]];
    Model model(mc, device, (uint64_t)c.seed, model_options(c));  // the same weights for every policy
    run.n_params = model.n_params();
    std::unique_ptr<AdamW> opt = make_adamw(model, adamw_config(c));
    install_fp8_gemm();  // the linear layers' e4m3 GEMM (fp8.hpp); f32, bf16 and f16 are common/'s
    LossScaler scaler;   // fp16's loss scaling: one of the step's hooks
    Trainer t{model, *opt};
    const bool scaled = model.precision().loss_scaling;
    if (scaled) t.hooks.push_back(&scaler);
    int64_t held[4];
    for (int i = 0; i < 4; i++) held[i] = mem_stats(device).current[(int)tags[i]] - before[i];
    run.state = ModelStateBytes{held[0], held[1], held[2], held[3]};
    const BatchPlan plan = batch_plan(c);
    const LRSchedule lr{c.lr, c.min_lr, std::min(c.warmup, c.steps - 1), c.steps};
    std::ofstream jsonl;  // --log-jsonl: one object per step (train.cpp allows it with one policy only)
    if (!c.log_jsonl.empty()) {
        jsonl.open(c.log_jsonl);
        CHECK(jsonl.good(), "--log-jsonl %s: cannot open it for writing", c.log_jsonl.c_str());
    }
    Timer timer;
    for (int64_t s = 0; s < c.steps; s++) {
        Timer step_timer;
        const StepResult r = training_step(t, data, s, plan, lr.at(s + 1), c.grad_clip);
        if (jsonl.is_open()) device_synchronize(device);  // the step's own seconds; without a log, none needed
        run.losses.push_back(r.loss);
        run.skipped += r.skipped;
        if (jsonl.is_open())
            jsonl << nlohmann::json{{"step", s + 1},          {"precision", precision}, {"loss", r.loss},
                                    {"grad_norm", r.grad_norm}, {"loss_scale", r.loss_scale},
                                    {"skipped", r.skipped},    {"seconds", step_timer.seconds()}}.dump()
                  << "\n";
        if (print && ((s + 1) % c.log_every == 0 || s == 0))
            std::printf("  %-4s step %4ld | loss %.4f | grad norm %.3f%s%s\n", precision.c_str(), (long)s + 1, r.loss,
                        r.grad_norm, scaled ? strfmt(" | loss scale %g", r.loss_scale).c_str() : "",
                        r.skipped ? " | skipped (overflow)" : "");
    }
    run.seconds = timer.seconds();
    run.loss_scale = scaled ? scaler.scale() : 1.0f;
    return run;
}

std::string memory_per_param_table(const std::vector<SchemeRun>& runs) {
    std::string s = "model state, bytes per parameter (measured by the allocator's tags):\n";
    s += "  scheme                         params  grads  master   Adam  total\n";
    for (const SchemeRun& r : runs) {
        const double N = (double)r.n_params;
        s += strfmt("  %-30s %6.2f %6.2f %7.2f %6.2f %6.2f\n", r.precision.c_str(), r.state.params / N,
                    r.state.grads / N, r.state.master / N, r.state.optim / N, r.state.total() / N);
    }
    // the playbook's rows, from formulas.hpp (N = 1: bytes per parameter)
    const ModelStateBytes fp32 = model_state_bytes_fp32(1), mixed = model_state_bytes_bf16_mixed(1),
                          mixed_grads = model_state_bytes_bf16_mixed(1, true);
    s += "  the playbook's table:\n";
    const auto row = [&](const char* name, const ModelStateBytes& b) {
        s += strfmt("  %-30s %6ld %6ld %7ld %6ld %6ld\n", name, (long)b.params, (long)b.grads, (long)b.master,
                    (long)b.optim, (long)b.total());
    };
    row("fp32", fp32);
    row("bf16 + fp32 master + Adam", mixed);
    row("  + fp32 grads kept", mixed_grads);
    return s;
}

double final_loss(const SchemeRun& r, int64_t window) {
    const int64_t n = (int64_t)r.losses.size(), w = std::max<int64_t>(1, std::min(window, n));
    double sum = 0;
    for (int64_t i = n - w; i < n; i++) sum += r.losses[i];
    return sum / (double)w;
}

namespace {
char mark(const std::string& precision) {  // the letter of a run in the plot
    return precision == "fp32" ? 'F' : precision == "bf16" ? 'b' : precision == "fp16" ? 'h' : precision == "fp8" ? '8' : '?';
}
}  // namespace

std::string loss_curves(const std::vector<SchemeRun>& runs, int width, int height) {
    if (runs.empty() || runs[0].losses.empty()) return "";
    const int64_t steps = (int64_t)runs[0].losses.size();
    width = (int)std::min<int64_t>(width, steps);
    // column c: the mean loss of steps [c·steps/width, (c+1)·steps/width)
    std::vector<std::vector<double>> cols(runs.size(), std::vector<double>(width));
    double lo = 1e300, hi = -1e300;
    for (size_t k = 0; k < runs.size(); k++)
        for (int c = 0; c < width; c++) {
            const int64_t a = c * steps / width, b = std::max(a + 1, (c + 1) * steps / width);
            double m = 0;
            for (int64_t i = a; i < b; i++) m += runs[k].losses[i] / (double)(b - a);
            cols[k][c] = m;
            lo = std::min(lo, m), hi = std::max(hi, m);
        }
    // a log scale shows the late, slow part of the curves where the schemes could part
    const double llo = std::log(lo), lhi = std::log(hi) + 1e-12;
    std::vector<std::string> grid(height, std::string(width, ' '));
    for (size_t k = 0; k < runs.size(); k++) {
        const char m = mark(runs[k].precision);
        for (int c = 0; c < width; c++) {
            const int row = (int)std::lround((lhi - std::log(cols[k][c])) / (lhi - llo) * (height - 1));
            char& cell = grid[row][c];
            cell = cell == ' ' || cell == m ? m : '*';
        }
    }
    std::string s = "loss (log scale), mean per column; marks: ";
    for (const SchemeRun& r : runs)
        s += strfmt("%c = %s  ", mark(r.precision), r.precision.c_str());
    s += "* = several\n";
    for (int r = 0; r < height; r++)
        s += strfmt("%7.3f |%s\n", std::exp(lhi - (lhi - llo) * r / (height - 1)), grid[r].c_str());
    s += strfmt("        +%s\n         step 1%*ld\n", std::string(width, '-').c_str(), width - 6, (long)steps);
    const int64_t window = std::max<int64_t>(1, steps / 10);
    const double ref = final_loss(runs[0], window);
    s += strfmt("mean loss over the last %ld steps (vs %s):\n", (long)window, runs[0].precision.c_str());
    for (const SchemeRun& r : runs)
        s += strfmt("  %-4s %.4f  (%+.2f%%)  %.1f s for %ld steps%s\n", r.precision.c_str(), final_loss(r, window),
                    100.0 * (final_loss(r, window) - ref) / ref, r.seconds, (long)r.losses.size(),
                    r.precision == "fp16" ? strfmt(", %ld skipped, final loss scale %g", (long)r.skipped,
                                                   r.loss_scale).c_str() : "");
    return s;
}

}  // namespace penta
