// config.hpp — command-line flags -> TrainConfig, with every invalid value rejected before any work.
//
// Every chapter program takes the same conventional flags (`--steps 200` or `--steps=200`, `--help`);
// later chapters add their own (--dp, --tp, ...) through the same Flags parser. An error names the flag,
// the value and the rule: `--micro-batch 0 must be >= 1`.
//   build/bin/01_single_gpu --help
#pragma once
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace penta {

// The one reader of integers on the command line, for flags and for the numbers inside a flag's value
// ("RANK:STEP", "3,3,2"): the whole text a decimal integer in [lo, hi], else an error naming `what` (the flag),
// the text and the range. Nothing wraps: "4294967298" is refused, not read as the 2 an int cast would make it.
int64_t parse_integer(const std::string& what, const std::string& v, int64_t lo, int64_t hi);
// "RANK:STEP", both integers, RANK >= 0 and STEP >= 1 -> (rank, step); throws naming `where`, the text and the rule
std::pair<int64_t, int64_t> parse_rank_step(const std::string& v, const std::string& where);
// An integer flag's range unless it asks for another: an int's, as the chapters hand degrees, counts and
// steps to int parameters (GridShape, the schedules), so no value narrows on the way.
constexpr int64_t kIntFlagMin = std::numeric_limits<int32_t>::min(), kIntFlagMax = std::numeric_limits<int32_t>::max();

// A tiny flag parser: register flags bound to variables, then parse(argc, argv).
// --help lists the flags under headings: a flag belongs to the group open when it was added. chapter() opens
// the program's own group, printed first, and pulls in the shared flags it names (--tp in chapter 04):
//   cfg.register_flags(flags);                                  // Training:, Checkpoints:, ... (config.cpp)
//   flags.chapter("Tensor parallelism (chapter 04)", {"tp"});   // printed first: --tp, then what follows
//   flags.add("zero", &zero, "...");
// After it come the groups a program opened itself (09's chapters 06-08), then the shared ones in
// kSharedFlagGroups' order. The groups change only --help; parsing does not look at them.
class Flags {
   public:
    explicit Flags(std::string program, std::string summary) : program_(std::move(program)), summary_(std::move(summary)) {}
    // the flags added from now on print under `heading` (a group opened again keeps its place)
    void group(const std::string& heading);
    // group(heading), printed first; the flags named in `claimed`, registered already, move into it
    void chapter(const std::string& heading, const std::vector<std::string>& claimed = {});
    void add(const std::string& name, std::string* target, const std::string& help);
    void add(const std::string& name, int64_t* target, const std::string& help, int64_t lo = kIntFlagMin,
             int64_t hi = kIntFlagMax);
    void add(const std::string& name, float* target, const std::string& help);
    void add(const std::string& name, bool* target, const std::string& help);  // --name, --name=0|1
    // false when --help was given (usage printed on rank 0); throws penta::Error on a bad flag or value
    bool parse(int argc, char** argv);
    std::string usage() const;

   private:
    struct Flag {
        std::string name, help, default_text;
        std::function<void(const std::string&)> set;
        bool is_bool = false;
        std::string group;  // its --help heading
    };
    void push(Flag f);  // adds f to the open group
    std::string program_, summary_;
    std::vector<Flag> flags_;
    std::vector<std::string> groups_;        // headings in the order opened
    std::string open_ = "Flags", chapter_;   // the group add() fills; the one printed first
};

// The headings of the flags every chapter shares (TrainConfig::register_flags, register_parallel_flags), in the
// order --help prints them after the program's own groups.
extern const std::vector<std::string> kSharedFlagGroups;

struct TrainConfig {
    std::string model = "small";   // preset name, a Hugging Face config.json, or a folder with config + weights
    std::string device = "auto";   // auto | cpu | cuda
    std::string data = "addition"; // see data.hpp
    std::string recompute = "none";  // none | selective | full
    std::string attention = "flash"; // naive | flash
    bool tf32 = false;             // f32 matmuls on TF32 tensor cores (GPU; the precision policy's tf32)
    std::string precision = "fp32";  // fp32|bf16|fp16|fp8: the precision policy (Precision::named, chapter 11)
    // the policies this program trains under: fp16 needs chapter 11's loss scaler, fp8 its GEMM, so only
    // chapter 11 adds them
    std::vector<std::string> precisions{"fp32", "bf16"};
    int64_t seq = 32;              // tokens per sequence (T)
    int64_t micro_batch = 16;      // sequences per micro-batch per rank (b)
    int64_t grad_accum = 1;        // micro-batches per optimizer step
    // 3000: the step at which a run first answers 90 % of held-out sums has a slow tail (issue 32): at 1500
    // steps a few runs in a hundred left the plateau too late to get there; at 3000 every screened run did
    // by step 1500, half the run before the end (scripts/learning_check.py)
    int64_t steps = 3000;
    int64_t warmup = 50;
    // min_lr a tenth of the peak: at half the peak (1e-3) learned runs dipped late, one evaluation in the last
    // tenth of a run as low as 65 % (issue 32); at 2e-4 the last ten stayed above 95 % in the screen
    float lr = 2e-3f, min_lr = 2e-4f, weight_decay = 0.1f, beta1 = 0.9f, beta2 = 0.95f, grad_clip = 1.0f;
    int64_t seed = 1337;
    int64_t log_every = 50;
    int64_t eval_every = 100;      // task accuracy on held-out samples (0: never)
    std::string log_jsonl;         // one JSON object per step
    std::string dump_reference;    // write weights/batch/grads for tools/torch_reference.py, then exit
    int64_t inject_nan = 0;        // STEP: a NaN written into one gradient after that step's backward (0: off)
    std::string val_data;          // held-out data for the val loss (the --data forms); "": held-out --data samples
    std::string export_hf;         // after training, write a Hugging Face folder here (hf_checkpoint.hpp)
    std::string generate;          // after training, continue this prompt (generate.hpp)
    int64_t max_new = 64;          // tokens --generate writes at most
    float temperature = 0;         // 0: greedy
    int64_t top_k = 0;             // 0: sample over the whole vocabulary
    std::string tokenizer;         // tokenizer.json for --generate; "": --model DIR's, else the byte tokenizer

    // parallel layout (chapters 02+; register_parallel_flags): degrees of each axis, see grid.hpp
    int64_t dp = 1, tp = 1, pp = 1, cp = 1, ep = 1;
    bool sp = false;               // sequence parallelism on top of tp (ch05)
    std::string comm = "auto";     // auto | mpi | nccl (comm.hpp)
    std::string inject_failure;    // "RANK:STEP": that rank throws at the start of that step (tests the abort)
    std::string inject_hang;       // "RANK:STEP[:SECONDS]": that rank stops (or pauses) in that step (the watchdog)
    float comm_timeout = 300;      // seconds a blocking wait of Comm may take (watchdog.hpp); 0: no deadline
    // checkpoints (checkpoint_save.hpp, checkpoint_load.hpp; docs/CHECKPOINTS.md)
    std::string save;              // --save DIR: checkpoints go to DIR/step_NNNNNN, DIR/latest names the last complete
    std::string save_every = "0";  // N steps, or auto (√(2δM)); 0: only after the last step
    float mtbf_hours = 24;         // the job's mean time between failures, for --save-every auto
    int64_t keep = 0;              // keep the last K checkpoints (0: all)
    bool save_async = false;       // write the shards on a background thread (training stalls for the host copy only)
    std::string resume;            // --resume DIR|latest: continue from that checkpoint, in this run's layout

    // registers the flags above on `flags`, so a chapter can add its own before parsing
    void register_flags(Flags& flags);
    // --dp --tp --pp --cp --ep --sp --comm --comm-timeout --inject-failure --inject-hang (chapter 01 runs on
    // one rank and has none)
    void register_parallel_flags(Flags& flags);
    // Checks every value before any work: ranges and finiteness, enums, the products of sizes (no int64
    // overflow; tokens per micro-batch within 32-bit indexing; training sample ids below evaluation's), the
    // parallel degrees against the job's ranks, the injection flags. Throws naming the flag, value and rule.
    void validate() const;
};

// --inject-failure RANK:STEP (or the environment variable PENTA_INJECT_FAILURE, same format): throws a
// penta::Error on world rank RANK when step STEP (1-based) begins, so tests can check that one failing
// rank brings the whole job down with a message naming it. No-op when neither is set.
void inject_failure_if_due(const TrainConfig& cfg, int64_t step);
// --inject-hang RANK:STEP: world rank RANK stops in step STEP (sleeps until the job is killed), as a rank
// behind a dead NIC or a stalled GPU would; the others' watchdog must abort the job (watchdog.hpp).
// RANK:STEP:SECONDS pauses that long instead: a straggler, which the step log's straggler report names.
void inject_hang_if_due(const TrainConfig& cfg, int64_t step);

}  // namespace penta
