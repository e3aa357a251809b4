// 01_single_gpu/train.cpp — chapter 01: train a Llama on one device, no parallelism.
//
// Playbook: "First steps: training on one GPU". What to watch:
//   - the loss falling far below ln(vocab) and the task accuracy rising (the built-in addition task);
//   - memory by tag in every step line (params 4N, grads 4N, AdamW moments 8N, activations);
//   - at the end, the activation bytes one micro-batch saved, measured by the allocator, beside our exact
//     formula and beside the playbook's sbh(34 + 5as/h) — change --recompute and --attention to see them move;
//   - gradient accumulation: --micro-batch 2 --grad-accum 4 trains exactly like --micro-batch 8.
//
//   make run                                               (the same as the next line)
//   mpirun -np 1 build/bin/01_single_gpu --model small
//   build/bin/01_single_gpu --model small --recompute full --attention naive --steps 20
//   build/bin/01_single_gpu --help
#include <cmath>
#include <cstdio>

#include "../common/formulas.hpp"
#include "../common/runtime.hpp"
#include "../common/train_loop.hpp"
#include "reference_dump.hpp"

using namespace penta;

namespace {

int train(int argc, char** argv) {
    TrainConfig cfg;
    Flags flags("01_single_gpu", "Chapter 01: train a Llama on one device (playbook: First steps: training on one GPU).");
    cfg.register_flags(flags);
    flags.chapter("Training on one GPU (chapter 01)", {"seq", "micro-batch", "grad-accum", "recompute", "attention"});
    flags.group("PyTorch reference");
    // only this chapter offers the PyTorch reference dump (one rank, the whole model)
    flags.add("dump-reference", &cfg.dump_reference,
              "write weights, a batch, grads and 5 AdamW steps to DIR for tools/torch_reference.py, then exit");
    if (!flags.parse(argc, argv)) return 0;
    cfg.validate();
    CHECK(world_size() == 1, "chapter 01 trains on one rank, but the job has %d (run it with mpirun -np 1)", world_size());

    Device device = resolve_device(cfg.device);
    LlamaConfig mc = resolve_model(cfg);
    auto data = make_dataset(cfg.data, (uint64_t)cfg.seed, (int32_t)mc.vocab);
    Model model(mc, device, (uint64_t)cfg.seed, model_options(cfg));

    if (!cfg.dump_reference.empty()) {
        dump_reference(model, *data, cfg, cfg.dump_reference);
        return 0;
    }

    // one device: AdamW over the whole model, no hooks, the Sequential schedule (gradient accumulation)
    std::unique_ptr<AdamW> optim = make_adamw(model, adamw_config(cfg));
    Trainer trainer{model, *optim};
    PeakFlops peak = device_peak_flops(device, model.precision().gemm, model.precision().tf32);
    TrainLoop loop{trainer, *data, cfg, batch_plan(cfg), StepLogConfig{}, {}, {}};
    configure_log(loop, mc, device, 1);

    std::vector<int32_t> sample(cfg.seq), sample_targets(cfg.seq);
    data->get(0, cfg.seq, sample.data(), sample_targets.data());
    std::printf("01_single_gpu: model %s (%ld layers, hidden %ld, heads %ld, kv heads %ld, ffn %ld, vocab %ld%s): %s params\n",
                mc.name.c_str(), (long)mc.n_layers, (long)mc.hidden, (long)mc.n_heads, (long)mc.n_kv_heads,
                (long)mc.ffn, (long)mc.vocab, mc.tied_embeddings ? ", tied" : "", human_count((double)model.n_params()).c_str());
    std::printf("device %s; peak %s\n", device_name(device), peak.source.c_str());
    std::printf("data %s; sample 0: %s\n", data->describe().c_str(), data->render(sample.data(), cfg.seq).c_str());
    std::printf("batch: %ld micro-batch x %ld grad-accum = %ld sequences x %ld tokens; recompute %s, attention %s\n",
                (long)cfg.micro_batch, (long)cfg.grad_accum, (long)loop.plan.global_batch, (long)cfg.seq,
                cfg.recompute.c_str(), cfg.attention.c_str());
    print_task_baseline(cfg, mc);

    int64_t saved = run_training(loop).saved_activation_bytes;
    if (cfg.steps > 0) print_activation_table(model, cfg, saved);
    std::printf("\nmemory by tag on %s:\n%s", device_name(device), memory_table(device).c_str());
    // the policy's bytes a parameter (fp32: 4 + 4 + 8 = 16; bf16: 2 + 4 (f32 gradients) + 4 (master) + 8 = 18);
    // a run that does not train (adamw_config: --steps 0) builds AdamW without its moments or master
    const Precision& pol = model.precision();
    const bool trains = adamw_config(cfg).trains;
    const int64_t N = model.n_params(), wb = (int64_t)dtype_size(pol.param), gb = (int64_t)dtype_size(pol.grad);
    const int64_t mb = trains && pol.fp32_master ? 4 : 0, ob = trains ? 8 : 0;
    std::printf("model state formula (--precision %s): params %ldN = %ld, grads %ldN = %ld, master %ldN = %ld, "
                "AdamW %ldN = %ld bytes\n", cfg.precision.c_str(), (long)wb, (long)(wb * N), (long)gb, (long)(gb * N),
                (long)mb, (long)(mb * N), (long)ob, (long)(ob * N));
    return 0;
}

}  // namespace

int main(int argc, char** argv) { return run_main(argc, argv, train); }
