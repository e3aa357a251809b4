// config.cpp — see config.hpp.
#include "config.hpp"

#include "checkpoint_format.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "core.hpp"
#include "data.hpp"
#include "precision.hpp"
#include "runtime.hpp"

namespace penta {

int64_t parse_integer(const std::string& what, const std::string& v, int64_t lo, int64_t hi) {
    char* end = nullptr;
    errno = 0;
    const long long x = std::strtoll(v.c_str(), &end, 10);
    if (v.empty() || *end) FAIL("%s %s must be an integer", what.c_str(), v.c_str());
    // strtoll saturates at the int64 limits with ERANGE: outside either bound too, told as that bound
    if (x > hi || (errno == ERANGE && x > 0))
        FAIL("%s %s is out of range: at most %lld", what.c_str(), v.c_str(), (long long)hi);
    if (x < lo || (errno == ERANGE && x < 0))
        FAIL("%s %s is out of range: at least %lld", what.c_str(), v.c_str(), (long long)lo);
    return x;
}

namespace {
// inf and nan parse (strtof reads them); validate() says which flags must be finite
float parse_float(const std::string& flag, const std::string& v) {
    char* end = nullptr;
    errno = 0;
    float x = std::strtof(v.c_str(), &end);
    if (v.empty() || *end) FAIL("--%s %s must be a number", flag.c_str(), v.c_str());
    if (errno == ERANGE) FAIL("--%s %s is out of the range of a float (about 1e-38 to 3e38)", flag.c_str(), v.c_str());
    return x;
}
}  // namespace

const std::vector<std::string> kSharedFlagGroups = {"Training", "Parallel layout", "Checkpoints",
                                                     "Hugging Face in/out and generation", "PyTorch reference",
                                                     "Faults and timeouts", "GPU"};

void Flags::group(const std::string& heading) {
    open_ = heading;
    if (std::find(groups_.begin(), groups_.end(), heading) == groups_.end()) groups_.push_back(heading);
}

void Flags::chapter(const std::string& heading, const std::vector<std::string>& claimed) {
    group(heading);
    chapter_ = heading;
    for (const std::string& name : claimed) {
        auto f = std::find_if(flags_.begin(), flags_.end(), [&](const Flag& x) { return x.name == name; });
        CHECK(f != flags_.end(), "%s: chapter group '%s' claims --%s, which is not registered", program_.c_str(),
              heading.c_str(), name.c_str());
        f->group = heading;
    }
}

void Flags::push(Flag f) {
    group(open_);
    f.group = open_;
    flags_.push_back(std::move(f));
}

void Flags::add(const std::string& name, std::string* t, const std::string& help) {
    push({name, help, *t, [t](const std::string& v) { *t = v; }});
}
void Flags::add(const std::string& name, int64_t* t, const std::string& help, int64_t lo, int64_t hi) {
    push({name, help, std::to_string(*t),
          [t, name, lo, hi](const std::string& v) { *t = parse_integer("--" + name, v, lo, hi); }});
}
void Flags::add(const std::string& name, float* t, const std::string& help) {
    push({name, help, strfmt("%g", *t), [t, name](const std::string& v) { *t = parse_float(name, v); }});
}
void Flags::add(const std::string& name, bool* t, const std::string& help) {
    Flag f{name, help, *t ? "1" : "0", [t, name](const std::string& v) {
               if (v == "1" || v == "true") *t = true;
               else if (v == "0" || v == "false") *t = false;
               else FAIL("--%s=%s must be 0 or 1", name.c_str(), v.c_str());
           }};
    f.is_bool = true;
    push(std::move(f));
}

std::string Flags::usage() const {
    // the chapter's group, the program's other groups as opened, the shared ones in their fixed order
    auto shared = [](const std::string& g) {
        return std::find(kSharedFlagGroups.begin(), kSharedFlagGroups.end(), g) != kSharedFlagGroups.end();
    };
    std::vector<std::string> order;
    if (!chapter_.empty()) order.push_back(chapter_);
    for (const std::string& g : groups_)
        if (g != chapter_ && !shared(g)) order.push_back(g);
    for (const std::string& g : kSharedFlagGroups)
        if (g != chapter_) order.push_back(g);
    std::string s = "usage: " + program_ + " [flags]\n" + summary_ + "\n";
    for (const std::string& g : order) {
        std::string lines;
        for (const Flag& f : flags_)
            if (f.group == g)
                lines += strfmt("  --%-16s %s (default: %s)\n", (f.name + (f.is_bool ? "" : " V")).c_str(),
                                f.help.c_str(), f.default_text.empty() ? "none" : f.default_text.c_str());
        if (!lines.empty()) s += "\n" + g + ":\n" + lines;
    }
    return s;
}

bool Flags::parse(int argc, char** argv) {
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        if (a == "--help" || a == "-h") {
            if (world_rank() == 0) std::printf("%s", usage().c_str());
            return false;
        }
        if (a.rfind("--", 0) != 0) FAIL("unexpected argument '%s' (flags look like --name value; see --help)", a.c_str());
        std::string name = a.substr(2), value;
        size_t eq = name.find('=');
        bool has_value = eq != std::string::npos;
        if (has_value) {
            value = name.substr(eq + 1);
            name = name.substr(0, eq);
        }
        const Flag* flag = nullptr;
        for (const Flag& f : flags_)
            if (f.name == name) flag = &f;
        if (!flag) FAIL("unknown flag --%s (see --help)", name.c_str());
        if (!has_value) {
            // a bool flag alone means on; `--name 0` / `--name false` also work, like `--name=0`
            auto is_bool_word = [](const std::string& w) { return w == "0" || w == "1" || w == "true" || w == "false"; };
            if (flag->is_bool && i + 1 < argc && is_bool_word(argv[i + 1])) value = argv[++i];
            else if (flag->is_bool) value = "1";
            else if (i + 1 < argc) value = argv[++i];
            else FAIL("--%s needs a value", name.c_str());
        }
        flag->set(value);
    }
    return true;
}

