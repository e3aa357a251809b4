// planner.hpp — the layout planner: given a model, a machine (GPUs, their memory, nodes, NVLink and
// InfiniBand bandwidths, peak FLOP/s) and a target global batch, it enumerates every legal dp × tp × pp × cp
// (× ep) layout with its ZeRO stage, recompute mode and micro-batch, predicts each rank's memory (params,
// grads, optimizer, activations) and the step time (compute + bubble + the communication the playbook's
// overlap conditions leave exposed), and ranks them by the playbook's three steps: fit memory -> reach the
// global batch -> maximise throughput.
//
// Playbook: "5D parallelism in a nutshell", "Finding the best training configuration" (the three steps), and
// appendix C of seed 000, "communication vs compute overlap" (t_comm / t_compute per axis). The memory of one
// rank is the sum of formulas.hpp's terms applied to THAT rank's slice of the model (its tp shard, its pp
// stage, its ZeRO shard): the same ParamLayout the trainers build, so on our CPU runs the prediction equals
// the allocator's count byte for byte (tests/09_5d/test_planner_measure.cpp).
//   build/bin/09_5d_plan --model llama3-8b --machine h100 --gpus 64 --seq 4096 --global-batch 256
//   build/bin/tests_09 -ts='ch09 np1'   (the planner alone), -ts='ch09 np4' (against measured runs)
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "../common/formulas.hpp"
#include "../common/grid.hpp"
#include "../common/model_config.hpp"
#include "../07_pipeline_parallel/pipeline_schedule.hpp"

