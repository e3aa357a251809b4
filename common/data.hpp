// data.hpp — where the training tokens come from, in an order that does not depend on the layout.
//
// Playbook: "Data parallelism" (every rank reads a different slice of the same global batch) and the
// determinism rule of ARCHITECTURE.md §6: sample g of step s is global sample id s*G + g (G = global batch in
// sequences), and a sample is a pure function of (dataset, seed, sample id). So dp=1 or dp=8, one
// micro-batch or eight, every layout trains on exactly the same tokens.
//
// Datasets (make_dataset spec, i.e. the --data flag):
//   addition          built-in synthetic task "24+71=950;" (42+17=59, every number least significant digit first),
//                     byte tokenizer; only the answer and its ';' are targets
//   llmc:GLOB[,GLOB]  llm.c token shards (256 x int32 header, magic 20240520, version 1 then uint16 tokens,
//                     or version 2 then uint32 tokens: llm.c's Llama 3 shards, tools/prepare_data.py's)
//   raw:GLOB[,GLOB]   headerless uint16 token files
//   text:FILE         any file, one token per byte (vocabulary 256)
// Tested by tests/01_single_gpu/test_data.cpp: `build/bin/tests_01 -ts='ch01 np1' -tc='*data*,*addition*,*shard*'`.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace penta {

constexpr int32_t kIgnoreTarget = -1;  // a target position that contributes no loss
constexpr int32_t kByteVocab = 256;

struct Dataset {
    virtual ~Dataset() = default;
    virtual int32_t vocab_size() const = 0;
    // tokens[0..T) and targets[0..T) of one sample; targets[t] is the token after tokens[t], or -1
    virtual void get(int64_t sample_id, int64_t T, int32_t* tokens, int32_t* targets) const = 0;
    virtual std::string describe() const = 0;  // one line for the run's header
    // a human-readable rendering of T tokens (text for byte vocabularies, ids otherwise)
    virtual std::string render(const int32_t* tokens, int64_t T) const;
};

// sample g (0 <= g < G) of step s
inline int64_t global_sample_id(int64_t step, int64_t g, int64_t G) { return step * G + g; }

// `count` consecutive samples starting at first_id, row-major (count, T): what one rank's micro-batch
// reads. Built from Dataset::get alone, so any grouping of ids gives the same rows.
struct Batch {
    int64_t rows = 0, T = 0;
    std::vector<int32_t> tokens, targets;  // (rows, T)
};
Batch load_batch(const Dataset& ds, int64_t first_id, int64_t count, int64_t T);
// targets that count in the loss (not kIgnoreTarget): the loss's denominator
int64_t count_targets(const Batch& b);

// spec: see the file comment. vocab: the model's vocabulary (<= 0: 65536 for token files; byte
// datasets need >= 256). Errors name the --data value and the accepted forms.
std::unique_ptr<Dataset> make_dataset(const std::string& spec, uint64_t seed, int32_t vocab);

// ---- the built-in addition task ------------------------------------------------------------------
// Each sample packs problems "aa+bb=SSS;": a, b in [0, 100) as 2 digits, S the 3 digits of a+b, every
// number written least significant digit first (42 + 17 = 59 is "24+71=950;"). Written that way, answer
// digit i is a function of digits already seen (digit i of a and b) plus the carry from digit i-1, and
// those sit at the SAME distance behind every answer digit, so one attention pattern (RoPE is relative)
// serves all of them; in the usual order the first answer digit would depend on the whole carry chain.
// Only answer digits and ';' are targets, so a model that has learned the task reaches a loss far below
// ln(256). Before it does, it sits on a plateau near 1.15 (digit statistics, no arithmetic).
//
// Why some training problems have a zero operand. A sum digit (a_i + b_i + carry) mod 10 is uncorrelated
// with a_i alone and with b_i alone: each is uniform whatever the other digit. So no single input digit
// predicts the answer, the gradient towards "look at a_i and b_i" is tiny, and whether a run ever leaves
// the plateau was decided by rounding (AVX2 against AVX-512 kernels, issue 32). In 1 training problem in
// kZeroOperandOneIn a = 0, in another b = 0: there the answer copies one operand, a first-order signal that
// teaches attention where the digits are; the sum follows. Evaluation (ids from kHeldOutFirstId on) keeps
// uniform problems, so the accuracy it reports is plain two-digit addition.
constexpr int64_t kHeldOutFirstId = int64_t(1) << 40;  // evaluation's samples; training's ids are below
constexpr uint32_t kZeroOperandOneIn = 8;              // 1 in 8 training problems a = 0, 1 in 8 b = 0
struct AdditionProblem {
    int a = 0, b = 0;
};
AdditionProblem addition_problem(uint64_t seed, int64_t sample_id, int64_t k);  // k-th problem of a sample
std::string addition_text(const AdditionProblem& p);  // {42, 17} -> "24+71=950;"

// Exact-match accuracy: a problem counts when every answer token and its ';' are predicted right.
// pred, targets: (rows, T) teacher-forced argmax predictions and the targets of the same batch.
// Problems whose answer is cut off by the end of the row are not counted.
struct TaskAccuracy {
    int64_t correct = 0, total = 0;
    double fraction() const { return total ? (double)correct / total : 0.0; }
};
TaskAccuracy addition_accuracy(const int32_t* pred, const int32_t* targets, int64_t rows, int64_t T);

// argmax of each row of logits (rows, V) on the host: the teacher-forced predictions
std::vector<int32_t> argmax_rows(const float* logits, int64_t rows, int64_t V);

// text of byte tokens; bytes outside printable ASCII as \xNN
std::string render_bytes(const int32_t* tokens, int64_t T);

// ---- llm.c shards ---------------------------------------------------------------------------------
constexpr int32_t kLlmcMagic = 20240520;
constexpr int32_t kLlmcVersion = 1;    // uint16 tokens (GPT-2's vocabulary)
constexpr int32_t kLlmcVersion32 = 2;  // uint32 tokens (llm.c's Llama 3 shards)
constexpr int64_t kLlmcHeaderInts = 256;
// writes a version-1 llm.c shard (tests, tools)
void write_llmc_shard(const std::string& path, const std::vector<uint16_t>& tokens);

}  // namespace penta
