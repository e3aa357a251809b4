// lab_util.cpp — the machine's name and load, today's date and a model's GEMM shapes (lab_util.hpp), printed
// beside every table of the kernels lab. Playbook: "Diving into the GPUs". Used by build/bin/10_kernels.
#include "lab_util.hpp"

#include <ctime>
#include <fstream>
#include <thread>

#include "../common/core.hpp"
#include "../common/model_config.hpp"

namespace penta::lab {

std::string load_average() {
    std::ifstream f("/proc/loadavg");
    std::string a, b, c;
    if (!(f >> a >> b >> c)) return "unknown";
    return a + " " + b + " " + c;
}

std::string cpu_name() {
    std::ifstream f("/proc/cpuinfo");
    std::string line, name = "unknown CPU";
    while (std::getline(f, line))
        if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) {
            name = line.substr(line.find(':') + 2);
            break;
        }
    std::string isa;
    if (__builtin_cpu_supports("avx2")) isa += " avx2";
    if (__builtin_cpu_supports("fma")) isa += " fma";
    if (__builtin_cpu_supports("avx512f")) isa += " avx512f";
    return strfmt("%s, %u cores visible,%s", name.c_str(), std::thread::hardware_concurrency(),
                  isa.empty() ? " no AVX2" : isa.c_str());
}

std::string today() {
    std::time_t t = std::time(nullptr);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%d", std::gmtime(&t));
    return buf;
}

std::vector<GemmShape> model_gemm_shapes(const std::string& model, int64_t tokens) {
    CHECK(tokens >= 1, "--tokens %ld must be >= 1", (long)tokens);
    const LlamaConfig c = preset(model);
    const int64_t h = c.hidden, kv = c.n_kv_heads * c.head_dim();
    return {
        {"q, o proj", tokens, h, h},
        {"k, v proj", tokens, kv, h},
        {"gate, up proj", tokens, c.ffn, h},
        {"down proj", tokens, h, c.ffn},
        {"lm head", tokens, c.vocab, h},
    };
}

}  // namespace penta::lab
