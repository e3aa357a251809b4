// tools/figures/formula_dump.cpp — the numbers behind the formula and planner figures, as JSON, computed by the
// same C++ the chapters print them with (common/formulas.hpp, 09_5d/planner.hpp): the figures never retype a
// formula in Python. `make figures` builds it; tools/figures/figlib.py (Context.formulas) calls it.
//
// Playbook: the memory and communication formulas of "First steps: training on one GPU" (memory by kind,
// activation recomputation), "ZeRO", "Tensor parallelism", "Sequence parallelism", and the planner of
// "Finding the best training configuration".
//
//   build/bin/formula_dump '[{"fn": "model", "model": "llama3-8b"}]'
//   echo '[{"fn": "tp_layer_comm_bytes", "t": 4, "s": 32, "b": 16, "h": 256}]' | build/bin/formula_dump
//
// Input: a JSON array of queries (argv[1], or stdin when there is none); output: a JSON array of the answers,
// one per query, in order. A query names its function in "fn"; the others are its arguments (see answer()).
// An unknown function or a missing argument is refused naming it, before anything is printed.
#include <cstdio>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>

#include "../../09_5d/planner.hpp"
#include "../../common/core.hpp"
#include "../../common/formulas.hpp"
#include "../../common/model_layout.hpp"

using namespace penta;
using json = nlohmann::json;

