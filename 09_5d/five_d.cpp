// five_d.cpp — the 5D run's flags, its layout rules and its parts (five_d.hpp).
//   mpirun -np 16 build/bin/09_5d --model tiny-moe --dp 2 --pp 2 --cp 2 --tp 2 --ep 2 --moe-balance none
#include "five_d.hpp"

#include <fstream>
#include <nlohmann/json.hpp>

namespace penta {

ConfigFlags expand_config_flags(int argc, char** argv) {
    ConfigFlags c;
    for (int i = 1; i < argc; i++) {
        const std::string a = argv[i];
        const bool bare = a == "--config";
        if (!bare && a.rfind("--config=", 0) != 0) {
            c.rest.push_back(a);
            continue;
        }
        CHECK(!bare || i + 1 < argc, "--config needs a value (a JSON file of flags)");
        CHECK(c.file.empty(), "--config is given twice (%s, then %s): one file of flags", c.file.c_str(),
              bare ? argv[i + 1] : a.c_str() + 9);
        c.file = bare ? argv[++i] : a.substr(9);
    }
    if (c.file.empty()) return c;
    const std::string& file = c.file;
    std::ifstream in(file);
    CHECK(in.good(), "--config %s: cannot read the file", file.c_str());
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(in);
    } catch (const std::exception& e) {
        FAIL("--config %s is not JSON: %s", file.c_str(), e.what());
    }
    CHECK(j.is_object(), "--config %s must hold one JSON object of flag names and values, e.g. {\"dp\": 2, "
          "\"pp-schedule\": \"1f1b\"}", file.c_str());
    for (auto& [key, v] : j.items()) {
        std::string name = key;
        for (char& ch : name) ch = ch == '_' ? '-' : ch;  // "grad_accum" reads as --grad-accum
        CHECK(name != "config", "--config %s: key \"%s\": a config file cannot name another one (put its flags in "
              "this file)", file.c_str(), key.c_str());
        CHECK(v.is_boolean() || v.is_number() || v.is_string(),
              "--config %s: key \"%s\" must be a number, a string or a boolean", file.c_str(), key.c_str());
        // --name=value, one word: a value the flag refuses is then that flag's error, never a stray argument
        const std::string value = v.is_boolean() ? (v.get<bool>() ? "1" : "0") : v.is_string() ? v.get<std::string>()
                                                                                               : v.dump();
        c.keys.push_back({key, "--" + name + "=" + value});
    }
    return c;
}

namespace {
// a penta::Error's message without its "[rank R] file:line: " (the caller adds its own context and prefix)
std::string bare_message(const Error& e) {
    const std::string m = e.what();
    const size_t at = m.rfind("[rank", 0) == 0 ? m.find(": ") : std::string::npos;
    return at == std::string::npos ? m : m.substr(at + 2);
}
}  // namespace

bool parse_5d_flags(int argc, char** argv, TrainConfig& cfg, FiveDFlags& f) {
    Flags flags("09_5d",
                "Chapter 09: the 5D trainer — --dp (ZeRO), --tp (--sp), --cp, --pp (every --pp-schedule) and --ep "
                "together, each through its chapter's seam (playbook: 5D parallelism).");
    cfg.register_flags(flags);
    cfg.register_parallel_flags(flags);
    // --help: the five degrees and ZeRO first, then each composed chapter's own flags under its name
    flags.chapter("5D parallelism (chapter 09)", {"dp", "tp", "pp", "cp", "ep", "sp"});
    flags.add("zero", &f.zero, "ZeRO (chapter 03) over dp x cp, experts over edp: 1, 2, or 3 (3 only with --pp 1); 0 "
              "plain all-reduce");
    flags.add("force-tp-across-nodes", &f.force_tp_across_nodes, "allow a tp group to span nodes (refused otherwise: tp "
              "all-reduces inside every layer)");
    flags.add("config", &f.config, "a JSON file of flags ({\"dp\": 2, \"pp-schedule\": \"1f1b\"}); the command line's "
              "flags override it");
    flags.group("Pipeline parallelism (chapter 07)");
    register_pipeline_flags(flags, f.pp);
    flags.group("Context parallelism (chapter 06)");
    register_context_parallel_flags(flags, f.cp);
    flags.group("Expert parallelism (chapter 08)");
    register_moe_flags(flags, f.moe);
    // --config's keys first, each error naming the file and the key; then the command line's flags, which override them
    ConfigFlags conf = expand_config_flags(argc, argv);
    for (auto& [key, arg] : conf.keys) {
        char* av[] = {argv[0], arg.data()};
        try {
            flags.parse(2, av);
        } catch (const Error& e) {
            FAIL("--config %s: key \"%s\": %s", conf.file.c_str(), key.c_str(), bare_message(e).c_str());
        }
    }
    std::vector<char*> av{argv[0]};
    for (std::string& a : conf.rest) av.push_back(a.data());
    if (!flags.parse((int)av.size(), av.data())) return false;
    cfg.validate();
    if (f.zero != 0) parse_zero_stage(f.zero);
    f.pp.zero = f.zero, f.cp.zero = f.zero, f.moe.zero = f.zero;
    check_pipeline_flags(cfg, f.pp);
    parse_cp_shard(f.cp.shard);
    ContextParallelFlags c = f.cp;
    if (cfg.cp == 1) c.shard = "contiguous";  // one rank holds the whole sequence: no chunk rule
    check_context_parallel_flags(cfg, c);
    check_moe_flags(f.moe);
    return true;
}

