// train_loop.cpp — see train_loop.hpp.
// Playbook: "First steps: training on one GPU" (the training loop, MFU). Run: `make run`.
#include "train_loop.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include <filesystem>

#include "checkpoint_load.hpp"
#include "checkpoint_save.hpp"
#include "formulas.hpp"
#include "generate.hpp"
#include "hf_checkpoint.hpp"
#include "ops_backend.hpp"
#include "runtime.hpp"
#include "straggler.hpp"
#include "watchdog.hpp"

namespace penta {

Device resolve_device(const std::string& d) {
    if (d == "cpu") return Device::cpu;
    if (d == "cuda") {
        CHECK(cuda_available(), "--device cuda: %s", "no CUDA device visible (or a build without CUDA: make CUDA=1)");
        return Device::cuda;
    }
    return cuda_available() ? Device::cuda : Device::cpu;
}

LlamaConfig resolve_model(const std::string& m) {
    if (is_hf_model_dir(m)) {  // a Hugging Face folder: its config here, its weights in model_options
        LlamaConfig c = load_hf_config((std::filesystem::path(m) / "config.json").string());
        c.name = m;
        return c;
    }
    bool is_file = m.size() > 5 && m.compare(m.size() - 5, 5, ".json") == 0;
    return is_file ? load_hf_config(m) : preset(m);
}

LlamaConfig resolve_model(const TrainConfig& cfg, int zero) {
    LlamaConfig mc = resolve_model(cfg.model);
    CHECK(cfg.seq <= mc.max_seq, "--seq %ld must be <= the model's max_seq %ld", (long)cfg.seq, (long)mc.max_seq);
    // a sliding window changes nothing for a sequence it covers: every sequence of the run must fit in it
    const std::string config_file =
        is_hf_model_dir(cfg.model) ? (std::filesystem::path(cfg.model) / "config.json").string() : cfg.model;
    CHECK(mc.sliding_window == 0 || cfg.seq <= mc.sliding_window,
          "%s: sliding_window %lld < --seq %ld: each token would attend to the last %lld tokens only, and this "
          "attention sees every earlier one; use --seq %lld or less", config_file.c_str(), (long long)mc.sliding_window,
          (long)cfg.seq, (long long)mc.sliding_window, (long long)mc.sliding_window);
    check_memory_bound(cfg, mc, resolve_device(cfg.device), zero);
    // the files the run reads or writes after training, checked now rather than after it
    if (!cfg.val_data.empty()) {
        try {
            make_dataset(cfg.val_data, (uint64_t)cfg.seed, (int32_t)mc.vocab);
        } catch (const Error& e) {  // make_dataset speaks of --data
            FAIL("--val-data %s: %s", cfg.val_data.c_str(), e.what());
        }
    }
    if (!cfg.generate.empty()) {  // a tokenizer that cannot encode says so now
        const int64_t prompt = (int64_t)make_tokenizer(cfg, mc)->encode(cfg.generate).size();
        const int64_t longest = std::min(mc.max_seq, prompt + cfg.max_new);  // generate() stops at max_seq
        CHECK(mc.sliding_window == 0 || longest <= mc.sliding_window,
              "%s: sliding_window %lld < the %lld tokens --generate's prompt (%lld) and --max-new %ld make: each token "
              "would attend to the last %lld only, and this attention sees every earlier one; lower --max-new",
              config_file.c_str(), (long long)mc.sliding_window, (long long)longest, (long long)prompt,
              (long)cfg.max_new, (long long)mc.sliding_window);
    }
    // --save's folder made and written into now, not found unwritable at the first save, after training steps
    if (!cfg.save.empty()) {
        std::error_code ec;
        std::filesystem::create_directories(cfg.save, ec);
        CHECK(!ec && std::filesystem::is_directory(cfg.save, ec), "--save %s: cannot create the directory: %s",
              cfg.save.c_str(), ec ? ec.message().c_str() : "a file is in the way");
        const std::string probe = (std::filesystem::path(cfg.save) / strfmt(".probe.rank%d", world_rank())).string();
        std::FILE* f = std::fopen(probe.c_str(), "w");
        const int err = f ? 0 : errno;
        CHECK(f && std::fclose(f) == 0, "--save %s: cannot write into the directory: %s", cfg.save.c_str(),
              std::strerror(err ? err : errno));
        std::remove(probe.c_str());
    }
    // --resume's metadata.json (its checksum, every field, the shard files' sizes): a damaged or crafted one is
    // refused before the model is built; the pieces' bytes are read (and CRC-checked) by the resume itself
    if (!cfg.resume.empty()) CheckpointReader(resolve_resume_dir(cfg.resume, cfg.save));
    if (!cfg.export_hf.empty()) {
        check_hf_exportable(mc);  // a MoE preset Mixtral cannot hold is refused before training, not after
        std::error_code ec;
        std::filesystem::create_directories(cfg.export_hf, ec);
        CHECK(!ec && std::filesystem::is_directory(cfg.export_hf, ec), "--export-hf %s: cannot create the directory: %s",
              cfg.export_hf.c_str(), ec ? ec.message().c_str() : "a file is in the way");
    }
    return mc;
}

std::unique_ptr<Tokenizer> make_tokenizer(const TrainConfig& cfg, const LlamaConfig& mc) {
    std::string path = cfg.tokenizer;
    const std::string in_dir = (std::filesystem::path(cfg.model) / "tokenizer.json").string();
    std::error_code ec;
    if (path.empty() && is_hf_model_dir(cfg.model) && std::filesystem::exists(in_dir, ec)) path = in_dir;
    std::unique_ptr<Tokenizer> t = path.empty() ? byte_tokenizer() : load_tokenizer_json(path);
    CHECK(t->vocab_size() <= mc.vocab, "--generate: the tokenizer %s has %d tokens, more than the model's vocabulary "
          "%lld%s", t->describe().c_str(), t->vocab_size(), (long long)mc.vocab,
          path.empty() ? " (give the model's tokenizer with --tokenizer FILE)" : "");
    return t;
}

std::unique_ptr<Comm> make_world_comm(const TrainConfig& cfg, Device device) {
    set_comm_timeout(cfg.comm_timeout);
    return make_world_comm(parse_comm_backend(cfg.comm, device));
}

ModelOptions model_options(const TrainConfig& cfg) {
    ModelOptions o;
    o.recompute = parse_recompute(cfg.recompute);
    o.attention = parse_attention_kernel(cfg.attention);
    o.precision = Precision::named(cfg.precision);  // --precision (chapter 11)
    o.precision.tf32 = cfg.tf32;
    if (is_hf_model_dir(cfg.model)) o.weights = std::make_shared<HfCheckpoint>(cfg.model);  // each rank its slices
    return o;
}

AdamWConfig adamw_config(const TrainConfig& cfg) {
    return AdamWConfig{cfg.lr, cfg.beta1, cfg.beta2, 1e-8f, cfg.weight_decay, cfg.steps > 0};
}

BatchPlan batch_plan(const TrainConfig& cfg) {
    BatchPlan p;
    p.seq = cfg.seq;
    p.micro_batch = cfg.micro_batch;
    p.grad_accum = cfg.grad_accum;
    p.global_batch = cfg.micro_batch * cfg.grad_accum;
    return p;
}

void configure_log(TrainLoop& loop, const LlamaConfig& mc, Device device, int num_devices) {
    // lm_head's FLOPs count even when tied; the embedding lookup and the norms' weights (two a layer, the final
    // one) are no matmul; a MoE token computes with its k experts only (the active parameters). One rank's step
    // under --recompute none with the naive kernel counts exactly these FLOPs (ops.hpp's counter: test_hfu.cpp)
    const int64_t matmul_params = mc.n_active_params() - (mc.tied_embeddings ? 0 : mc.vocab * mc.hidden) -
                                  (2 * mc.n_layers + 1) * mc.hidden;
    loop.log.flops_per_token = model_flops_per_token(matmul_params, mc.n_layers, mc.n_heads * mc.head_dim(), loop.cfg.seq);
    // the peak of the format the matmuls read (chapter 11's bf16 / fp16 / fp8 GEMMs run at their own rate)
    loop.log.peak_flops = device_peak_flops(device, loop.trainer.model.precision().gemm,
                                             loop.trainer.model.precision().tf32).flops;
    loop.log.num_devices = num_devices;
    loop.log.device = device;
    loop.log.jsonl_path = loop.cfg.log_jsonl;
    // HFU beside MFU when --recompute makes the hardware run more than the model: a decoder layer's matmul
    // weights are what is left of the matmul parameters without lm_head
    Model& model = loop.trainer.model;
    if (model.options().recompute != Recompute::none && model.options().recompute != Recompute::offload) {
        const int64_t layer = (matmul_params - mc.vocab * mc.hidden) / mc.n_layers;
        loop.log.hardware_flops_per_token =
            loop.log.flops_per_token + recompute_flops_per_token(model.options().recompute,
                                                                 model.attention().materialises_probs(), layer,
                                                                 mc.n_layers, mc.n_heads * mc.head_dim(), loop.cfg.seq);
    }
}

void print_task_baseline(const TrainConfig& cfg, const LlamaConfig& mc) {
    if (cfg.data == "addition" && world_rank() == 0)
        std::printf("ln(vocab) = %.3f: a model that learned nothing scores about that\n", std::log((double)mc.vocab));
}

Eval evaluate(Model& model, const Dataset& data, const TrainConfig& cfg,
              const std::function<Tensor(const Tensor&)>& full_logits) {
    const int64_t rows = kEvalRows, first = kHeldOutFirstId;
    Batch b = load_batch(data, first, rows, cfg.seq);
    DeviceBatch db = to_device(b, 0, rows, model.device());
    Tensor logits = model.forward_logits(db.tokens, rows, cfg.seq);  // (rows T, V) or this rank's vocab shard
    if (full_logits) logits = full_logits(logits);
    Tensor no_grad, no_losses;  // the same fused cross-entropy as training, loss only
    Eval e;
    e.loss = cross_entropy_forward_backward(logits, db.targets, no_grad, 1.0f, kIgnoreTarget, no_losses) /
             std::max<double>((double)count_targets(b), 1.0);
    if (cfg.data == "addition") {
        std::vector<int32_t> pred = argmax_rows(logits.to_host().data(), rows * cfg.seq, logits.size(-1));
        e.accuracy = addition_accuracy(pred.data(), b.targets.data(), rows, cfg.seq).fraction();
    }
    return e;
}

namespace {
// --inject-nan STEP: after that step's backward, world rank 0 writes a NaN into the first element of the
// first q_proj gradient it holds (layer 0's; the first range it holds when it has none), so a test can see
// the run stop naming that tensor. A hook's before_update, because that is where the optimizer's gradients
// are final in every layout (DP reduced, ZeRO's shard) and no other hook writes them.
struct InjectNan : StepHooks {
    AdamW& optim;
    int64_t at, step = 0;
    InjectNan(AdamW& o, int64_t at_step) : optim(o), at(at_step) {}
    void before_update() override {
        if (step != at || world_rank() != 0) return;
        const ParamRange* target = nullptr;
        for (const ParamRange& r : optim.ranges())
            if (r.count > 0 && (!target || (r.name.find("q_proj") != std::string::npos &&
                                            target->name.find("q_proj") == std::string::npos)))
                target = &r;
        if (!target) return;
        Tensor dst = optim.grad.flat(target->offset, 1);
        copy(dst, Tensor::from_host({NAN}, {1}, dst.device()));
        std::fprintf(stderr, "[rank 0] --inject-nan %ld: wrote a NaN into the gradient of %s, element %ld\n",
                     (long)at, target->name.c_str(), (long)target->name_offset);
    }
};
}  // namespace

namespace {

CheckpointContext checkpoint_context(const TrainLoop& L, const LRSchedule& schedule) {
    CheckpointContext c;
    c.model = L.trainer.model.config();
    c.precision = L.trainer.model.precision();
    c.shape = GridShape{(int)L.cfg.dp, (int)L.cfg.pp, (int)L.cfg.cp, (int)L.cfg.tp, (int)L.cfg.ep};
    c.sequence_parallel = L.cfg.sp;
    c.global_batch = L.plan.global_batch;
    c.seq = L.cfg.seq;
    c.seed = L.cfg.seed;
    c.data = L.cfg.data;
    c.lr = schedule;
    c.adamw = L.trainer.optimizer.cfg;
    return c;
}

// what a checkpoint carries beside the model and the optimizer: the state of every hook that keeps some outside
// the flat buffer (checkpoint_state.hpp: chapter 08's balance bias)
CheckpointExtras checkpoint_extras(const TrainLoop& L) {
    CheckpointExtras x;
    for (StepHooks* h : L.trainer.hooks)
        if (auto* s = dynamic_cast<CheckpointedState*>(h))
            for (StateTensor& t : s->checkpoint_state(L.trainer.model.layout())) x.state.push_back(t);
    return x;
}

// --resume: every rank loads its part (resharded when the layout differs); returns the step to continue after
int64_t resume_from_checkpoint(TrainLoop& L, const CheckpointContext& ctx, const CheckpointExtras& extras) {
    const TrainConfig& cfg = L.cfg;
    Timer timer;
    const std::string dir = resolve_resume_dir(cfg.resume, cfg.save);
    const int64_t step = load_checkpoint(dir, L.trainer.model, L.trainer.optimizer, ctx, extras);
    // --steps 0 loads the weights only (for --export-hf or --generate); otherwise some steps must be left
    CHECK(cfg.steps == 0 || step < cfg.steps, "--resume %s: the checkpoint is of step %ld, and --steps %ld leaves "
          "nothing to train (--steps 0 loads its weights for --export-hf or --generate)", cfg.resume.c_str(),
          (long)step, (long)cfg.steps);
    if (world_rank() == 0) {
        CheckpointReader meta(dir);  // for the report only
        const nlohmann::json& j = meta.metadata();
        const nlohmann::json& lay = j["layout"];
        const std::string policy = j["precision"]["policy"].get<std::string>();
        std::string notes;
        if (!extras.state.empty()) notes += strfmt("; %zu state tensors of the hooks", extras.state.size());
        if (meta.version() == 1)  // written before metadata.json had its checksum (docs/CHECKPOINTS.md)
            notes += "; note: a version-1 checkpoint, whose metadata.json has no checksum (its fields are checked)";
        if (cfg.steps > 0 && j["lr_schedule"]["total"].get<int64_t>() != ctx.lr.total)
            notes += strfmt("; note: it was saved by a run of --steps %ld, this one's LR schedule ends at %ld",
                            (long)j["lr_schedule"]["total"].get<int64_t>(), (long)ctx.lr.total);
        if (policy != ctx.precision.str())  // allowed: load_checkpoint converts (checkpoint_load.hpp)
            notes += strfmt("; note: a precision change: saved in (%s), this run is (%s)", policy.c_str(),
                            ctx.precision.str().c_str());
        std::printf("resumed from %s: step %ld, %ld samples seen, saved by %d ranks (dp %d pp %d cp %d tp %d ep %d), "
                    "loaded in %.3f s%s\n", dir.c_str(), (long)step, (long)j["data"]["samples_seen"].get<int64_t>(),
                    lay["world"].get<int>(), lay["dp"].get<int>(), lay["pp"].get<int>(), lay["cp"].get<int>(),
                    lay["tp"].get<int>(), lay["ep"].get<int>(), timer.seconds(), notes.c_str());
    }
    return step;
}

StepResult train_steps(TrainLoop& L, const Dataset& val) {
    const TrainConfig& cfg = L.cfg;
    // a run shorter than --warmup (say --steps 20 with the default 50) warms up over all but its last step
    LRSchedule schedule{cfg.lr, cfg.min_lr, std::min(cfg.warmup, cfg.steps - 1), cfg.steps};
    L.log.print = world_rank() == 0;
    if (world_rank() != 0) L.log.jsonl_path.clear();  // one writer: the ranks share the path
    StepLog log(L.log);
    StepResult r;
    InjectNan inject_nan(L.trainer.optimizer, cfg.inject_nan);
    std::vector<StepHooks*>& hooks = L.trainer.hooks;
    if (cfg.inject_nan > 0) hooks.push_back(&inject_nan);
    struct Unhook {  // the trainer outlives this function; the hook does not
        std::vector<StepHooks*>& hooks;
        StepHooks* h;
        ~Unhook() { hooks.erase(std::remove(hooks.begin(), hooks.end(), h), hooks.end()); }
    } unhook{hooks, &inject_nan};
    StragglerWatch stragglers(L.world);
    // --resume and --save (checkpoint_load.hpp, checkpoint_save.hpp): the state saved is the model's, the
    // optimizer's and the hooks'; the data position and the LR follow from the step
    const CheckpointContext ckpt_ctx = checkpoint_context(L, schedule);
    const GridShape shape{(int)cfg.dp, (int)cfg.pp, (int)cfg.cp, (int)cfg.tp, (int)cfg.ep};
    const GridCoords coords = shape.ranks() == world_size() ? grid_coords(shape, world_rank()) : GridCoords{};
    const CheckpointExtras extras = checkpoint_extras(L);
    int64_t first = 0;
    if (!cfg.resume.empty()) first = resume_from_checkpoint(L, ckpt_ctx, extras);
    std::unique_ptr<Checkpointer> ckpt;
    if (!cfg.save.empty()) {
        CHECK(shape.ranks() == world_size(), "--save: the layout %s is not the job's %d ranks", shape.str().c_str(),
              world_size());
        CheckpointOptions o{cfg.save, parse_save_every(cfg.save_every), cfg.mtbf_hours, cfg.keep, cfg.save_async};
        ckpt = std::make_unique<Checkpointer>(o, L.trainer.model, L.trainer.optimizer, ckpt_ctx, coords, L.world, extras);
    }
    for (int64_t s = first; s < cfg.steps; s++) {
        inject_failure_if_due(cfg, s + 1);
        inject_nan.step = s + 1;
        Timer timer;
        const double blocked0 = comm_blocked_seconds();
        inject_hang_if_due(cfg, s + 1);  // inside the step's time: a pause makes this rank the straggler
        float lr = schedule.at(s + 1);
        const int64_t flops0 = counted_flops().total();  // HFU from what the ops ran
        r = training_step(L.trainer, L.data, s, L.plan, lr, cfg.grad_clip);
        device_synchronize(L.trainer.model.device());
        const double seconds = timer.seconds();
        const StragglerWatch::Verdict straggler = stragglers.after_step(s + 1, seconds, comm_blocked_seconds() - blocked0);
        if (straggler.print && world_rank() == 0) std::printf("%s\n", StragglerWatch::line(s + 1, seconds, straggler).c_str());
        StepRecord rec;
        rec.step = s + 1;
        rec.total_steps = cfg.steps;
        rec.loss = r.loss;
        rec.grad_norm = r.grad_norm;
        rec.lr = lr;
        rec.tokens = L.plan.global_batch * cfg.seq;
        rec.seconds = seconds;
        rec.hardware_flops = (double)(counted_flops().total() - flops0);
        if (straggler.flagged) rec.extra.push_back({"straggler rank", straggler.rank});
        const bool last = s + 1 == cfg.steps;
        const bool eval_now = cfg.eval_every > 0 && ((s + 1) % cfg.eval_every == 0 || last);
        // ZeRO-1's deferred gathers land before what reads the weights: an evaluation or a save (only then, so
        // --save keeps the overlap on the other steps)
        if (eval_now || (ckpt && ckpt->due(s + 1, last)))
            for (StepHooks* h : L.trainer.hooks) h->settle_weights();
        if (eval_now) {
            Eval e = evaluate(L.trainer.model, val, cfg, L.full_logits);
            rec.task_accuracy = e.accuracy;
            rec.extra.push_back({"val loss", e.loss});
        }
        if (r.aux_loss != 0) rec.extra.push_back({"aux loss", r.aux_loss});  // a MoE core's load balancing
        if (L.trainer.model.precision().loss_scaling) rec.extra.push_back({"loss scale", r.loss_scale});
        if (r.skipped) rec.extra.push_back({"skipped (overflow)", 1});
        if (L.on_step) L.on_step(rec, r);
        log.log(rec, (s + 1) % cfg.log_every == 0 || s == first || last || eval_now);
        if (ckpt) ckpt->after_step(s + 1, seconds, last);
    }
    if (ckpt) ckpt->finish();
    const std::string held_back = stragglers.closing_line();
    if (!held_back.empty() && world_rank() == 0) std::printf("%s\n", held_back.c_str());
    return r;
}

// --generate after training: the prompt encoded by make_tokenizer's tokenizer, the text printed by rank 0 as
// it comes. Every rank generates (the same tokens): a gathering provider or TP's logits need them all.
void generate_after_training(TrainLoop& L, const LlamaConfig& mc) {
    const TrainConfig& cfg = L.cfg;
    std::unique_ptr<Tokenizer> tok = make_tokenizer(cfg, mc);
    const std::vector<int32_t> prompt = tok->encode(cfg.generate);
    GenerateOptions o;
    o.max_new = cfg.max_new, o.temperature = cfg.temperature, o.top_k = cfg.top_k, o.seed = (uint64_t)cfg.seed;
    o.stop = eos_token_ids(cfg.model);
    const bool print = world_rank() == 0;
    if (print)
        std::printf("\ngenerate: %zu prompt tokens (%s), %s, at most %ld new:\n%s", prompt.size(), tok->describe().c_str(),
                    cfg.temperature == 0 ? "greedy" : strfmt("temperature %g, top-k %ld", cfg.temperature,
                                                              (long)cfg.top_k).c_str(),
                    (long)cfg.max_new, cfg.generate.c_str());
    std::vector<int32_t> ids;
    std::string shown;  // what is printed so far: a multi-byte character may need two tokens
    generate(L.trainer.model, prompt, o, L.full_logits, [&](int32_t id) {
        ids.push_back(id);
        const std::string text = tok->decode(ids);
        if (print && text.size() > shown.size() && text.compare(0, shown.size(), shown) == 0) {
            std::printf("%s", text.substr(shown.size()).c_str());
            std::fflush(stdout);
            shown = text;
        }
    });
    if (print) std::printf("\n(%zu tokens generated)\n", ids.size());
}

}  // namespace

std::vector<int32_t> eos_token_ids(const std::string& model) {
    std::vector<int32_t> ids;
    if (!is_hf_model_dir(model)) return ids;
    for (const char* f : {"generation_config.json", "config.json"}) {
        std::ifstream in((std::filesystem::path(model) / f).string());
        if (!in) continue;
        const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
        if (j.is_discarded() || !j.is_object() || !j.contains("eos_token_id")) continue;
        const nlohmann::json& e = j["eos_token_id"];
        for (const auto& v : e.is_array() ? e : nlohmann::json::array({e}))
            if (v.is_number_integer()) ids.push_back(v.get<int32_t>());
        break;
    }
    return ids;
}

StepResult run_training(TrainLoop& L) {
    const TrainConfig& cfg = L.cfg;
    const LlamaConfig& mc = L.trainer.model.config();
    std::unique_ptr<Dataset> val =
        cfg.val_data.empty() ? nullptr : make_dataset(cfg.val_data, (uint64_t)cfg.seed, (int32_t)mc.vocab);
    // --steps 0 trains nothing, but --resume still loads the checkpoint's weights (train_steps runs no step)
    StepResult r = cfg.steps > 0 || !cfg.resume.empty() ? train_steps(L, val ? *val : L.data) : StepResult{};
    for (StepHooks* h : L.trainer.hooks) h->settle_weights();  // --export-hf and --generate read them
    if (!cfg.export_hf.empty()) {
        const GridShape shape{(int)cfg.dp, (int)cfg.pp, (int)cfg.cp, (int)cfg.tp, (int)cfg.ep};
        CHECK(shape.ranks() == world_size(), "--export-hf: the layout %s is not the job's %d ranks", shape.str().c_str(),
              world_size());
        export_hf(L.trainer.model, cfg.export_hf, grid_coords(shape, world_rank()), L.world,
                  is_hf_model_dir(cfg.model) ? cfg.model : "");
        std::error_code ec;
        const std::filesystem::path tok_to = std::filesystem::path(cfg.export_hf) / "tokenizer.json";
        if (!cfg.tokenizer.empty() && world_rank() == 0 && !std::filesystem::equivalent(cfg.tokenizer, tok_to, ec)) {
            // the folder then generates on its own
            std::filesystem::copy_file(cfg.tokenizer, tok_to, std::filesystem::copy_options::overwrite_existing, ec);
            CHECK(!ec, "--export-hf: copying --tokenizer %s failed: %s", cfg.tokenizer.c_str(), ec.message().c_str());
            std::printf("  + --tokenizer %s as tokenizer.json\n", cfg.tokenizer.c_str());
        }
    }
    if (!cfg.generate.empty()) generate_after_training(L, mc);
    return r;
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
    if (r == Recompute::offload) {
        const OffloadStats& o = model.offload_stats();
        const int64_t host = mem_stats(Device::cpu).peak[(int)Tag::offloaded];
        std::printf("  of it on the host at most (Tag::offloaded)  %12ld bytes  %s %ld layers x %ld: the device keeps\n"
                    "  the head's %ld and one layer at a time. Moved: %s to the host and %s back in %.3f s\n",
                    (long)host, host == c.n_layers * per_layer ? "=" : "(DIFFERENT from)", (long)c.n_layers,
                    (long)per_layer, (long)head, human_bytes(o.bytes_to_host).c_str(),
                    human_bytes(o.bytes_to_device).c_str(), o.seconds);
    }
    std::printf("  our formula: %ld layers x %ld + head %ld  %12ld bytes  %s\n", (long)c.n_layers, (long)per_layer,
                (long)head, (long)(c.n_layers * per_layer + head),
                measured == c.n_layers * per_layer + head ? "(equal)" : "(DIFFERENT)");
    std::printf("  playbook sbh(34 + 5as/h) per layer x %ld    %12ld bytes  (GPT block, 2-byte activations,\n"
                "                                                            dropout masks; see the README)\n",
                (long)c.n_layers, (long)(c.n_layers * playbook));
}

}  // namespace penta
