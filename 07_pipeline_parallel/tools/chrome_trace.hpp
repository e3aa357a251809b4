// chrome_trace.hpp — the pipeline's wall-clock timeline as a Chrome trace (the JSON "Trace Event Format" that
// chrome://tracing and Perfetto, ui.perfetto.dev, open): one process per rank, a track for its compute (F, B,
// W of each micro-batch) and one for its communication (waits on receives, sends posted).
//
// Playbook: "Pipeline parallelism" — the bubble as you would see it in a profiler.
//   mpirun -np 4 build/bin/07_pipeline_parallel --pp 4 --trace /tmp/pp.json     then open /tmp/pp.json in Perfetto
#pragma once
#include <string>
#include <vector>

#include "../../common/comm.hpp"
#include "../pipeline_executor.hpp"

namespace penta {

// Collective over world: every rank's spans go to world rank 0, which writes `path` (throws naming --trace when
// it cannot). process_name: this rank's name in the trace ("rank 1 (pp 1, dp 0, tp 0)").
void write_chrome_trace(const std::string& path, Comm& world, const std::vector<TraceSpan>& mine,
                        const std::string& process_name);

}  // namespace penta
