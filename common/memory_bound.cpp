// memory_bound.cpp — the memory estimate made before anything is allocated (memory_bound.hpp).
// Test: `build/bin/tests_01 -ts='ch01 np1' -tc='memory bound*'`, `bash tests/01_single_gpu/bad_inputs_test.sh`.
#include "memory_bound.hpp"

#include <unistd.h>

#include <algorithm>
#include <utility>

#include "formulas.hpp"
#include "metrics.hpp"
#include "ops_backend.hpp"
#include "precision.hpp"
#include "runtime.hpp"

namespace penta {

namespace {
// Memory this machine has for one rank's tensors: the device's, or on CPU the node's RAM shared by the
// ranks on the node. 0: unknown (no check).
double memory_per_rank(Device device) {
#if defined(PENTA_CUDA)
    if (device == Device::cuda) return (double)cuda::device_total_memory();
#endif
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    return pages > 0 && page > 0 ? (double)pages * page / local_size() : 0.0;
}

// Bounds of one piece of the model on one rank (a decoder layer, the embedding, the head), before ZeRO:
// its parameters (cut by tp, a MoE layer's experts by ep too) and one micro-batch's activations in it
// (cut by tp and cp; formulas.hpp). Either cut is at most that deep (norms are replicated), so a rank
// holds at least this.
struct Piece {
    double params = 0, acts = 0;
};

std::vector<Piece> layer_pieces(const TrainConfig& cfg, const LlamaConfig& mc, Device device) {
    const Recompute rc = parse_recompute(cfg.recompute);
    const AttentionKernel ak = parse_attention_kernel(cfg.attention);
    const int64_t h = mc.hidden, hd = mc.head_dim(), act = (int64_t)dtype_size(Precision::named(cfg.precision).act);
    // --steps 0 runs no forward that keeps anything; offload keeps one layer at a time on a GPU (counted as none)
    const bool kept = cfg.steps > 0 && !(rc == Recompute::offload && device == Device::cuda);
    const double cut = (double)(cfg.tp * cfg.cp), B = (double)cfg.micro_batch;
    auto acts = [&](int64_t ffn) {  // one sequence's bytes, times the micro-batch (no int64 product of sizes)
        return kept ? B * (double)llama_layer_activation_bytes(rc, ak, 1, cfg.seq, h, mc.n_heads, mc.n_kv_heads, hd,
                                                               ffn, act) / cut
                    : 0.0;
    };
    std::vector<Piece> layers((size_t)mc.n_layers);
    for (int64_t i = 0; i < mc.n_layers; i++) {
        Piece& p = layers[(size_t)i];
        if (!mc.moe.moe_layer(i)) {
            p = {(double)llama_layer_param_count(h, mc.n_heads, mc.n_kv_heads, mc.ffn, hd) / (double)cfg.tp,
                 acts(mc.ffn)};
            continue;
        }
        // norms, attention, router and shared experts on every ep rank; the routed experts cut over ep.
        // Its MLP activations depend on the routing (dropped copies keep none): only the attention's counted.
        const MoeConfig& m = mc.moe;
        const double always = (double)llama_layer_param_count(h, mc.n_heads, mc.n_kv_heads, 0, hd) +
                              (double)(m.experts * h + 3 * h * m.shared_experts * m.expert_ffn);
        const double experts = (double)(m.experts * 3 * h * m.expert_ffn);
        p = {always / (double)cfg.tp + experts / (double)(cfg.tp * cfg.ep), acts(0)};
    }
    return layers;
}
}  // namespace

MemoryBound memory_lower_bound(const TrainConfig& cfg, const LlamaConfig& mc, Device device, int zero) {
    const Precision pol = Precision::named(cfg.precision);
    const double data = (double)(cfg.dp * cfg.cp);
    // a chapter that does not say: as far as ZeRO could cut over dp x cp (stage 3 is refused with a pipeline)
    if (zero == kZeroUnknown) zero = cfg.pp > 1 ? 2 : 3;
    const bool train = cfg.steps > 0;
    // one rank's model state for P of its parameters, in the policy's bytes: weights, gradients, and AdamW's
    // two f32 moments (+ the f32 master copy) when it trains (--steps 0 builds AdamW without them)
    auto state = [&](const Piece& p) {
        MemoryBound b;
        b.weights = p.params * (double)dtype_size(pol.param) / (zero >= 3 ? data : 1.0);
        b.grads = p.params * (double)dtype_size(pol.grad) / (zero >= 2 ? data : 1.0);
        b.optim = train ? p.params * (8.0 + (pol.fp32_master ? 4.0 : 0.0)) / (zero >= 1 ? data : 1.0) : 0.0;
        b.acts = p.acts;
        return b;
    };
    const std::vector<Piece> layers = layer_pieces(cfg, mc, device);
    const double V = (double)mc.vocab, h = (double)mc.hidden, tp = (double)cfg.tp;
    const MemoryBound embed = state({V * h / tp, 0});
    MemoryBound head = state({(h + (mc.tied_embeddings ? 0 : V * h)) / tp,
                              train ? (double)cfg.micro_batch *
                                          (double)llama_head_activation_bytes(1, cfg.seq, mc.hidden, mc.vocab,
                                                                              (int64_t)dtype_size(pol.act)) /
                                          (double)(cfg.tp * cfg.cp)
                                    : 0.0});
    if (mc.tied_embeddings && cfg.pp > 1) head += state({V * h / tp, 0});  // the last stage's replica for lm_head
    MemoryBound all = embed, smallest;
    all += head;
    for (size_t i = 0; i < layers.size(); i++) {
        const MemoryBound l = state(layers[i]);
        all += l;
        if (i == 0 || l.total() < smallest.total()) smallest = l;
    }
    // The pipeline's largest stage, whatever its split: at least the average of the pp stages; the stage with
    // the most layers holds ceil(L / pp) of them; the first holds the embedding and a layer, the last the head
    MemoryBound need = all.scaled(1.0 / (double)cfg.pp);
    if (cfg.pp > 1) {
        MemoryBound first = embed, last = head;
        first += smallest, last += smallest;
        const MemoryBound most = smallest.scaled((double)((mc.n_layers + cfg.pp - 1) / cfg.pp));
        for (const MemoryBound& b : {first, last, most})
            if (b.total() > need.total()) need = b;
    }
    // on the host, the step's token batch (tokens and targets, int32)
    if (device == Device::cpu) need.batch = 8.0 * (double)cfg.micro_batch * (double)cfg.grad_accum * (double)cfg.seq;
    return need;
}

MemoryBound& MemoryBound::operator+=(const MemoryBound& o) {
    weights += o.weights, grads += o.grads, optim += o.optim, acts += o.acts, batch += o.batch;
    return *this;
}

MemoryBound MemoryBound::scaled(double f) const {
    return MemoryBound{weights * f, grads * f, optim * f, acts * f, batch * f};
}

void check_memory_bound(const TrainConfig& cfg, const LlamaConfig& mc, Device device, int zero, double capacity) {
    if (capacity <= 0) capacity = memory_per_rank(device);
    if (capacity <= 0) return;
    const MemoryBound b = memory_lower_bound(cfg, mc, device, zero);
    const double need = b.total(), state = b.weights + b.grads + b.optim;
    auto gib = [](double bytes) { return human_bytes((int64_t)std::min(bytes, 9e18)); };
    std::string layout;  // the flags that cut the model, as given
    for (auto [flag, v] : {std::pair<const char*, int64_t>{"dp", cfg.dp}, {"pp", cfg.pp}, {"cp", cfg.cp},
                           {"tp", cfg.tp}, {"ep", cfg.ep}})
        if (v > 1) layout += strfmt(" --%s %ld", flag, (long)v);
    if (zero > 0 && cfg.dp * cfg.cp > 1) layout += strfmt(" --zero %d", zero);
    CHECK(need <= capacity,
          "--model %s (%s params) with --micro-batch %ld × --seq %ld%s%s, --precision %s%s: one rank needs at least %s "
          "(weights %s, gradients %s, AdamW %s%s, one micro-batch's activations %s by formulas.hpp, the step's tokens "
          "%s), more than the %s of %s memory it has%s: %s",
          cfg.model.c_str(), human_count((double)mc.n_params()).c_str(), (long)cfg.micro_batch, (long)cfg.seq,
          cfg.grad_accum > 1 ? strfmt(" (--grad-accum %ld)", (long)cfg.grad_accum).c_str() : "", layout.c_str(),
          cfg.precision.c_str(), cfg.steps == 0 ? ", --steps 0" : "", gib(need).c_str(), gib(b.weights).c_str(),
          gib(b.grads).c_str(), gib(b.optim).c_str(), cfg.steps == 0 ? " (nothing to train)" : "", gib(b.acts).c_str(),
          gib(b.batch).c_str(), gib(capacity).c_str(), device == Device::cpu ? "host" : "GPU",
          device == Device::cpu && local_size() > 1 ? strfmt(" (this node's RAM over its %d ranks)", local_size()).c_str()
                                                    : "",
          state > b.acts ? "a smaller --model, or cut it over more ranks (--tp, --pp, ZeRO over --dp)"
                         : "lower --micro-batch or --seq, or use --recompute full");
}

}  // namespace penta
