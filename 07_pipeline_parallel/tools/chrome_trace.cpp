// chrome_trace.cpp — write_chrome_trace (chrome_trace.hpp): each rank's spans as JSON events, gathered to rank 0.
// Trace Event Format: {"traceEvents": [...]}, complete events {"ph": "X", "ts", "dur"} in microseconds, one
// "pid" per rank and one "tid" per track, named by metadata events {"ph": "M", "name": "process_name"}.
// Test: tests/07_pipeline_parallel/test_pp.cpp parses what it writes.
#include "chrome_trace.hpp"

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../../common/core.hpp"
#include "pipeline_clock.hpp"

namespace penta {

void write_chrome_trace(const std::string& path, Comm& world, const std::vector<TraceSpan>& mine,
                        const std::string& process_name) {
    const int rank = world.rank();
    nlohmann::json events = nlohmann::json::array();
    events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", rank}, {"tid", 0}, {"args", {{"name", process_name}}}});
    events.push_back({{"ph", "M"}, {"name", "process_sort_index"}, {"pid", rank}, {"tid", 0}, {"args", {{"sort_index", rank}}}});
    for (int track : {0, 1})
        events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", rank}, {"tid", track},
                          {"args", {{"name", track == 0 ? "compute" : "communication"}}}});
    for (const TraceSpan& s : mine)
        events.push_back({{"name", s.name}, {"cat", s.track == 0 ? "compute" : "comm"}, {"ph", "X"}, {"pid", rank},
                          {"tid", s.track}, {"ts", s.start * 1e6}, {"dur", s.dur * 1e6}});
    // the text, 8 bytes to an int64, to rank 0 (every rank gets every text: simple, and a trace is small)
    const std::string text = events.dump();
    std::vector<int64_t> packed((text.size() + 7) / 8 + 1, 0);
    packed[0] = (int64_t)text.size();
    std::memcpy(&packed[1], text.data(), text.size());
    const std::vector<std::vector<int64_t>> all = all_gather_int64(world, packed);
    if (rank != 0) return;
    nlohmann::json trace = {{"traceEvents", nlohmann::json::array()}, {"displayTimeUnit", "ms"}};
    for (const std::vector<int64_t>& p : all) {
        const std::string t((const char*)&p[1], (size_t)p[0]);
        for (auto& e : nlohmann::json::parse(t)) trace["traceEvents"].push_back(std::move(e));
    }
    std::ofstream f(path);
    CHECK(f.good(), "--trace %s: cannot open the file for writing", path.c_str());
    f << trace.dump() << "\n";
    CHECK(f.good(), "--trace %s: writing the trace failed", path.c_str());
}

}  // namespace penta
