// 02_data_parallel/train.cpp — chapter 02: the chapter-01 training, replicated on --dp ranks that each
// take their own rows of the global batch and all-reduce the gradients (data_parallel.hpp).
//
// Playbook: "Data parallelism". What to watch:
//   - the loss curve of chapter 01 with the same global batch: --micro-batch 8 on 2 ranks is chapter 01's
//     16 sequences, so the two runs print the same losses (up to float summation order);
//   - on every step line, the time in communication calls, the part of it exposed after backward, and
//     the fraction of the gradient bytes whose all-reduce finished behind backward (naive: 0);
//   - at the end, per rank: bytes sent per step, counted by Comm, beside 2(K-1)/K · M.
//
//   mpirun -np 2 build/bin/02_data_parallel --dp 2                        (bucketed, 25 MiB buckets)
//   mpirun -np 2 build/bin/02_data_parallel --dp 2 --dp-mode naive
//   mpirun -np 4 build/bin/02_data_parallel --dp 4 --micro-batch 4 --bucket-mb 1
//   mpirun -np 2 build/bin/02_data_parallel --dp 2 --micro-batch 2 --grad-accum 4 --no-sync=0
//   mpirun -np 2 build/bin/02_data_parallel --dp 2 --bucket-mb 1 --trace /tmp/dp   (bucket events: /tmp/dp.rank<r>)
//   mpirun -np 3 build/bin/02_data_parallel --dp 3 --sdc-check 2 --sdc-flip-bit 1:3    (sdc_check.hpp: caught, named)
#include <cmath>
#include <cstdio>

#include "../common/formulas.hpp"
#include "../common/grid.hpp"
#include "../common/runtime.hpp"
#include "../common/train_loop.hpp"
#include "data_parallel.hpp"
#include "sdc_check.hpp"

using namespace penta;

