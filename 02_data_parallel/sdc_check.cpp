// sdc_check.cpp — the cross-replica parameter check (sdc_check.hpp).
#include "sdc_check.hpp"

#include <cstring>
#include <map>

#include "../common/config.hpp"
#include "../common/ops.hpp"

namespace penta {

void parse_sdc_flip(const std::string& v, SdcOptions& opt) {
    const auto [rank, step] = parse_rank_step(v, "--sdc-flip-bit");  // both in an int's range: nothing wraps
    opt.flip_rank = (int)rank;
    opt.flip_step = step;
}

uint64_t bit_checksum(const Tensor& x) {
    const std::vector<float> v = x.to_host();
    uint64_t h = 1469598103934665603ull;  // FNV-1a offset basis
    for (float f : v) {
        uint32_t bits;
        std::memcpy(&bits, &f, 4);
        for (int b = 0; b < 4; b++) {
            h ^= (bits >> (8 * b)) & 0xff;
            h *= 1099511628211ull;  // FNV prime
        }
    }
    return h;
}

SdcCheck::SdcCheck(Model& model, Comm& dp, SdcOptions opt) : model_(model), dp_(dp), opt_(opt) {
    CHECK(opt.every >= 0, "--sdc-check %lld must be >= 0 (0: off)", (long long)opt.every);
    CHECK(opt.flip_rank < dp.size(), "--sdc-flip-bit: rank %d is not a dp rank (dp %d)", opt.flip_rank, dp.size());
    CHECK(model.params().defined(), "--sdc-check needs the full parameter buffer on every replica (not ZeRO-3)");
}

std::vector<uint64_t> SdcCheck::gather(uint64_t mine) const {
    const std::vector<double> lo = dp_.all_gather_scalar((double)(mine & 0xffffffffu));
    const std::vector<double> hi = dp_.all_gather_scalar((double)(mine >> 32));
    std::vector<uint64_t> all(lo.size());
    for (size_t q = 0; q < all.size(); q++) all[q] = ((uint64_t)hi[q] << 32) | (uint64_t)lo[q];
    return all;
}

void SdcCheck::after_update() {
    step_++;
    Tensor& params = model_.params();
    if (step_ == opt_.flip_step && dp_.rank() == opt_.flip_rank) {
        // bit 16 of the f32 pattern: a mantissa bit in f32, bf16's lowest mantissa bit — the kind of change
        // that leaves the loss looking normal. The element: the middle of the buffer.
        Tensor e = params.flat(params.numel() / 2, 1);  // (1)
        std::vector<float> v = e.to_host();
        uint32_t bits;
        std::memcpy(&bits, &v[0], 4);
        bits ^= 1u << 16;
        std::memcpy(&v[0], &bits, 4);
        copy(e, Tensor::from_host(v, {1}, Device::cpu, Tag::workspace, params.dtype));
    }
    if (opt_.every == 0 || step_ % opt_.every != 0) return;
    checks_++;
    const std::vector<uint64_t> all = gather(bit_checksum(params));
    std::map<uint64_t, int> votes;
    for (uint64_t c : all) votes[c]++;
    if (votes.size() == 1) return;
    // the majority's checksum, if there is one; every replica holds the same list, so all reach the same verdict
    uint64_t majority = 0;
    int most = 0;
    for (const auto& [c, n] : votes)
        if (n > most) most = n, majority = c;
    const bool decided = 2 * most > (int)all.size();
    std::string odd;
    for (size_t q = 0; q < all.size(); q++)
        if (!decided || all[q] != majority) odd += (odd.empty() ? "" : ", ") + std::to_string(q);
    // the first tensor whose checksums differ (all replicas hash the same tensors in the same order)
    std::string tensor = "?";
    for (const ParamTensor& t : model_.layout().tensors) {
        const std::vector<uint64_t> per = gather(bit_checksum(params.flat(t.offset, t.numel())));
        bool same = true;
        for (uint64_t c : per) same = same && c == per[0];
        if (!same) {
            tensor = t.name;
            break;
        }
    }
    if (decided)
        FAIL("silent data corruption: after step %lld (--sdc-check %lld) dp rank(s) %s of %s hold parameters that "
             "differ from the other %d replicas' (first in %s); stopping",
             (long long)step_, (long long)opt_.every, odd.c_str(), dp_.name().c_str(), most, tensor.c_str());
    FAIL("silent data corruption: after step %lld (--sdc-check %lld) the replicas of %s disagree (dp ranks %s; first "
         "in %s) and no checksum has a majority: with %d replicas the check cannot say which is wrong; stopping",
         (long long)step_, (long long)opt_.every, dp_.name().c_str(), odd.c_str(), tensor.c_str(), dp_.size());
}

}  // namespace penta
