// online_softmax.cpp — the log-sum-exp merge of two attention partials (online_softmax.hpp).
//   mpirun -np 2 build/bin/06_context_parallel --cp 2    (ring attention merges one block per ring step)
#include "online_softmax.hpp"

#include <algorithm>
#include <cmath>

#include "../common/ops.hpp"

namespace penta {

void online_softmax_merge(Tensor& out, Tensor& lse, const Tensor& out_part, const Tensor& lse_part) {
    // a cuda tensor: the same merge, one GPU thread per (b, head, query) row (common/cuda/attention_flash.cu)
    if (out.device() != Device::cpu) return attention_merge_gpu(out, lse, out_part, lse_part);
    check_attention_merge(out, lse, out_part, lse_part);  // shapes, f32, one device (ops.hpp)
    // EXERCISE 06.1 begin: merge two attention partials by their log-sum-exp: the ring attention's online softmax across key blocks
    const int64_t B = out.size(0), T = out.size(1), nh = out.size(2), hd = out.size(3);
    float *o = out.ptr<float>(), *l = lse.ptr<float>();
    const float *op = out_part.ptr<float>(), *lp = lse_part.ptr<float>();
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < nh; h++)
            for (int64_t t = 0; t < T; t++) {
                const int64_t li = (b * nh + h) * T + t;
                const float l1 = l[li], l2 = lp[li];
                if (l2 == -INFINITY) continue;  // the part saw no key of this row
                const float m = std::max(l1, l2);
                const float lnew = m + std::log(std::exp(l1 - m) + std::exp(l2 - m));  // exp(-inf) = 0
                // w1 = 0 when nothing was merged yet: whatever out held is not read
                const float w1 = l1 == -INFINITY ? 0.0f : std::exp(l1 - lnew), w2 = std::exp(l2 - lnew);
                float* row = o + ((b * T + t) * nh + h) * hd;
                const float* prow = op + ((b * T + t) * nh + h) * hd;
                for (int64_t e = 0; e < hd; e++) row[e] = (w1 == 0.0f ? 0.0f : w1 * row[e]) + w2 * prow[e];
                l[li] = lnew;
            }
    // EXERCISE 06.1 end
}

}  // namespace penta
