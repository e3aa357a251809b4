// schedule_play.hpp — writing a schedule's lists by playing the pipeline on the logical clock: each stage says
// in which order it wants its forwards and backwards, and the play runs every stage at once (F, B, W 1 unit,
// BW 2), writing down the op each stage runs, in the order it runs them. What interleaved 1F1B with a short
// last round of micro-batches and DualPipe with few or an odd number of micro-batches are made of
// (pipeline_schedule.cpp); check_plan still proves the lists before anything runs them.
//
// Playbook: "Pipeline parallelism". Two rules the written lists must obey, and how the play keeps them:
//   * a pair of stages receives in the order it sends (NCCL matches by order): a stage runs an op only when
//     the op's message is the first not yet received from that peer. When the stage's preferred op waits
//     behind another message of the same peer, that other message's op goes first — the stage has no choice.
//   * no deadlock: when no stage can run its preferred op and none is busy, the first stage with another op
//     ready runs it (a departure from the order it wanted).
// `strict`: a stage departs from its wanted order only for those two reasons — so a wanted order that runs as
// is (Megatron-LM's interleaved lists for m a multiple of p) comes out unchanged. Not strict (greedy): a stage
// runs the first ready op in its order of preference, and a deferred W whenever nothing else is ready.
//   build/bin/tests_07 -ts='ch07 np1'      (tests/07_pipeline_parallel/test_schedules.cpp)
#pragma once
#include <vector>

#include "../pipeline_schedule.hpp"

namespace penta {

struct StageWish {
    // the stage's op streams, each in the order it must run (each stream's ops are F's or backwards, B or BW).
    // The stage picks the next op of one stream at a time.
    std::vector<std::vector<PipeOp>> streams;
    // strict: the stream the stage wants next, given how many ops of each stream it ran; greedy: the streams in
    // order of preference (the first ready one runs)
    std::vector<int> (*prefer)(const std::vector<int>& done, const StageWish& wish) = nullptr;
    int hint = 0;    // for `prefer`: 1F1B's forwards before the first backward; DualPipe's direction entering here
    int cap = 0;     // greedy: at most this many micro-batch chunks between F and W (0: no limit)
};

struct PlayResult {
    int departures = 0;  // ops run out of the wanted order (strict) for the order or deadlock rule
};

// Plays `plan` (its stages, chunks, directions and places set, ops empty) with one wish per stage and writes
// plan.ops. B ops keep their W pending until the stage has nothing else ready (greedy) or the end.
PlayResult play_schedule(PipelinePlan& plan, const std::vector<StageWish>& wishes, bool strict);

}  // namespace penta
