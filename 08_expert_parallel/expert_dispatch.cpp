// expert_dispatch.cpp — the counts' all-to-all, dispatch and combine over the ep group (expert_dispatch.hpp).
// Playbook: "Expert parallelism". Run: `mpirun -np 2 build/bin/08_expert_parallel --dp 2 --ep 2`.
#include "expert_dispatch.hpp"

#include "../common/ops.hpp"

namespace penta {

namespace {
// the element offsets of consecutive parts of `rows` rows of h values each
std::vector<int64_t> offsets(const std::vector<int64_t>& rows, int64_t h) {
    std::vector<int64_t> off(rows.size(), 0);
    for (size_t i = 1; i < rows.size(); i++) off[i] = off[i - 1] + rows[i - 1] * h;
    return off;
}
std::vector<int64_t> times(const std::vector<int64_t>& rows, int64_t h) {
    std::vector<int64_t> v(rows);
    for (int64_t& x : v) x *= h;
    return v;
}
}  // namespace

int64_t ExpertExchange::received() const {
    int64_t n = 0;
    for (int64_t r : recv_rows) n += r;
    return n;
}

ExpertDispatch::ExpertDispatch(Comm& ep, int64_t E, int64_t h) : ep_(ep), E_(E), h_(h) {
    CHECK(E % ep.size() == 0, "--ep %d must divide the model's %lld experts: each rank holds E/ep of them", ep.size(),
          (long long)E);
}

ExpertExchange ExpertDispatch::exchange_counts(const DispatchPlan& plan, Device device) {
    const int P = ep_.size(), El = experts_per_rank();
    ExpertExchange x;
    // my copies per expert, in expert order: the chunk for rank q is its El experts' counts
    std::vector<int32_t> mine(E_);
    for (int64_t e = 0; e < E_; e++) mine[e] = (int32_t)plan.kept[e];
    Tensor send = Tensor::from_host_i32(mine, {E_}, device, Tag::comm), recv = Tensor::empty({E_}, DType::i32, device, Tag::comm);
    ep_.all_to_all(send, recv);
    const std::vector<int32_t> got = recv.to_host_i32();  // chunk q: what rank q sends each of my experts
    x.send_rows.assign(P, 0);
    x.recv_rows.assign(P, 0);
    x.local_rows.assign(El, 0);
    for (int q = 0; q < P; q++)
        for (int el = 0; el < El; el++) {
            x.send_rows[q] += mine[q * El + el];
            x.recv_rows[q] += got[q * El + el];
            x.local_rows[el] += got[q * El + el];
        }
    // received rows come source after source, each source's expert after expert; the experts want their own
    // rows together: source q's rows for expert el go after the rows of sources < q for el
    std::vector<int64_t> expert_start(El, 0), from_earlier(El, 0);
    for (int el = 1; el < El; el++) expert_start[el] = expert_start[el - 1] + x.local_rows[el - 1];
    std::vector<int32_t> perm;
    perm.reserve(x.received());
    for (int q = 0; q < P; q++)
        for (int el = 0; el < El; el++) {
            for (int64_t i = 0; i < got[q * El + el]; i++) perm.push_back((int32_t)(expert_start[el] + from_earlier[el] + i));
            from_earlier[el] += got[q * El + el];
        }
    x.perm = Tensor::from_host_i32(perm, {(int64_t)perm.size(), 1}, device, Tag::comm);
    return x;
}

Tensor ExpertDispatch::to_experts(const ExpertExchange& x, const Tensor& rows, Tag tag) {
    const Device dev = rows.device();
    Tensor by_source = Tensor::empty({x.received(), h_}, rows.dtype, dev, Tag::comm);  // (received, h)
    ep_.all_to_all_v(rows, times(x.send_rows, h_), offsets(x.send_rows, h_), by_source, times(x.recv_rows, h_),
                     offsets(x.recv_rows, h_));
    Tensor by_expert = Tensor::empty({x.received(), h_}, rows.dtype, dev, tag);
    moe_dispatch(by_source, x.perm, by_expert);  // row i -> row perm[i]
    return by_expert;
}

Tensor ExpertDispatch::from_experts(const ExpertExchange& x, const Tensor& rows, Tag tag) {
    const Device dev = rows.device();
    Tensor by_source = Tensor::empty({x.received(), h_}, rows.dtype, dev, Tag::comm);
    moe_dispatch_backward(rows, x.perm, by_source);  // row i <- row perm[i]: the permutation undone
    int64_t sent = 0;
    for (int64_t r : x.send_rows) sent += r;
    Tensor back = Tensor::empty({sent, h_}, rows.dtype, dev, tag);  // (sent, h) in the send order
    ep_.all_to_all_v(by_source, times(x.recv_rows, h_), offsets(x.recv_rows, h_), back, times(x.send_rows, h_),
                     offsets(x.send_rows, h_));
    return back;
}

}  // namespace penta
