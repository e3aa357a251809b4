// pipeline_schedule.hpp — pipeline schedules as data: for every stage (pipeline rank) the ordered list of
// what it computes, (F | B | W | BW, micro-batch, chunk), generated for AFAB, 1F1B, interleaved 1F1B, ZB-H1 and
// DualPipe, and a checker that proves a list runs before anything runs.
//
// Playbook: "Pipeline parallelism". The model is cut into S pieces, the virtual stages, run one after the
// other by every micro-batch (forward 0 → S-1, backward S-1 → 0). A stage (rank) holds one piece, or several
// (its model chunks): interleaved 1F1B gives rank r the pieces r, r + p, r + 2p, ... (v chunks, S = v·p), so a
// micro-batch loops v times through the ranks; DualPipe gives rank r pieces r and p-1-r, and sends half the
// micro-batches down (0 → p-1) and half up (p-1 → 0) — two copies of the model, one per direction.
//   F   forward of one micro-batch through one chunk; sends its output to the next virtual stage
//   B   the input gradient (Model::backward_input); sends it to the previous virtual stage
//   W   the weight gradient of an earlier B (Model::backward_weight): nobody waits for it (zero bubble)
//   BW  B then W fused (Model::backward): what AFAB, 1F1B and interleaved run
// The schedules (p stages, m micro-batches; stage i's list):
//   afab         all forwards, then all backwards (GPipe): m micro-batches in flight
//   1f1b         p-i-1 forwards to warm up, then one forward, one backward; p-i in flight
//   interleaved  Megatron-LM's order over v chunks: micro-batches in rounds of p through chunk 0, 1, ...;
//                warm-up 2(p-i-1) + (v-1)p forwards; any m, the last round short (played: tools/schedule_play.hpp)
//   zb1          1F1B with B and W apart, stage i keeping i W's pending (ZB-H1, Qi et al. 2024): the W's fill
//                the cool-down bubble, peak memory that of 1F1B's first stage
//   dualpipe     DeepSeek-V3's bidirectional schedule (its open-source dualpipe.py, steps 1-8), B and W apart
//                in its zero-bubble steps; m odd or below 2p - 2 played, ceil(m/2) down and floor(m/2) up
// check_plan proves, before any rank runs a list, that every op's inputs exist (a B after its F, a W after
// its B, every micro-batch through every virtual stage exactly once), that the messages between each pair of
// stages are received in the order they are sent (NCCL has no tags), and that the lists cannot deadlock when
// sends never block and receives do (the executor's rule, pipeline_executor.hpp): it names the stage and the
// op where they would.
//   build/bin/tests_07 -ts='ch07 np1'      (tests/07_pipeline_parallel/test_schedules.cpp)
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "../common/model_layout.hpp"

namespace penta {

enum class PipeOpKind : uint8_t { F, B, W, BW };
const char* pipe_op_name(PipeOpKind k);  // "F", "B", "W", "BW"

struct PipeOp {
    PipeOpKind kind = PipeOpKind::F;
    int mb = 0;     // micro-batch of the step
    int chunk = 0;  // which of the stage's model chunks
    bool writes_weight_grads() const { return kind == PipeOpKind::W || kind == PipeOpKind::BW; }
    bool operator==(const PipeOp& o) const { return kind == o.kind && mb == o.mb && chunk == o.chunk; }
};
std::string pipe_op_str(const PipeOp& op);  // "F mb 3 chunk 1"

enum class PipeScheduleKind { afab, one_f_one_b, interleaved, zb1, dualpipe };
PipeScheduleKind parse_pipe_schedule(const std::string& flag_value);  // names --pp-schedule and the choices
const char* pipe_schedule_name(PipeScheduleKind k);                   // "afab", "1f1b", ...

struct PipelinePlan {
    PipeScheduleKind kind = PipeScheduleKind::one_f_one_b;
    int stages = 1;          // p: pipeline ranks
    int chunks = 1;          // model chunks per stage (v; DualPipe 2)
    int micro_batches = 1;   // m
    int virtual_stages = 1;  // S: pieces the model is cut into (p·v; DualPipe p)
    std::vector<int> direction;  // per micro-batch: 0 runs virtual stages 0 → S-1 from stage 0; DualPipe's 1 from stage p-1
    // where virtual stage s of direction d runs: place[d][s] = (stage, chunk)
    std::vector<std::vector<std::pair<int, int>>> place;
    std::vector<std::vector<PipeOp>> ops;  // per stage, in order
    int departures = 0;  // ops a played schedule ran out of the order its stages wanted (tools/schedule_play.hpp)

    // the virtual stage that (stage, chunk) runs for micro-batch mb; -1 when that micro-batch never visits it
    int virtual_stage(int stage, int chunk, int mb) const;
    // the (stage, chunk) of virtual stage s of micro-batch mb's direction
    std::pair<int, int> where(int mb, int s) const { return place[direction[mb]][s]; }
    // the virtual stage whose layers (stage, chunk) holds (each chunk serves one direction)
    int piece(int stage, int chunk) const;
};

// The five schedules, checked (check_plan). v: chunks per stage (interleaved only). Throws naming the flag and
// the rule when a schedule cannot take p or v: DualPipe needs p even. Every m >= 1 runs: interleaved with a short
// last round of micro-batches when m is not a multiple of p, DualPipe played when m is odd or below 2p - 2 (the
// sizes DeepSeek's steps assume); both played with tools/schedule_play.hpp.
PipelinePlan make_pipeline_plan(PipeScheduleKind kind, int p, int m, int v = 1);
// Those rules alone (v > 1 only interleaved, DualPipe's even p), which build nothing: a program checks them, and
// the layer split of its S = p · v virtual stages (split_layers), before it builds a plan of p · v · m ops.
void check_pipeline_shape(PipeScheduleKind kind, int p, int v);
// The same lists without those rules or the check: what the tests hand the checker to see it refuse.
PipelinePlan generate_pipeline_plan(PipeScheduleKind kind, int p, int m, int v = 1);

// Throws penta::Error naming the stage and the op when the plan cannot run (see the file comment).
void check_plan(const PipelinePlan& plan);

// How the n_layers decoder layers are cut into the plan's S virtual stages: `sizes` (S numbers summing to
// n_layers, each >= 1: --pp-layers), or empty for an even split (the first n_layers % S pieces one more).
// Returns the S layer ranges; throws naming --pp-layers and the rule.
std::vector<LayerRange> split_layers(int64_t n_layers, int64_t S, const std::vector<int64_t>& sizes);
// "3,3,2" -> {3, 3, 2}; names --pp-layers on a bad value
std::vector<int64_t> parse_layer_sizes(const std::string& flag_value);

// What `stage` builds: its chunks' layer ranges, the embedding on the stage that runs virtual stage 0, the
// head on the one that runs S-1, and DualPipe's mirror (stages below p/2 hold the primary copy).
PipelineSlice stage_slice(const PipelinePlan& plan, const std::vector<LayerRange>& pieces, int stage);

}  // namespace penta