void TrainConfig::register_flags(Flags& f) {
    f.group("Training");
    f.add("model", &model, "preset (tiny, small, smollm-135m, smollm-360m, llama3.2-1b, llama3-8b, llama3-70b), a HF "
          "config.json (weights from --seed), or a HF folder: config.json + model.safetensors (its weights)");
    f.add("data", &data, "addition | llmc:GLOB | raw:GLOB | text:FILE");
    f.add("val-data", &val_data, "held-out data for the val loss, in the forms of --data (default: held-out samples "
          "of --data)");
    f.add("seq", &seq, "tokens per sequence");
    f.add("micro-batch", &micro_batch, "sequences per micro-batch");
    f.add("grad-accum", &grad_accum, "micro-batches accumulated per optimizer step");
    f.add("recompute", &recompute, "activation recomputation: none | selective | full | offload (to host memory)");
    f.add("attention", &attention, "attention kernel: naive (saves T x T probabilities) | flash (online softmax)");
    f.add("precision", &precision, "fp32|bf16: the weights' and GEMM inputs' format (chapter 11, which adds fp16 "
          "and fp8; bf16 GEMMs are emulated on the CPU, cuBLASLt on a GPU)");
    f.add("steps", &steps, "optimizer steps");
    f.add("warmup", &warmup, "linear LR warmup steps (at most --steps - 1)");
    f.add("lr", &lr, "peak learning rate");
    f.add("min-lr", &min_lr, "learning rate at the end of the cosine decay");
    f.add("weight-decay", &weight_decay, "AdamW weight decay (not applied to norm weights)");
    f.add("beta1", &beta1, "AdamW beta1");
    f.add("beta2", &beta2, "AdamW beta2");
    f.add("grad-clip", &grad_clip, "clip the global gradient norm to this (0: off)");
    f.add("seed", &seed, "seed of initialisation and data", std::numeric_limits<int64_t>::min(),
          std::numeric_limits<int64_t>::max());  // only hashed: any 64-bit value
    f.add("log-every", &log_every, "print a step line every N steps");
    f.add("eval-every", &eval_every, "measure task accuracy on held-out samples every N steps (0: never)");
    f.add("log-jsonl", &log_jsonl, "also write one JSON object per step to this file");
    f.group("Checkpoints");
    f.add("save", &save, "save checkpoints to DIR (DIR/step_NNNNNN, DIR/latest: the last complete one)");
    f.add("save-every", &save_every, "N | auto — save every N steps (0: after the last step only); auto: every √(2δM) "
          "from the measured save time δ and --mtbf-hours");
    f.add("mtbf-hours", &mtbf_hours, "the job's mean time between failures, for --save-every auto");
    f.add("keep", &keep, "keep the last K checkpoints (0: all)");
    f.add("save-async", &save_async, "write checkpoints on a background thread (training stalls for the host copy only)");
    f.add("resume", &resume, "DIR | latest — continue from a checkpoint (a step folder, a --save folder, or --save's "
          "latest), resharded to this run's layout when it differs");
    f.group("Hugging Face in/out and generation");
    f.add("export-hf", &export_hf, "after training, write DIR/model.safetensors + config.json (transformers loads it)");
    f.add("generate", &generate, "after training, continue this prompt with a KV cache and print the text");
    f.add("max-new", &max_new, "tokens --generate writes at most");
    f.add("temperature", &temperature, "--generate's sampling temperature (0: greedy)");
    f.add("top-k", &top_k, "--generate samples among the k most likely tokens (0: all)");
    f.add("tokenizer", &tokenizer, "tokenizer.json for --generate (default: --model DIR's tokenizer.json, else bytes)");
    f.group("Faults and timeouts");
    f.add("inject-nan", &inject_nan, "STEP — after that step's backward, rank 0 writes a NaN into one gradient "
          "(tests the non-finite check; 0: off)");
    f.group("GPU");
    f.add("device", &device, "auto | cpu | cuda");
    f.add("tf32", &tf32, "f32 matmuls on TF32 tensor cores (GPU only; ~1e-3 relative error instead of ~1e-6)");
}

