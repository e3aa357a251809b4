// gpu_timing.hpp — how the lab times GPU code: CUDA events around `inner` back-to-back launches (so launch
// gaps and event resolution vanish into a run of >= 20 ms), the variants compared run in turn, `reps` times,
// and the median is kept; the ceilings it compares with: a measured device-to-device copy (bytes read plus
// bytes written, over 2 GiB: far beyond the L2) and the datasheet's peaks.
//
// Playbook: "Diving into the GPUs" (METHOD: time with events, warm up, repeat, take medians, rotate variants).
#pragma once
#if defined(PENTA_CUDA)
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace penta::lab {

struct Candidate {
    Candidate(std::string n, std::function<void()> f) : name(std::move(n)), run(std::move(f)) {}
    std::string name;
    std::function<void()> run;  // one call, asynchronous on the default stream
    std::vector<double> ms;     // per call, one entry per repeat
    int64_t inner = 1;          // calls per measurement (set by the warm-up)
};
// warm-up (one call each, also choosing `inner`), then reps rounds over all candidates in turn
void time_interleaved(std::vector<Candidate>& c, int64_t reps);
double median_ms(const Candidate& c);

double copy_bandwidth_gbs();  // measured once per process, GB/s (1e9 bytes), read + write
std::string gpu_header();     // "NVIDIA H200 (sm_90, 132 SMs, 141 GB), driver ..., CUDA runtime ..."
std::string device_name();    // "NVIDIA H200": what the table of peaks in metrics.hpp is searched with

}  // namespace penta::lab
#endif