namespace penta::plan {

// One kind of node. Bandwidths are per GPU, one direction, in bytes/s: what one rank can push while every
// other rank does the same (NVLink inside the node, the node's InfiniBand NIC share across nodes).
struct Machine {
    std::string name;
    int gpus_per_node = 8;
    int64_t gpu_memory = 0;   // bytes
    double peak_flops = 0;    // dense bf16 FLOP/s of one GPU
    double intra_bw = 0;      // NVLink, B/s per GPU
    double inter_bw = 0;      // InfiniBand, B/s per GPU
    double efficiency = 0.5;  // the share of peak a well-tuned matmul-heavy step reaches (its MFU)
};
// "h100" (SXM 80 GB, 989 TFLOP/s bf16, NVLink 4 450 GB/s, one 400 Gb/s NIC per GPU), "h200" (141 GB, same
// compute and links), "cpu" (this repository's CPU ranks: fp32, for the measured checks). Unknown: throws listing them.
Machine machine_preset(const std::string& name);
std::vector<std::string> machine_names();

// What we train. fp32: this code's default (4-byte everything, no master copy); bf16: the playbook's mixed
// precision (bf16 weights, grads, activations and communication, fp32 master weights and Adam state);
// bf16_weights: the trainers' --precision bf16 (and chapter 11's fp16 and fp8, as they run there): 2-byte weights
// with the fp32 master and Adam state, but f32 gradients, activations and messages (only the GEMMs' inputs are
// rounded) — what chapter 09's trainer predicts its own memory with.
enum class Precision { fp32, bf16, bf16_weights };
Precision parse_precision(const std::string& flag_value);  // names --precision (fp32 | bf16 | bf16-weights)
const char* precision_name(Precision p);

struct Job {
    LlamaConfig model;
    int64_t seq = 4096;           // tokens per sequence
    int64_t global_batch = 0;     // sequences per optimizer step (the playbook's GBS = this · seq tokens)
    Precision precision = Precision::bf16;
    AttentionKernel kernel = AttentionKernel::flash;
    int64_t elem_bytes() const { return precision == Precision::bf16 ? 2 : 4; }   // activations, tp/cp/pp/ep messages
    int64_t param_bytes() const { return precision == Precision::fp32 ? 4 : 2; }  // weights (and ZeRO's all-gathers)
    int64_t grad_bytes() const { return precision == Precision::bf16 ? 2 : 4; }   // gradients (and their reductions)
    int64_t master_bytes() const { return precision == Precision::fp32 ? 0 : 4; }  // the fp32 master beside 2-byte weights
};

// One candidate: the grid's degrees and what each rank does with them.
struct Layout {
    GridShape grid;               // dp, pp, cp, tp, ep
    int zero = 0;                 // ZeRO stage over dp (× cp): 0 plain all-reduce, 1-3
    bool sp = false;              // sequence parallelism on top of tp
    Recompute recompute = Recompute::none;
    PipeScheduleKind schedule = PipeScheduleKind::one_f_one_b;
    int chunks = 1;               // interleaved 1F1B's v
    int64_t micro_batch = 1;      // sequences per micro-batch per dp rank (mbs)
    int64_t grad_accum = 1;       // micro-batches per step per dp rank (m under pp)
    std::vector<int64_t> layers;  // --pp-layers: layers per virtual stage; empty: the even split
    std::string str() const;      // "dp 8 tp 8 pp 1 cp 1 ep 1 ZeRO-1 sp recompute=selective mbs 1 ga 4 1f1b"
};

// Bytes one rank sends per optimizer step on each axis, by comm.hpp's ring accounting
struct AxisBytes {
    double dp = 0, tp = 0, pp = 0, cp = 0, ep = 0;
    double total() const { return dp + tp + pp + cp + ep; }
};

// What one rank holds and sends
struct RankPrediction {
    GridCoords coords;
    int node = 0;
    int64_t numel = 0;             // elements of this rank's slice of the model (tp shard of its stage)
    int64_t shard = 0;             // of them, its ZeRO shard (zero_shard_numel over the dp × cp group)
    ModelStateBytes state;         // params, grads, fp32 master, Adam moments
    int in_flight = 1;             // micro-batches held at once (the schedule's)
    // the most activations the stage holds between two ops of its list (device + host under offload): its list
    // walked, each F adding what its chunk keeps, a B whose W comes later adding what it leaves for that W, each W
    // or BW giving its chunk's back; with one chunk and a fused backward, in_flight × what one micro-batch's forward keeps
    int64_t activations = 0;
    int64_t tp_layer_bytes = 0;    // what one decoder layer's TP boundaries send per micro-batch (fwd + bwd)
    AxisBytes bytes;               // per step
    int64_t total() const { return state.total() + activations; }
};

// The step of the slowest rank, seconds
struct StepTime {
    double compute = 0;   // FLOPs / (peak · efficiency), recomputation included
    double bubble = 0;    // the pipeline's idle share: compute · (p-1)/m (1/v of it interleaved)
    AxisBytes comm;       // the time each axis's bytes take on its link
    AxisBytes exposed;    // of which not hidden behind compute (appendix C's condition per axis)
    AxisBytes ratio;      // t_comm / t_compute per axis: <= 1 means the overlap condition holds
    double step = 0;      // compute + bubble + exposed
    double tokens_per_s = 0;
    double mfu = 0;       // 6 N tokens / (step · gpus · peak): the model FLOPs utilisation
};

struct Candidate {
    Layout layout;
    RankPrediction worst;   // the rank with the most memory (the one that must fit)
    StepTime time;
    bool fits = false;      // step 1: worst.total() <= the GPU's memory
    bool reaches_batch = false;  // step 2: dp · mbs · ga == the global batch
    std::vector<std::string> notes;  // refusals and warnings (tp across nodes, ...)
};

// ---- the pieces (each testable alone) -------------------------------------------------------------------

// Throws naming the flag and the rule when the layout cannot run this job on `world` ranks: the grid's own
// rules (validate_grid), tp across nodes (unless allow_cross_node_tp), sp without tp, ZeRO-3 with pp, an
// unknown ZeRO stage, cp that does not divide the sequence in 2·cp chunks, a global batch dp · mbs · ga does
// not reach, the schedule's rules on p, m, v.
void check_layout(const Job& job, const Machine& m, const Layout& L, int world, bool allow_cross_node_tp = false);

// Rank `rank`'s memory and traffic. Exact for dense models on our code (the same ParamLayout, shard cut and
// saved tensors as the trainers); MoE: experts divided by ep, traffic for uniform routing.
RankPrediction predict_rank(const Job& job, const Machine& m, const Layout& L, int rank);
// The rank that holds the most (checks every pp stage at dp/cp/tp coordinate 0: ZeRO's first shard is the largest)
RankPrediction predict_worst_rank(const Job& job, const Machine& m, const Layout& L);
StepTime predict_time(const Job& job, const Machine& m, const Layout& L, const RankPrediction& worst);
Candidate evaluate(const Job& job, const Machine& m, const Layout& L, int world);

// ---- enumerate and rank ---------------------------------------------------------------------------------

struct SearchSpace {
    std::vector<int> zero = {0, 1, 2, 3};
    std::vector<Recompute> recompute = {Recompute::none, Recompute::selective, Recompute::full};
    std::vector<int64_t> micro_batch = {1, 2, 4, 8};
    int max_cp = 8;
    // the playbook's step 1 brings context parallelism in for long sequences only: below this many tokens per
    // sequence, cp stays 1 (our time model does not charge CP's smaller per-rank matmuls, so it would otherwise
    // use cp as a free way to get more pipeline micro-batches out of the same global batch)
    int64_t cp_min_seq = 16384;
    bool allow_cross_node_tp = false;
};
// Every legal layout on `world` GPUs (check_layout passes), evaluated, ranked: those that fit before those
// that do not, then those that reach the global batch, then by tokens/s (ties: less memory).
std::vector<Candidate> enumerate_and_rank(const Job& job, const Machine& m, int world, const SearchSpace& space = {});

// Why the first candidate wins, in sentences: how many layouts each of the three steps kept, and what the
// runner-up lacks (more memory, exposed communication, a bubble...).
std::string explain_choice(const std::vector<Candidate>& ranked, const Machine& m);

// One table row per candidate (the first n)
std::string format_table(const std::vector<Candidate>& ranked, size_t n);

}  // namespace penta::plan