namespace {

int train(int argc, char** argv) {
    TrainConfig cfg;
    cfg.micro_batch = 8;  // x --dp 2 = chapter 01's global batch of 16
    std::string mode = "bucketed";
    float bucket_mb = 25;
    bool no_sync = true;
    Flags flags("02_data_parallel", "Chapter 02: data parallelism over --dp ranks (playbook: Data parallelism).");
    cfg.register_flags(flags);
    cfg.register_parallel_flags(flags);
    flags.chapter("Data parallelism (chapter 02)", {"dp"});
    flags.add("dp-mode", &mode, "naive (one all-reduce after backward) | bucketed (buckets overlap backward)");
    flags.add("bucket-mb", &bucket_mb, "MiB per gradient bucket in bucketed mode (whole layers; 0: one per layer)");
    flags.add("no-sync", &no_sync, "under --grad-accum, communicate only in the last micro-batch's backward");
    std::string trace;
    flags.add("trace", &trace, "FILE: each rank writes its bucket events and their times to FILE.rank<r> (JSONL)");
    SdcOptions sdc;
    std::string sdc_flip;
    flags.group("Faults and timeouts");
    flags.add("sdc-check", &sdc.every, "every N steps compare the replicas' parameter checksums (0: off)");
    flags.add("sdc-flip-bit", &sdc_flip, "RANK:STEP: dp rank RANK flips one weight bit after step STEP (a test fault)");
    if (!flags.parse(argc, argv)) return 0;
    cfg.validate();
    DataParallelOptions dpo{parse_dp_mode(mode), bucket_mb, no_sync};
    CHECK(std::isfinite(bucket_mb) && bucket_mb >= 0, "--bucket-mb %g must be a finite number >= 0 (0: one bucket "
          "per layer)", bucket_mb);
    check_data_parallel_only(cfg, world_size(), "chapter 02");
    if (!sdc_flip.empty()) parse_sdc_flip(sdc_flip, sdc);

    Device device = resolve_device(cfg.device);
    LlamaConfig mc = resolve_model(cfg, 0);  // plain data parallelism: every rank its whole state
    ParallelGrid grid(make_world_comm(cfg, device), GridShape{(int)cfg.dp}, &mc);
    Comm& dp = grid.dp();
    auto data = make_dataset(cfg.data, (uint64_t)cfg.seed, (int32_t)mc.vocab);
    Model model(mc, device, (uint64_t)cfg.seed, model_options(cfg));  // the same seed everywhere: identical replicas
    std::unique_ptr<AdamW> optim = make_adamw(model, adamw_config(cfg), &grid);
    DataParallelHooks hooks(model, dp, dpo);
    hooks.record_trace(!trace.empty());
    SdcCheck sdc_check(model, dp, sdc);
    Trainer trainer{model, *optim, {&hooks, &sdc_check}};

    TrainLoop loop{trainer, *data, cfg, data_parallel_plan(cfg, dp), StepLogConfig{}, {}, {}};
    configure_log(loop, mc, device, dp.size());
    loop.world = &grid.world();
    // totals over the steps after the first (which pays for first-touch allocations)
    DpStepStats total;
    int64_t counted = 0;
    loop.on_step = [&](StepRecord& rec, const StepResult&) {
        const DpStepStats& s = hooks.last_step();
        rec.extra.push_back({"comm ms", std::round(s.comm_s * 1e4) / 10});
        rec.extra.push_back({"exposed ms", std::round(s.exposed_s * 1e4) / 10});
        rec.extra.push_back({"hidden %", std::round(s.hidden_fraction() * 100)});
        if (rec.step == 1) return;
        total.comm_s += s.comm_s;
        total.exposed_s += s.exposed_s;
        total.reduced_bytes += s.reduced_bytes;
        total.hidden_bytes += s.hidden_bytes;
        total.bytes = s.bytes;
        counted++;
    };

    const double grad_bytes = (double)model.grads().nbytes();
    if (world_rank() == 0) {
        std::printf("02_data_parallel: model %s (%ld layers, hidden %ld, vocab %ld%s): %s params, gradients M = %s\n",
                    mc.name.c_str(), (long)mc.n_layers, (long)mc.hidden, (long)mc.vocab, mc.tied_embeddings ? ", tied" : "",
                    human_count((double)model.n_params()).c_str(), human_bytes((int64_t)grad_bytes).c_str());
        std::printf("device %s; comm %s; dp %d ranks; mode %s", device_name(device), comm_backend_name(dp.backend()),
                    dp.size(), dp_mode_name(dpo.mode));
        if (dpo.mode == DpMode::bucketed) {
            std::printf(", %zu bucket(s) closed at >= %g MiB of whole units, in backward order:", hooks.buckets().size(), bucket_mb);
            const int64_t elem = (int64_t)dtype_size(model.grads().dtype);
            for (const GradBucket& b : hooks.buckets())
                std::printf(" [units %d-%d %s]", b.first_unit, b.last_unit, human_bytes(b.numel * elem).c_str());
        }
        std::printf("; no_sync %s\n", no_sync ? "on" : "off");
        std::printf("batch: %ld micro-batch x %ld grad-accum x %d ranks = %ld sequences x %ld tokens\n",
                    (long)cfg.micro_batch, (long)cfg.grad_accum, dp.size(), (long)loop.plan.global_batch, (long)cfg.seq);
    }
    print_task_baseline(cfg, mc);

    // --trace: one file per rank (the steady clock is one clock for the processes of a machine), opened now so
    // that a bad path is refused before any work
    const std::string trace_path = strfmt("%s.rank%d", trace.c_str(), world_rank());
    std::FILE* f = trace.empty() ? nullptr : std::fopen(trace_path.c_str(), "w");
    CHECK(trace.empty() || f, "--trace %s: cannot open %s for writing", trace.c_str(), trace_path.c_str());
    run_training(loop);
    if (f) {
        for (const DataParallelHooks::TraceEvent& e : hooks.trace())
            std::fprintf(f, "{\"rank\": %d, \"step\": %ld, \"t\": %.9f, \"event\": \"%s\", \"index\": %d}\n", world_rank(),
                         (long)e.step, e.t, e.what, e.index);
        CHECK(std::fclose(f) == 0, "--trace %s: writing %s failed", trace.c_str(), trace_path.c_str());
    }

    // per rank: what Comm counted, beside the formula (x grad_accum micro-batches when no_sync is off)
    const int K = dp.size();
    const int64_t reductions = no_sync ? 1 : cfg.grad_accum;
    const double formula = reductions * dp_bytes_per_step_formula(K, grad_bytes);
    const double n = std::max<int64_t>(counted, 1);
    std::vector<double> bytes = grid.world().all_gather_scalar(total.bytes);
    std::vector<double> comm_ms = grid.world().all_gather_scalar(1e3 * total.comm_s / n);
    std::vector<double> exposed_ms = grid.world().all_gather_scalar(1e3 * total.exposed_s / n);
    std::vector<double> hidden = grid.world().all_gather_scalar(total.hidden_fraction());
    if (world_rank() == 0) {
        std::printf("\ngradient all-reduce per step (mean over steps 2-%ld), dp %d, M = %.0f gradient bytes:\n",
                    (long)cfg.steps, K, grad_bytes);
        std::printf("  rank  bytes sent/step  formula %s2(K-1)/K*M  comm ms  exposed ms  hidden\n",
                    reductions > 1 ? "ga*" : "");
        for (int r = 0; r < K; r++)
            std::printf("  %4d  %15.0f  %*.0f  %s  %7.2f  %10.2f  %5.0f%%\n", r, bytes[r], reductions > 1 ? 22 : 19,
                        formula, formula_matches(bytes[r], formula) ? "(equal)" : "(DIFFERENT)", comm_ms[r], exposed_ms[r],
                        100 * hidden[r]);
        std::printf("\nmemory by tag on %s (rank 0):\n%s", device_name(device), memory_table(device).c_str());
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) { return run_main(argc, argv, train); }