void TrainConfig::register_parallel_flags(Flags& f) {
    f.group("Parallel layout");
    f.add("dp", &dp, "data-parallel degree");
    f.add("tp", &tp, "tensor-parallel degree (must divide the kv heads)");
    f.add("pp", &pp, "pipeline-parallel degree");
    f.add("cp", &cp, "context-parallel degree");
    f.add("ep", &ep, "expert-parallel degree (carved from dp x cp)");
    f.add("sp", &sp, "sequence parallelism on top of --tp");
    f.group("GPU");
    f.add("comm", &comm, "communication backend: auto (nccl on GPUs when built in) | mpi | nccl");
    f.group("Faults and timeouts");
    f.add("comm-timeout", &comm_timeout, "seconds a blocking wait for other ranks may take before the job is "
          "aborted with a report of who waits for whom (0: no deadline)");
    f.add("inject-failure", &inject_failure, "RANK:STEP — that rank fails when that step begins (tests the job abort)");
    f.add("inject-hang", &inject_hang, "RANK:STEP[:SECONDS] — that rank stops in that step (tests --comm-timeout), or "
          "pauses SECONDS (a straggler)");
}

std::pair<int64_t, int64_t> parse_rank_step(const std::string& v, const std::string& where) {
    const size_t colon = v.find(':');
    const std::string rank = v.substr(0, colon), step = colon == std::string::npos ? "" : v.substr(colon + 1);
    auto digits = [](const std::string& t) { return !t.empty() && t.find_first_not_of("0123456789") == std::string::npos; };
    CHECK(digits(rank) && digits(step) && step.find_first_not_of('0') != std::string::npos,
          "%s '%s' must be RANK:STEP with RANK >= 0 and STEP >= 1 (e.g. 1:3)", where.c_str(), v.c_str());
    const std::string what = where + " '" + v + "':";
    return {parse_integer(what + " RANK", rank, 0, kIntFlagMax), parse_integer(what + " STEP", step, 1, kIntFlagMax)};
}

namespace {
// parse_rank_step, and RANK a rank of this job
std::pair<int64_t, int64_t> parse_job_rank_step(const std::string& v, const char* where) {
    const auto [rank, step] = parse_rank_step(v, where);
    CHECK(rank < world_size(), "%s '%s': rank %lld is not a rank of this job, which has %d (0 ... %d)", where,
          v.c_str(), (long long)rank, world_size(), world_size() - 1);
    return {rank, step};
}

// a·b, which counts `what`; an error naming both factors when it overflows int64 or exceeds `limit`
// (`rule` says why)
int64_t checked_product(int64_t a, const char* a_name, int64_t b, const char* b_name, const char* what,
                        int64_t limit = std::numeric_limits<int64_t>::max(), const char* rule = "") {
    int64_t p = 0;
    if (__builtin_mul_overflow(a, b, &p))
        FAIL("%s %lld × %s %lld (%s) overflows a 64-bit integer", a_name, (long long)a, b_name, (long long)b, what);
    if (p > limit)
        FAIL("%s %lld × %s %lld (%s) = %lld is too large: %s", a_name, (long long)a, b_name, (long long)b, what,
             (long long)p, rule);
    return p;
}
}  // namespace

void inject_failure_if_due(const TrainConfig& cfg, int64_t step) {
    std::string v = cfg.inject_failure;
    const char* where = "--inject-failure";
    if (v.empty()) {
        const char* env = std::getenv("PENTA_INJECT_FAILURE");
        if (!env || !*env) return;
        v = env;
        where = "PENTA_INJECT_FAILURE";
    }
    auto [rank, at] = parse_job_rank_step(v, where);
    if (rank == world_rank() && at == step) FAIL("injected failure at step %lld (%s %s)", (long long)step, where, v.c_str());
}

