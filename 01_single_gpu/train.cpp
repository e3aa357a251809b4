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

#include "../common/config.hpp"
#include "../common/formulas.hpp"
#include "../common/metrics.hpp"
#include "../common/runtime.hpp"
#include "reference_dump.hpp"
#include "training_step.hpp"

using namespace penta;

namespace {

Device resolve_device(const std::string& d) {
    if (d == "cpu") return Device::cpu;
    if (d == "cuda") {
        CHECK(cuda_available(), "--device cuda: %s", "no CUDA device visible (or a build without CUDA: make CUDA=1)");
        return Device::cuda;
    }
    return cuda_available() ? Device::cuda : Device::cpu;
}

LlamaConfig resolve_model(const std::string& m) {
    bool is_file = m.size() > 5 && m.compare(m.size() - 5, 5, ".json") == 0;
    return is_file ? load_hf_config(m) : preset(m);
}

// Held-out evaluation: sample ids far beyond any training step's, so never trained on.
struct Eval {
    double loss = 0;
    double accuracy = -1;  // exact-match on the addition task; -1 for other data
};
Eval evaluate(Model& model, const Dataset& data, const TrainConfig& cfg, bool task) {
    const int64_t rows = 32, first = int64_t(1) << 40;
    Batch b = load_batch(data, first, rows, cfg.seq);
    DeviceBatch db = to_device(b, 0, rows, model.device());
    Tensor logits = model.forward_logits(db.tokens, rows, cfg.seq);  // (rows T, V)
    Tensor no_grad, no_losses;  // the same fused cross-entropy as training, loss only
    Eval e;
    e.loss = cross_entropy_forward_backward(logits, db.targets, no_grad, 1.0f, kIgnoreTarget, no_losses) /
             std::max<double>((double)count_targets(b), 1.0);
    if (task) {
        std::vector<int32_t> pred = argmax_rows(logits.to_host().data(), rows * cfg.seq, model.config().vocab);
        e.accuracy = addition_accuracy(pred.data(), b.targets.data(), rows, cfg.seq).fraction();
    }
    return e;
}

void print_activation_table(const Model& model, const TrainConfig& cfg, int64_t measured) {
    const LlamaConfig& c = model.config();
    Recompute r = model.options().recompute;
    AttentionKernel k = model.options().attention;
    int64_t B = cfg.micro_batch, T = cfg.seq;
    int64_t per_layer = llama_layer_activation_bytes(r, k, B, T, c.hidden, c.n_heads, c.n_kv_heads, c.head_dim(), c.ffn);
    int64_t head = llama_head_activation_bytes(B, T, c.hidden, c.vocab);
    int64_t playbook = playbook_activation_bytes_per_layer(r, T, B, c.hidden, c.n_heads);
    std::printf("\nactivations saved by one micro-batch's forward (b=%ld, s=%ld, recompute %s, attention %s):\n",
                (long)B, (long)T, recompute_name(r), attention_kernel_name(k));
    std::printf("  measured (allocator, Tag::activations)      %12ld bytes\n", (long)measured);
    std::printf("  our formula: %ld layers x %ld + head %ld  %12ld bytes  %s\n", (long)c.n_layers, (long)per_layer,
                (long)head, (long)(c.n_layers * per_layer + head), measured == c.n_layers * per_layer + head ? "(equal)" : "(DIFFERENT)");
    std::printf("  playbook sbh(34 + 5as/h) per layer x %ld    %12ld bytes  (GPT block, 2-byte activations,\n"
                "                                                            dropout masks; see the README)\n",
                (long)c.n_layers, (long)(c.n_layers * playbook));
}

int train(int argc, char** argv) {
    TrainConfig cfg;
    Flags flags("01_single_gpu", "Chapter 01: train a Llama on one device (playbook: First steps: training on one GPU).");
    cfg.register_flags(flags);
    if (!flags.parse(argc, argv)) return 0;
    cfg.validate();
    CHECK(world_size() == 1, "chapter 01 trains on one rank, but the job has %d (run it with mpirun -np 1)", world_size());

    Device device = resolve_device(cfg.device);
    LlamaConfig mc = resolve_model(cfg.model);
    CHECK(cfg.seq <= mc.max_seq, "--seq %ld must be <= the model's max_seq %ld", (long)cfg.seq, (long)mc.max_seq);
    auto data = make_dataset(cfg.data, (uint64_t)cfg.seed, (int32_t)mc.vocab);
    bool task = cfg.data == "addition";
    ModelOptions mopt;
    mopt.recompute = parse_recompute(cfg.recompute);
    mopt.attention = parse_attention_kernel(cfg.attention);
    Model model(mc, device, (uint64_t)cfg.seed, mopt);

    if (!cfg.dump_reference.empty()) {
        dump_reference(model, *data, cfg, cfg.dump_reference);
        return 0;
    }

    AdamW optim(model.params(), model.grads(), optimizer_ranges(model), AdamWConfig{cfg.lr, cfg.beta1, cfg.beta2, 1e-8f, cfg.weight_decay});
    LRSchedule schedule{cfg.lr, cfg.min_lr, cfg.warmup, cfg.steps};
    BatchPlan plan;
    plan.seq = cfg.seq;
    plan.micro_batch = cfg.micro_batch;
    plan.grad_accum = cfg.grad_accum;
    plan.global_batch = cfg.micro_batch * cfg.grad_accum;

    PeakFlops peak = device_peak_flops(device, DType::f32);
    int64_t matmul_params = model.n_params() - (mc.tied_embeddings ? 0 : mc.vocab * mc.hidden);
    StepLogConfig lcfg;
    lcfg.flops_per_token = model_flops_per_token(matmul_params, mc.n_layers, mc.n_heads * mc.head_dim(), cfg.seq);
    lcfg.peak_flops = peak.flops;
    lcfg.device = device;
    lcfg.jsonl_path = cfg.log_jsonl;
    StepLog log(lcfg);

    std::vector<int32_t> sample(cfg.seq), sample_targets(cfg.seq);
    data->get(0, cfg.seq, sample.data(), sample_targets.data());
    std::printf("01_single_gpu: model %s (%ld layers, hidden %ld, heads %ld, kv heads %ld, ffn %ld, vocab %ld%s): %s params\n",
                mc.name.c_str(), (long)mc.n_layers, (long)mc.hidden, (long)mc.n_heads, (long)mc.n_kv_heads,
                (long)mc.ffn, (long)mc.vocab, mc.tied_embeddings ? ", tied" : "", human_count((double)model.n_params()).c_str());
    std::printf("device %s; peak %s\n", device_name(device), peak.source.c_str());
    std::printf("data %s; sample 0: %s\n", data->describe().c_str(), data->render(sample.data(), cfg.seq).c_str());
    std::printf("batch: %ld micro-batch x %ld grad-accum = %ld sequences x %ld tokens; recompute %s, attention %s\n",
                (long)cfg.micro_batch, (long)cfg.grad_accum, (long)plan.global_batch, (long)cfg.seq,
                cfg.recompute.c_str(), cfg.attention.c_str());
    if (task) std::printf("ln(vocab) = %.3f: a model that learned nothing scores about that\n", std::log((double)mc.vocab));

    int64_t saved = 0;
    for (int64_t s = 0; s < cfg.steps; s++) {
        Timer timer;
        float lr = schedule.at(s + 1);
        StepResult r = training_step(model, optim, *data, s, plan, lr, cfg.grad_clip);
        device_synchronize(device);
        saved = r.saved_activation_bytes;
        StepRecord rec;
        rec.step = s + 1;
        rec.total_steps = cfg.steps;
        rec.loss = r.loss;
        rec.grad_norm = r.grad_norm;
        rec.lr = lr;
        rec.tokens = plan.global_batch * cfg.seq;
        rec.seconds = timer.seconds();
        bool last = s + 1 == cfg.steps;
        if (cfg.eval_every > 0 && ((s + 1) % cfg.eval_every == 0 || last)) {
            Eval e = evaluate(model, *data, cfg, task);
            rec.task_accuracy = e.accuracy;
            rec.extra.push_back({"val loss", e.loss});
        }
        log.log(rec, (s + 1) % cfg.log_every == 0 || s == 0 || last || !rec.extra.empty());
    }
    print_activation_table(model, cfg, saved);
    std::printf("\nmemory by tag on %s:\n%s", device_name(device), memory_table(device).c_str());
    ModelStateBytes ms = model_state_bytes_fp32(model.n_params());
    std::printf("model state formula (fp32): params 4N = %ld, grads 4N = %ld, AdamW 8N = %ld bytes\n",
                (long)ms.params, (long)ms.grads, (long)ms.optim);
    return 0;
}

}  // namespace

int main(int argc, char** argv) { return run_main(argc, argv, train); }
