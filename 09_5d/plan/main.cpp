// 09_5d/plan/main.cpp — the layout planner's command line (planner.hpp): a model, a machine and a target
// batch in; every legal layout ranked by the playbook's three steps out, with why the first one wins. Given
// a layout (any of --dp/--tp/--pp/--cp/--ep, with --zero/--sp/...; --dp defaults to what the GPUs leave), it
// prints that layout's per-stage memory and traffic instead.
//
// Playbook: "Finding the best training configuration". One process, no mpirun (09_5d/PLANNER.md):
//   build/bin/09_5d_plan --model llama3-8b --machine h100 --gpus 64 --seq 4096 --global-batch 256
//   build/bin/09_5d_plan --model llama3-70b --machine h100 --gpus 512
//   build/bin/09_5d_plan --model path/to/config.json --machine h200 --gpus 16 --global-batch 64
//   build/bin/09_5d_plan --model tiny --machine cpu --gpus 4 --precision fp32 --seq 8 --global-batch 8 --tp 2 --dp 2
#include <cstdio>
#include <sys/stat.h>

#include "../../common/config.hpp"
#include "../../common/runtime.hpp"
#include "../planner.hpp"

using namespace penta;
using namespace penta::plan;

namespace {

LlamaConfig load_model(const std::string& m) {
    struct stat st;
    if (stat(m.c_str(), &st) == 0) {
        const std::string file = S_ISDIR(st.st_mode) ? m + "/config.json" : m;
        return load_hf_config(file);
    }
    if (m.find('/') != std::string::npos || (m.size() > 5 && m.substr(m.size() - 5) == ".json"))
        FAIL("--model %s: no such file (a preset name or a Hugging Face config.json / its folder)", m.c_str());
    return preset(m);  // throws listing the presets
}

void print_rank(const Job& job, const Machine& m, const Layout& L) {
    std::printf("%-6s %-5s %12s %12s %12s %12s %6s %12s %12s  bytes/step: %9s %9s %9s %9s %9s\n", "stage", "node",
                "params", "grads", "master", "optim", "in-fl", "activations", "total", "dp", "tp", "pp", "cp", "ep");
    for (int s = 0; s < L.grid.pp; s++) {
        GridCoords c;
        c.pp = s;
        const RankPrediction r = predict_rank(job, m, L, grid_rank(L.grid, c));
        auto mb = [](double b) { return strfmt("%.1fM", b / 1e6); };
        std::printf("%-6d %-5d %12lld %12lld %12lld %12lld %6d %12lld %12lld              %9s %9s %9s %9s %9s\n", s,
                    r.node, (long long)r.state.params, (long long)r.state.grads, (long long)r.state.master,
                    (long long)r.state.optim, r.in_flight, (long long)r.activations, (long long)r.total(),
                    mb(r.bytes.dp).c_str(), mb(r.bytes.tp).c_str(), mb(r.bytes.pp).c_str(), mb(r.bytes.cp).c_str(),
                    mb(r.bytes.ep).c_str());
    }
}

int run(int argc, char** argv) {
    std::string model = "llama3-8b", machine = "h100", precision = "bf16", recompute = "none", schedule = "1f1b";
    std::string kernel = "flash";
    int64_t gpus = 64, gpn = 0, seq = 4096, global_batch = 256, top = 15, cp_min_seq = 16384;
    int64_t dp = 0, tp = 0, pp = 0, cp = 0, ep = 0, zero = 0, micro_batch = 1, grad_accum = 0, chunks = 1;
    float mem_gb = 0, intra = 0, inter = 0, tflops = 0, eff = 0;
    bool sp = false, cross_tp = false;
    Flags f("09_5d_plan", "the layout planner: every legal 5D layout of a model on a machine, ranked by the "
                          "playbook's three steps (fit memory, reach the global batch, maximise throughput)");
    f.chapter("Layout planner (chapter 09)");
    f.add("model", &model, "a preset (tiny, small, smollm-135m, llama3-8b, llama3-70b, mixtral-8x7b, ...) or a "
                           "Hugging Face config.json or its folder");
    f.group("Machine");
    f.add("machine", &machine, "h100 | h200 (nodes of 8, NVLink + InfiniBand) | cpu (this repository's CPU ranks)");
    f.add("gpus", &gpus, "GPUs in the job");
    f.add("gpus-per-node", &gpn, "GPUs per node (0: the machine's)");
    f.add("gpu-memory", &mem_gb, "GB of memory per GPU (0: the machine's)");
    f.add("intra-bw", &intra, "GB/s per GPU inside a node, one direction (0: the machine's NVLink)");
    f.add("inter-bw", &inter, "GB/s per GPU across nodes, one direction (0: the machine's InfiniBand)");
    f.add("peak-tflops", &tflops, "dense TFLOP/s of one GPU at this precision (0: the machine's)");
    f.add("efficiency", &eff, "share of peak a step's compute reaches, in (0, 1] (0: the machine's)");
    f.group("Layout planner (chapter 09)");
    f.add("seq", &seq, "tokens per sequence");
    f.add("global-batch", &global_batch, "target sequences per optimizer step (the playbook's GBS / seq)");
    f.add("precision", &precision,
          "bf16 (the playbook's mixed precision: bf16 gradients, fp32 master and Adam) | bf16-weights (the "
          "trainer's --precision bf16: f32 gradients) | fp32 (this code's default)");
    f.add("attention", &kernel, "naive | flash: the kernel whose saved tensors are counted");
    f.add("top", &top, "rows of the ranked table");
    f.add("allow-cross-node-tp", &cross_tp, "consider tp groups larger than a node");
    f.add("cp-min-seq", &cp_min_seq, "ranking: consider --cp > 1 only from this sequence length on (the playbook: CP is for long sequences)");
    f.group("One layout, evaluated instead of ranked");
    f.add("dp", &dp, "evaluate one layout: its data-parallel degree (0: --gpus over the others' product when any of "
                     "--tp --pp --cp --ep is given; else rank every layout)");
    f.add("tp", &tp, "that layout's tensor-parallel degree (default 1)");
    f.add("pp", &pp, "... pipeline stages (default 1)");
    f.add("cp", &cp, "... context-parallel degree (default 1)");
    f.add("ep", &ep, "... expert-parallel degree (default 1)");
    f.add("zero", &zero, "... ZeRO stage 0-3");
    f.add("sp", &sp, "... sequence parallelism");
    f.add("recompute", &recompute, "... none | selective | full");
    f.add("micro-batch", &micro_batch, "... sequences per micro-batch");
    f.add("grad-accum", &grad_accum, "... micro-batches per step (0: global-batch / (dp · micro-batch))");
    f.add("pp-schedule", &schedule, "... afab | 1f1b | interleaved | zb1 | dualpipe");
    f.add("pp-chunks", &chunks, "... interleaved 1F1B's chunks per stage");
    if (!f.parse(argc, argv)) return 0;

    Machine m = machine_preset(machine);
    if (gpn) m.gpus_per_node = (int)gpn;
    if (mem_gb) m.gpu_memory = (int64_t)(mem_gb * 1e9);
    if (intra) m.intra_bw = intra * 1e9;
    if (inter) m.inter_bw = inter * 1e9;
    if (tflops) m.peak_flops = tflops * 1e12;
    if (eff) m.efficiency = eff;
    CHECK(gpus >= 1 && gpus <= (1 << 20), "--gpus %lld must be in 1..1048576", (long long)gpus);
    CHECK(m.gpus_per_node >= 1, "--gpus-per-node %d must be >= 1", m.gpus_per_node);
    CHECK(m.gpu_memory > 0 && m.intra_bw > 0 && m.inter_bw > 0 && m.peak_flops > 0,
          "--gpu-memory, --intra-bw, --inter-bw and --peak-tflops must be > 0");
    CHECK(m.efficiency > 0 && m.efficiency <= 1, "--efficiency %g must be in (0, 1]", m.efficiency);
    CHECK(seq >= 1 && seq <= (1 << 24), "--seq %lld must be in 1..16777216", (long long)seq);
    CHECK(global_batch >= 1, "--global-batch %lld must be >= 1", (long long)global_batch);
    CHECK(top >= 1, "--top %lld must be >= 1", (long long)top);

    // one layout when any of its degrees is given (--dp derived from the others when absent); its other flags
    // mean nothing to the ranking, which tries every value of them
    const bool one = dp > 0 || tp > 0 || pp > 0 || cp > 0 || ep > 0;
    if (one && dp == 0) {
        const int64_t rest = std::max<int64_t>(tp, 1) * std::max<int64_t>(pp, 1) * std::max<int64_t>(cp, 1);
        CHECK(gpus % rest == 0, "--tp %lld × --pp %lld × --cp %lld = %lld does not divide --gpus %lld: give --dp, or "
              "degrees whose product divides the GPUs", (long long)std::max<int64_t>(tp, 1),
              (long long)std::max<int64_t>(pp, 1), (long long)std::max<int64_t>(cp, 1), (long long)rest, (long long)gpus);
        dp = gpus / rest;
    }
    if (!one) {
        std::string given;
        auto note = [&](bool set, const std::string& flag) { if (set) given += (given.empty() ? "" : " ") + flag; };
        note(zero != 0, strfmt("--zero %lld", (long long)zero));
        note(sp, "--sp");
        note(recompute != "none", "--recompute " + recompute);
        note(micro_batch != 1, strfmt("--micro-batch %lld", (long long)micro_batch));
        note(grad_accum != 0, strfmt("--grad-accum %lld", (long long)grad_accum));
        note(schedule != "1f1b", "--pp-schedule " + schedule);
        note(chunks != 1, strfmt("--pp-chunks %lld", (long long)chunks));
        CHECK(given.empty(), "%s: these describe one layout, and without its degrees (--dp, --tp, --pp, --cp, --ep) the "
              "planner ranks every layout, trying every value of them; give the degrees, or drop these flags",
              given.c_str());
    }
    Job job;
    job.model = load_model(model);
    job.model.validate();
    job.seq = seq;
    job.global_batch = global_batch;
    job.precision = parse_precision(precision);
    job.kernel = parse_attention_kernel(kernel);
    CHECK(seq <= job.model.max_seq || job.model.max_seq == 0, "--seq %lld > the model's max_seq %lld", (long long)seq,
          (long long)job.model.max_seq);
    CHECK(job.model.sliding_window == 0 || seq <= job.model.sliding_window, "--seq %lld > the model's sliding_window "
          "%lld (%s): past it the model attends to the last %lld tokens only, which no chapter computes", (long long)seq,
          (long long)job.model.sliding_window, model.c_str(), (long long)job.model.sliding_window);
    auto count = [](double n) { return n >= 1e9 ? strfmt("%.2fB", n / 1e9) : strfmt("%.2fM", n / 1e6); };
    std::printf("model %s: %s parameters (%s active), %lld layers, h %lld; %lld GPUs (%s: %d per node, %.0f GB, "
                "%.3g TFLOP/s x %.2f, NVLink %.0f GB/s, IB %.0f GB/s); seq %lld, global batch %lld sequences (%.3gM tokens), %s\n",
                job.model.name.c_str(), count((double)job.model.n_params()).c_str(),
                count((double)job.model.n_active_params()).c_str(),
                (long long)job.model.n_layers, (long long)job.model.hidden, (long long)gpus, m.name.c_str(),
                m.gpus_per_node, m.gpu_memory / 1e9, m.peak_flops / 1e12, m.efficiency, m.intra_bw / 1e9,
                m.inter_bw / 1e9, (long long)seq, (long long)global_batch, seq * global_batch / 1e6, precision_name(job.precision));

    if (one) {  // one layout
        Layout L;
        L.grid = GridShape{(int)dp, (int)std::max<int64_t>(pp, 1), (int)std::max<int64_t>(cp, 1),
                           (int)std::max<int64_t>(tp, 1), (int)std::max<int64_t>(ep, 1)};
        L.zero = (int)zero, L.sp = sp, L.recompute = parse_recompute(recompute);
        L.schedule = parse_pipe_schedule(schedule), L.chunks = (int)chunks, L.micro_batch = micro_batch;
        L.grad_accum = grad_accum ? grad_accum : std::max<int64_t>(1, global_batch / (dp * micro_batch));
        check_layout(job, m, L, (int)gpus, cross_tp);
        const Candidate c = evaluate(job, m, L, (int)gpus);
        std::printf("layout %s\nper-rank prediction (bytes; rank at dp/cp/tp coordinate 0 of each stage):\n", L.str().c_str());
        print_rank(job, m, L);
        std::printf("fits: %s (%.2f GiB of %.2f GiB); batch: %s\n", c.fits ? "yes" : "NO",
                    c.worst.total() / double(1 << 30), m.gpu_memory / double(1 << 30), c.reaches_batch ? "reached" : c.notes[0].c_str());
        const StepTime& t = c.time;
        std::printf("step %.3f s = compute %.3f + bubble %.3f + exposed dp %.3f tp %.3f pp %.3f cp %.3f ep %.3f; "
                    "%.0f tokens/s, MFU %.0f%%\n", t.step, t.compute, t.bubble, t.exposed.dp, t.exposed.tp, t.exposed.pp,
                    t.exposed.cp, t.exposed.ep, t.tokens_per_s, t.mfu * 100);
        std::printf("overlap t_comm/t_window: dp %.2f pp %.2f cp %.2f; tp (appendix C's (t-1)/2h · peak/bw) %.2f\n",
                    t.ratio.dp, t.ratio.pp, t.ratio.cp, t.ratio.tp);
        // printed, and then an exit status a script can read: a layout that does not fit is no plan
        CHECK(c.fits, "layout %s does not fit: its fullest GPU needs %.2f GiB, more than the %.2f GiB of --gpu-memory; "
              "shard more (--zero 3, --tp, --pp), recompute, or give more GPUs", L.str().c_str(),
              c.worst.total() / double(1 << 30), m.gpu_memory / double(1 << 30));
        return 0;
    }
    SearchSpace space;
    space.allow_cross_node_tp = cross_tp;
    space.cp_min_seq = cp_min_seq;
    const std::vector<Candidate> ranked = enumerate_and_rank(job, m, (int)gpus, space);
    std::printf("%zu legal layouts; the first %lld:\n", ranked.size(), (long long)std::min<int64_t>(top, ranked.size()));
    std::printf("%s\n", format_table(ranked, (size_t)top).c_str());
    std::printf("%s", explain_choice(ranked, m).c_str());
    // the table and why are printed; the exit status says whether there is a plan at all
    CHECK(!ranked.empty(), "no legal layout of model %s on --gpus %lld: every combination of degrees breaks a rule "
          "(check_layout); try another --gpus, --seq or --global-batch", job.model.name.c_str(), (long long)gpus);
    CHECK(ranked.front().fits, "nothing fits: the closest layout (%s) needs %.2f GiB per GPU, more than the %.2f GiB "
          "of --gpu-memory; add GPUs, recompute, or shard more (ZeRO-3, tp, pp)", ranked.front().layout.str().c_str(),
          ranked.front().worst.total() / double(1 << 30), m.gpu_memory / double(1 << 30));
    return 0;
}

}  // namespace

int main(int argc, char** argv) { return run_main(argc, argv, run); }