namespace {
// --inject-hang RANK:STEP[:SECONDS] -> (rank, step, seconds; -1: forever)
struct Hang {
    int64_t rank, step;
    double seconds;
};
Hang parse_hang(const std::string& v) {
    const size_t colon = v.find(':'), second = colon == std::string::npos ? colon : v.find(':', colon + 1);
    double seconds = -1;
    if (second != std::string::npos) {
        char* end = nullptr;
        const std::string t = v.substr(second + 1);
        seconds = std::strtod(t.c_str(), &end);
        CHECK(!t.empty() && !*end && std::isfinite(seconds) && seconds > 0,
              "--inject-hang '%s': SECONDS '%s' must be a finite number > 0 (RANK:STEP[:SECONDS], e.g. 1:3:2.5)",
              v.c_str(), t.c_str());
    }
    auto [rank, step] = parse_job_rank_step(v.substr(0, second), "--inject-hang");
    return {rank, step, seconds};
}
}  // namespace

void inject_hang_if_due(const TrainConfig& cfg, int64_t step) {
    if (cfg.inject_hang.empty()) return;
    const Hang h = parse_hang(cfg.inject_hang);
    if (h.rank != world_rank() || h.step != step) return;
    if (h.seconds > 0) {  // a straggler: late, then on its way
        std::fprintf(stderr, "[rank %d] --inject-hang %s: pausing %g s in step %lld\n", world_rank(),
                     cfg.inject_hang.c_str(), h.seconds, (long long)step);
        usleep((useconds_t)std::min(h.seconds * 1e6, 4e9));
        return;
    }
    std::fprintf(stderr, "[rank %d] --inject-hang %s: stopping in step %lld until the job is killed\n",
                 world_rank(), cfg.inject_hang.c_str(), (long long)step);
    std::fflush(stderr);
    for (;;) sleep(1);  // in no MPI call: to the others, this rank has simply gone quiet
}

// Sizes: the products the run allocates by (tokens of a micro-batch, rows of a step), checked before any
// allocation, so a huge value is an error naming the flags instead of a wrapped count (a segfault) or a bare
// std::bad_alloc. The memory they need is checked against the machine later, once the model is known
// (resolve_model in train_loop.hpp).
static void validate_sizes(const TrainConfig& c) {
    checked_product(c.micro_batch, "--micro-batch", c.seq, "--seq", "the tokens of one micro-batch",
                    std::numeric_limits<int32_t>::max(),
                    "at most 2147483647, as cuBLAS and the kernels index a micro-batch's tokens with 32-bit ints");
    const int64_t rows = checked_product(c.micro_batch, "--micro-batch", c.grad_accum, "--grad-accum",
                                         "the sequences of one rank's step");
    checked_product(rows, "(--micro-batch × --grad-accum)", c.seq, "--seq", "the tokens of one rank's step");
    const int64_t global = checked_product(rows, "(--micro-batch × --grad-accum)", c.dp, "--dp",
                                           "the sequences of the global batch");
    // sample g of step s is id s·G + g (data.hpp); evaluation reads ids from 2^40 on, which training must not
    checked_product(c.steps, "--steps", global, "(--micro-batch × --grad-accum × --dp)",
                    "the sample ids the run trains on", kHeldOutFirstId,
                    "at most 2^40, where the held-out evaluation samples start");
}

