// bench/checkpoint.cpp — checkpoint save and load speed for a model's full training state on one CPU rank:
// prints figures, asserts nothing (seed 003: δ, the training stall a save costs, decides the interval √(2δM)).
//
//   make bench                                  (scripts/bench_00_checkpoint.sh runs it)
//   build/bin/bench_checkpoint [--model smollm-135m] [--dir /tmp/penta_bench_ckpt] [--bf16]
//
// 1. sync: the stall is the whole save — the host copy (snapshot), the shard write with its CRC-32 and fsync,
//    the commit (metadata, renames, `latest`);
// 2. async (--save-async): the stall is the host copy only; the write runs on AsyncShardWriter's thread, and
//    the training steps that overlap it are slower (the write shares the cores, the memory bus and the page
//    cache): a few steps are timed alone, then while the writer is busy, and the difference printed;
// 3. load: checkpoint_load's path (read, CRC check, scatter into the flat buffer and the optimizer), which a
//    resume in another layout takes too.
// Then √(2δM) for both stalls at Llama 3's cluster MTBF of 3.09 h (the seed's figure).
#include <cstdio>
#include <filesystem>
#include <string>

#include "../common/checkpoint_async.hpp"
#include "../common/checkpoint_load.hpp"
#include "../common/checkpoint_save.hpp"
#include "../common/config.hpp"
#include "../common/data.hpp"
#include "../common/metrics.hpp"
#include "../common/runtime.hpp"
#include "../common/training_step.hpp"

using namespace penta;

int main(int argc, char** argv) {
    return run_main(argc, argv, [](int argc, char** argv) {
        std::string model_name = "smollm-135m", dir = "/tmp/penta_bench_ckpt";
        bool bf16 = false;
        Flags flags("bench_checkpoint", "checkpoint save (sync, async) and load speed for one rank's full state");
        flags.chapter("Checkpoint speed (benchmark)");
        flags.add("model", &model_name, "preset");
        flags.add("dir", &dir, "where to write (removed afterwards)");
        flags.add("bf16", &bf16, "bf16 weights with an fp32 master (14 bytes a parameter instead of 12)");
        if (!flags.parse(argc, argv)) return 0;
        const LlamaConfig mc = preset(model_name);
        ModelOptions o;
        if (bf16) o.precision = Precision::bf16_params();
        Model model(mc, Device::cpu, 1337, o);
        std::unique_ptr<AdamW> optim = make_adamw(model, AdamWConfig{});
        optim->step_count = 1;
        CheckpointContext ctx;
        ctx.model = mc, ctx.precision = model.precision(), ctx.global_batch = 8, ctx.seq = 32, ctx.data = "addition";
        ctx.adamw = optim->cfg;
        std::filesystem::remove_all(dir);
        std::printf("checkpoint bench: %s, %.1fM parameters, %s, one rank, into %s\n", model_name.c_str(),
                    mc.n_params() / 1e6, model.precision().str().c_str(), dir.c_str());
        // a few training steps of 2 sequences of 32 tokens: the step time with and without a write beside it
        auto data = make_dataset("addition", 1337, (int32_t)mc.vocab);
        BatchPlan plan;
        plan.seq = 32, plan.micro_batch = 2, plan.global_batch = 2;
        int64_t step = 0;
        auto train_step = [&] {
            Timer st;
            training_step(model, *optim, *data, step++, plan, 1e-4f, 1.0f);
            return st.seconds();
        };
        constexpr int kSteps = 3;
        train_step();  // the first step pays for first-touch allocations
        double alone = 0;
        for (int i = 0; i < kSteps; i++) alone += train_step() / kSteps;

        // 1. sync
        Timer t;
        std::string tmp = prepare_step_dir(dir, 1, nullptr);
        CheckpointSnapshot snap = snapshot_state(model, *optim, GridCoords{}, 0, 1);
        const double copy_s = t.seconds();
        write_shard(snap, tmp, CheckpointFaults{});
        const double write_s = t.seconds() - copy_s;
        const SavedCheckpoint s = commit_checkpoint(dir, 1, run_metadata(ctx, 1, 1, 1), "", nullptr, 0, mc.n_params());
        const double sync_s = t.seconds();
        const double mb = s.bytes / 1e6;
        std::printf("  state: %.1f MB = %.2f bytes/param\n", mb, s.bytes_per_param);
        std::printf("  sync save : stall %7.3f s (host copy %.3f s, write + CRC + fsync %.3f s, commit %.3f s)  %7.1f MB/s\n",
                    sync_s, copy_s, write_s, sync_s - copy_s - write_s, mb / sync_s);

        // 2. async: the training thread waits for the host copy only
        Timer a;
        tmp = prepare_step_dir(dir, 2, nullptr);
        AsyncShardWriter w;
        w.start(snapshot_state(model, *optim, GridCoords{}, 0, 2), tmp, CheckpointFaults{});
        const double stall = a.seconds();
        double overlapped = 0;  // the steps that start while the writer is still busy
        int n = 0;
        for (; n < kSteps && !w.done(); n++) overlapped += train_step();
        const ShardWriteResult r = w.wait();
        commit_checkpoint(dir, 2, run_metadata(ctx, 2, 1, 1), r.error, nullptr, 0, mc.n_params());
        const double async_total = a.seconds();
        std::printf("  async save: stall %7.3f s (the host copy; written in the background in %.3f s, %.1f MB/s; "
                    "committed %.3f s after the save began)\n", stall, r.seconds, mb / std::max(r.seconds, 1e-9), async_total);
        if (n > 0)
            std::printf("  steps during the background write: %d of %.3f s, alone %.3f s: %+.0f%% each (the write "
                        "shares the cores and the memory)\n", n, overlapped / n, alone, 100 * (overlapped / n / alone - 1));
        else
            std::printf("  steps during the background write: none (the write ended within the stall)\n");

        // 3. load
        Model fresh(mc, Device::cpu, 1, o);
        std::unique_ptr<AdamW> fresh_optim = make_adamw(fresh, AdamWConfig{});
        Timer l;
        load_checkpoint((std::filesystem::path(dir) / step_dir_name(2)).string(), fresh, *fresh_optim, ctx);
        const double load_s = l.seconds();
        std::printf("  load      : %7.3f s  %7.1f MB/s (read, CRC-32 of every piece, scatter)\n", load_s, mb / load_s);
        const double M = 3.09 * 3600;
        std::printf("  √(2δM) at MTBF 3.09 h: sync δ %.3f s -> every %.1f min; async δ %.3f s -> every %.1f min\n",
                    sync_s, optimal_checkpoint_interval(sync_s, M) / 60, stall, optimal_checkpoint_interval(stall, M) / 60);
        std::filesystem::remove_all(dir);
        return 0;
    });
}