namespace {

// argument `key` of query q, which must be present
const json& arg(const json& q, const char* key) {
    if (!q.contains(key))
        throw std::runtime_error(std::string("formula_dump: query ") + q.dump() + " lacks \"" + key + "\"");
    return q.at(key);
}
template <class T> T get(const json& q, const char* key) { return arg(q, key).get<T>(); }
template <class T> T get_or(const json& q, const char* key, T fallback) {
    return q.contains(key) ? q.at(key).get<T>() : fallback;
}

json state_json(const ModelStateBytes& s) {
    return {{"params", s.params}, {"grads", s.grads}, {"master", s.master}, {"optim", s.optim}, {"total", s.total()}};
}

// the unit numels (embedding, every layer, head) of the whole model at tp 1: what ZeRO cuts (03_zero/train.cpp)
std::vector<int64_t> unit_numels(const LlamaConfig& c) {
    std::vector<int64_t> units;
    for (const ParamUnit& u : ParamLayout::build(c).units) units.push_back(u.numel);
    return units;
}

// the planner's job and machine of a query: "model", "machine" (h100 | h200 | cpu), "precision", "seq",
// "global_batch", "kernel"
plan::Job job_of(const json& q) {
    plan::Job job;
    job.model = preset(get<std::string>(q, "model"));
    job.model.validate();
    job.seq = get<int64_t>(q, "seq");
    job.global_batch = get<int64_t>(q, "global_batch");
    job.precision = plan::parse_precision(get_or<std::string>(q, "precision", "bf16"));
    job.kernel = parse_attention_kernel(get_or<std::string>(q, "kernel", "flash"));
    return job;
}

json layout_json(const plan::Layout& L) {
    return {{"str", L.str()}, {"dp", L.grid.dp}, {"tp", L.grid.tp}, {"pp", L.grid.pp}, {"cp", L.grid.cp},
            {"ep", L.grid.ep}, {"zero", L.zero}, {"sp", L.sp}, {"recompute", recompute_name(L.recompute)},
            {"micro_batch", L.micro_batch}, {"grad_accum", L.grad_accum},
            {"schedule", pipe_schedule_name(L.schedule)}, {"chunks", L.chunks}};
}

json answer(const json& q) {
    const std::string fn = get<std::string>(q, "fn");
    if (fn == "model") {  // a preset's shape and parameter count
        const LlamaConfig c = preset(get<std::string>(q, "model"));
        return {{"name", c.name}, {"params", c.n_params()}, {"layers", c.n_layers}, {"hidden", c.hidden},
                {"heads", c.n_heads}, {"kv_heads", c.n_kv_heads}, {"head_dim", c.head_dim()}, {"ffn", c.ffn},
                {"vocab", c.vocab}, {"tied", c.tied_embeddings}};
    }
    if (fn == "model_state_bf16_mixed")  // N: parameters; 2N + 2N + 4N + 8N
        return state_json(model_state_bytes_bf16_mixed(get<int64_t>(q, "N"), get_or<bool>(q, "fp32_grads", false)));
    if (fn == "model_state_fp32") return state_json(model_state_bytes_fp32(get<int64_t>(q, "N")));
    if (fn == "llama_activation_bytes") {  // the whole model's saved tensors for a micro-batch of B x T
        const LlamaConfig c = preset(get<std::string>(q, "model"));
        return llama_activation_bytes(c, parse_recompute(get<std::string>(q, "recompute")),
                                      parse_attention_kernel(get_or<std::string>(q, "kernel", "flash")),
                                      get<int64_t>(q, "B"), get<int64_t>(q, "T"), get_or<int64_t>(q, "bytes", 4));
    }
    if (fn == "zero_model_state") {  // rank r of dp under ZeRO stage, this code's uneven shards
        const LlamaConfig c = preset(get<std::string>(q, "model"));
        const int dp = get<int>(q, "dp"), stage = get<int>(q, "stage");
        const int64_t S = zero_shard_numel(unit_numels(c), dp, get_or<int>(q, "rank", 0));
        const std::string precision = get_or<std::string>(q, "precision", "fp32");
        if (precision != "fp32" && precision != "bf16")
            throw std::runtime_error("formula_dump: zero_model_state: precision " + precision + ": fp32 | bf16");
        return state_json(precision == "fp32" ? zero_model_state_bytes_fp32(stage, c.n_params(), S)
                                              : zero_model_state_bytes_bf16(stage, c.n_params(), S));
    }
    if (fn == "zero_model_state_bf16_mixed")  // the playbook's closed form, Ψ/N
        return state_json(zero_model_state_bytes_bf16_mixed(get<int>(q, "stage"), get<int64_t>(q, "psi"), get<int64_t>(q, "dp")));
    if (fn == "tp_layer_comm_bytes")  // one layer's TP (or SP) boundaries, forward + backward, one micro-batch
        return tp_layer_comm_elements(get<int64_t>(q, "t"), get<int64_t>(q, "s"), get<int64_t>(q, "b"), get<int64_t>(q, "h")) *
               (double)get_or<int64_t>(q, "bytes", 4);
    if (fn == "norm_region_activation_bytes")  // x_in, x_mid and the two rstd of `layers` layers, N / sp tokens
        return get_or<int64_t>(q, "layers", 1) *
               llama_norm_region_activation_bytes(get<int64_t>(q, "B"), get<int64_t>(q, "T"), get<int64_t>(q, "h"),
                                                  get_or<int64_t>(q, "sp", 1), get_or<int64_t>(q, "bytes", 4));
    if (fn == "plan_rank") {  // the planner's prediction for one rank of one layout ("layout": its degrees and flags)
        const plan::Job job = job_of(q);
        plan::Machine m = plan::machine_preset(get<std::string>(q, "machine"));
        const json& l = arg(q, "layout");
        plan::Layout L;
        L.grid = GridShape{get<int>(l, "dp"), get_or<int>(l, "pp", 1), get_or<int>(l, "cp", 1), get_or<int>(l, "tp", 1),
                           get_or<int>(l, "ep", 1)};
        L.zero = get_or<int>(l, "zero", 0), L.sp = get_or<bool>(l, "sp", false);
        L.recompute = parse_recompute(get_or<std::string>(l, "recompute", "none"));
        L.schedule = parse_pipe_schedule(get_or<std::string>(l, "schedule", "1f1b"));
        L.chunks = get_or<int>(l, "chunks", 1), L.micro_batch = get<int64_t>(l, "micro_batch");
        L.grad_accum = get<int64_t>(l, "grad_accum");
        const int world = L.grid.dp * L.grid.pp * L.grid.cp * L.grid.tp;
        if (get<std::string>(q, "machine") == "cpu") m.gpus_per_node = world;  // as 09_5d's trainer predicts itself
        plan::check_layout(job, m, L, world);
        const plan::RankPrediction r = plan::predict_rank(job, m, L, get<int>(q, "rank"));
        json out = state_json(r.state);
        out["activations"] = r.activations, out["rank_total"] = r.total(), out["layout"] = layout_json(L);
        return out;
    }
    if (fn == "plan_landscape") {  // every legal layout ranked (09_5d_plan without --dp/--tp/...)
        const plan::Job job = job_of(q);
        const plan::Machine m = plan::machine_preset(get<std::string>(q, "machine"));
        plan::SearchSpace space;
        space.cp_min_seq = get_or<int64_t>(q, "cp_min_seq", space.cp_min_seq);
        json rows = json::array();
        for (const plan::Candidate& c : plan::enumerate_and_rank(job, m, get<int>(q, "gpus"), space))
            rows.push_back({{"layout", layout_json(c.layout)}, {"tokens_per_s", c.time.tokens_per_s},
                            {"mfu", c.time.mfu}, {"step_s", c.time.step}, {"fits", c.fits},
                            {"reaches_batch", c.reaches_batch}, {"memory", c.worst.total()}});
        return {{"gpu_memory", m.gpu_memory}, {"ranked", rows}};
    }
    throw std::runtime_error("formula_dump: unknown \"fn\": " + fn +
                             " (model, model_state_bf16_mixed, model_state_fp32, llama_activation_bytes, zero_model_state, "
                             "zero_model_state_bf16_mixed, tp_layer_comm_bytes, norm_region_activation_bytes, plan_rank, plan_landscape)");
}

}  // namespace

int main(int argc, char** argv) {
    try {
        std::string text = argc > 1 ? std::string(argv[1])
                                    : std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
        const json queries = json::parse(text);
        if (!queries.is_array()) throw std::runtime_error("formula_dump: the input must be a JSON array of queries");
        json out = json::array();
        for (const json& q : queries) out.push_back(answer(q));
        std::printf("%s\n", out.dump().c_str());
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "%s\n", e.what());
        return 1;
    }
}