void TrainConfig::validate() const {
    CHECK(device == "auto" || device == "cpu" || device == "cuda", "--device %s must be auto, cpu or cuda", device.c_str());
    CHECK(recompute == "none" || recompute == "selective" || recompute == "full" || recompute == "offload",
          "--recompute %s must be none, selective, full or offload", recompute.c_str());
    CHECK(attention == "naive" || attention == "flash", "--attention %s must be naive or flash", attention.c_str());
    Precision::named(precision);  // names the flag when it is none of the four
    CHECK(std::find(precisions.begin(), precisions.end(), precision) != precisions.end(),
          "--precision %s: fp16's loss scaler and fp8's GEMM are chapter 11's; this program trains in fp32 or bf16 "
          "(build/bin/11_mixed_precision trains all four: --schemes fp32,bf16,fp16,fp8)", precision.c_str());
    CHECK(seq >= 2, "--seq %ld must be >= 2", (long)seq);
    CHECK(micro_batch >= 1, "--micro-batch %ld must be >= 1", (long)micro_batch);
    CHECK(grad_accum >= 1, "--grad-accum %ld must be >= 1", (long)grad_accum);
    CHECK(steps >= 1 || (steps == 0 && (!generate.empty() || !export_hf.empty())),
          "--steps %ld must be >= 1 (or 0 with --generate or --export-hf: no training)", (long)steps);
    CHECK(warmup >= 0, "--warmup %ld must be >= 0", (long)warmup);  // a shorter run warms up over fewer (train_loop)
    // NaN fails every comparison; inf passes "> 0", so finiteness is asked for by name
    CHECK(std::isfinite(lr) && lr > 0, "--lr %g must be a finite number > 0", lr);
    CHECK(std::isfinite(min_lr) && min_lr >= 0 && min_lr <= lr, "--min-lr %g must be in [0, --lr %g]", min_lr, lr);
    CHECK(std::isfinite(weight_decay) && weight_decay >= 0, "--weight-decay %g must be a finite number >= 0",
          weight_decay);
    // decoupled decay multiplies every decayed weight by 1 - lr·wd per step: at >= 1 it zeroes or flips them
    CHECK((double)lr * weight_decay < 1, "--lr %g × --weight-decay %g = %g must be < 1 (AdamW multiplies the weights "
          "by 1 - lr × weight decay every step)", lr, weight_decay, (double)lr * weight_decay);
    CHECK(beta1 >= 0 && beta1 < 1, "--beta1 %g must be in [0, 1)", beta1);
    CHECK(beta2 >= 0 && beta2 < 1, "--beta2 %g must be in [0, 1)", beta2);
    CHECK(std::isfinite(grad_clip) && grad_clip >= 0, "--grad-clip %g must be a finite number >= 0 (0: no clipping)",
          grad_clip);
    CHECK(log_every >= 1, "--log-every %ld must be >= 1", (long)log_every);
    CHECK(eval_every >= 0, "--eval-every %ld must be >= 0", (long)eval_every);
    // each degree is a group of ranks inside the job (and an int in the grid): at most the job's ranks
    for (auto [name, v] : {std::pair<const char*, int64_t>{"dp", dp}, {"tp", tp}, {"pp", pp}, {"cp", cp}, {"ep", ep}})
        CHECK(v >= 1 && v <= world_size(), "--%s %ld must be between 1 and the job's %d rank(s) (mpirun -np)", name,
              (long)v, world_size());
    CHECK(!sp || tp > 1, "--sp needs --tp > 1: sequence parallelism splits the regions tensor parallelism replicates");
    CHECK(comm == "auto" || comm == "mpi" || comm == "nccl", "--comm %s must be auto, mpi or nccl", comm.c_str());
    CHECK(std::isfinite(comm_timeout) && comm_timeout >= 0,
          "--comm-timeout %g must be a finite number of seconds >= 0 (0: no deadline)", comm_timeout);
    // a fault at a step the run never reaches would test nothing, silently (as --inject-nan says)
    if (!inject_failure.empty()) {
        const int64_t at = parse_job_rank_step(inject_failure, "--inject-failure").second;
        CHECK(at <= steps, "--inject-failure %s: step %lld is not a step of the run, 1 ... --steps %ld",
              inject_failure.c_str(), (long long)at, (long)steps);
    }
    if (!inject_hang.empty()) {
        const int64_t at = parse_hang(inject_hang).step;
        CHECK(at <= steps, "--inject-hang %s: step %lld is not a step of the run, 1 ... --steps %ld",
              inject_hang.c_str(), (long long)at, (long)steps);
    }
    CHECK(max_new >= 1, "--max-new %ld must be >= 1", (long)max_new);
    CHECK(std::isfinite(temperature) && temperature >= 0, "--temperature %g must be a finite number >= 0 (0: greedy)",
          temperature);
    CHECK(top_k >= 0, "--top-k %ld must be >= 0 (0: all)", (long)top_k);
    CHECK(generate.empty() || (pp == 1 && !sp), "--generate runs the whole model on each rank, one token at a time: "
          "not with %s (export with --export-hf and generate from chapter 01)",
          pp > 1 ? strfmt("--pp %ld", (long)pp).c_str() : "--sp");
    CHECK(inject_nan >= 0 && inject_nan <= steps, "--inject-nan %ld must be a step of the run, 1 ... --steps %ld "
          "(0: off)", (long)inject_nan, (long)steps);
    if (!save.empty()) parse_save_every(save_every);
    CHECK(std::isfinite(mtbf_hours) && mtbf_hours > 0, "--mtbf-hours %g must be a finite number of hours > 0", mtbf_hours);
    CHECK(keep >= 0, "--keep %ld must be >= 0 (0: keep every checkpoint)", (long)keep);
    CHECK(resume != "latest" || !save.empty(), "--resume latest means --save DIR's latest checkpoint: give --save DIR%s",
          "");
    validate_sizes(*this);
}

}  // namespace penta