LlamaConfig resolve_5d_model(const TrainConfig& cfg, const FiveDFlags& f) {
    // the config alone says which (resolve_moe_model runs resolve_model's start-up checks itself)
    return resolve_model(cfg.model).moe.enabled() ? resolve_moe_model(cfg, f.moe) : resolve_model(cfg, (int)f.zero);
}

GridShape shape_of(const TrainConfig& cfg) {
    return GridShape{(int)cfg.dp, (int)cfg.pp, (int)cfg.cp, (int)cfg.tp, (int)cfg.ep};
}

void check_5d_layout(const TrainConfig& cfg, const FiveDFlags& f, const LlamaConfig& mc, int world_size) {
    validate_grid(shape_of(cfg), world_size, &mc);  // the product, tp divides the heads, ep divides dp × cp, ...
    if (mc.moe.enabled()) {
        check_expert_layout(mc, cfg.ep, cfg.tp);
        // chapter 08's MoE layer counts per sequence: the balance loss's f_i and P_i and the capacity's
        // ceil(f k T / E) need all T tokens of a sequence, and a cp rank holds T/cp of them
        CHECK(cfg.cp == 1 || parse_moe_balance(f.moe.balance) != MoeBalance::aux,
              "--cp %ld with --moe-balance aux: the balance loss is computed per sequence (each expert's share of its "
              "tokens and of its router probability), and context parallelism gives each cp rank only --seq / --cp of "
              "a sequence's tokens; use --moe-balance bias (the load summed over dp x cp) or none", (long)cfg.cp);
        CHECK(cfg.cp == 1 || f.moe.capacity == 0,
              "--cp %ld with --moe-capacity %g: the capacity is per sequence (ceil(f k T / E) copies of its T tokens), "
              "and a cp rank holds only --seq / --cp of them; use --moe-capacity 0 with --cp", (long)cfg.cp,
              f.moe.capacity);
    } else {
        CHECK(cfg.ep == 1,
              "--ep %ld with the dense model %s: expert parallelism spreads a mixture of experts' experts over ranks, "
              "and a dense model has none; use a MoE model (--model tiny-moe, mixtral-8x7b, deepseek-moe-16b or a "
              "Mixtral config.json) or --ep 1", (long)cfg.ep, mc.name.c_str());
    }
    CHECK(f.zero != 3 || cfg.pp == 1,
          "--zero 3 with --pp %ld: ZeRO-3 all-gathers a stage's weights for every micro-batch's forward and backward, and "
          "a pipeline needs many micro-batches, so the two multiply each other's traffic (chapter 07); use --zero 1 or "
          "2 with a pipeline", (long)cfg.pp);
    CHECK(cfg.eval_every == 0 || cfg.pp == 1,
          "--eval-every %ld with --pp %ld: the held-out evaluation runs the whole model on every rank, and its layers "
          "are spread over the stages; pass --eval-every 0 (the step line's acc is measured on the head stage)",
          (long)cfg.eval_every, (long)cfg.pp);
    std::vector<LayerRange> pieces;
    pipeline_plan(cfg, f.pp, mc, &pieces);  // the schedule against --pp and --grad-accum, the layer split
}

FiveDParts::FiveDParts(const TrainConfig& cfg, const FiveDFlags& f, const LlamaConfig& mc, ParallelGrid& grid,
                       Device device, const AdamWConfig& ac) {
    StageCores cores;
    if (cfg.cp > 1) {
        const CpShard shard = parse_cp_shard(f.cp.shard);
        attention = make_context_attention(grid, shard, parse_cp_attn(f.cp.attn), cfg.seq);
        cores.attention_core = attention;
        plan = context_parallel_plan(cfg, grid, shard);
    } else {
        plan = data_parallel_plan(cfg, grid.dp());
    }
    if (mc.moe.enabled()) {
        moe = std::make_shared<MoeLayer>(mc, moe_options(f.moe), device, &grid.ep(), &grid.tp());
        cores.mlp_core = moe;
    }
    cores.data = &grid.dp_cp(), cores.data_axes = kAxisDP | kAxisCP;  // the cp ranks saw other tokens: data parallel
    PipelineFlags pf = f.pp;
    pf.zero = f.zero;
    stage = std::make_unique<PipelineParts>(cfg, pf, mc, grid, device, ac, cores);
    hooks = stage->hooks;
    if (moe) {
        balance = std::make_unique<ExpertBalanceHooks>(*moe, &grid.dp_cp());
        hooks.push_back(balance.get());
    }
}

FiveDParts::~FiveDParts() = default;

}  // namespace penta
