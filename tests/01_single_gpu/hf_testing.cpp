// hf_testing.cpp — see hf_testing.hpp.
#include "hf_testing.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "../../common/safetensors.hpp"

namespace penta::hf_testing {

std::string scratch(const std::string& what) { return "/tmp/penta_hf_" + std::to_string(getpid()) + "_" + what; }

std::string python_with_hf(std::string* why) {
    static int state = -1;  // -1 unknown, 0 missing, 1 present: pip runs at most once per process
    const std::string py = "/usr/bin/python3";
    const std::string probe = py + " -c 'import torch, transformers, safetensors, tokenizers' >/dev/null 2>&1";
    if (state < 0) {
        state = std::system(probe.c_str()) == 0;
        if (!state) {
            std::system("bash " PENTA_SOURCE_DIR "/scripts/install_hf_python.sh");
            state = std::system(probe.c_str()) == 0;
        }
    }
    if (!state && why)
        *why = "no /usr/bin/python3 importing torch, transformers, safetensors and tokenizers, and "
               "scripts/install_hf_python.sh could not install them";
    return state ? py : "";
}

std::string HfSpec::str() const {
    std::string s = tied ? "tied" : "untied";
    if (llama3) s += ", llama3 rope_scaling";
    if (shard_kb) s += ", sharded " + std::to_string(shard_kb) + "KB";
    if (head_dim) s += ", head_dim " + std::to_string(head_dim);
    if (experts) s += ", Mixtral of " + std::to_string(experts) + " experts";
    return s + ", " + dtype + ", " + std::to_string(layers) + " layers";
}

std::string HfSpec::args() const {
    std::string s = " --layers " + std::to_string(layers) + " --dtype " + dtype;
    if (tied) s += " --tied";
    if (llama3) s += " --llama3";
    if (shard_kb) s += " --shard-kb " + std::to_string(shard_kb);
    if (head_dim) s += " --head-dim " + std::to_string(head_dim);
    if (experts) s += " --experts " + std::to_string(experts);
    return s;
}

bool make_hf_model(const std::string& python, const std::string& dir, const HfSpec& spec) {
    const std::string cmd = "rm -rf '" + dir + "' && " + python + " " PENTA_SOURCE_DIR "/tools/hf_reference.py make '" +
                            dir + "'" + spec.args() + " 2>&1 | grep -v -i warn";
    std::system(cmd.c_str());  // grep's status says nothing: the files say whether it worked
    const std::string ok = "test -f '" + dir + "/reference.safetensors' && test -f '" + dir + "/config.json'";
    if (std::system(ok.c_str()) == 0) return true;
    std::printf("hf_reference.py make %s%s failed\n", dir.c_str(), spec.args().c_str());
    return false;
}

int64_t HfReference::counted() const {
    return std::count_if(targets.begin(), targets.end(), [](int32_t t) { return t >= 0; });
}

HfReference read_hf_reference(const std::string& dir) {
    SafetensorsFile f(dir + "/reference.safetensors");
    auto floats = [&](const SafeTensor& t) {
        REQUIRE_MESSAGE(t.dtype == "F32", t.name << " is " << t.dtype);
        std::vector<float> v(t.numel());
        std::memcpy(v.data(), f.data(t), t.end - t.begin);
        return v;
    };
    auto ints = [&](const char* name) {
        const SafeTensor* t = f.find(name);
        REQUIRE_MESSAGE((t && t->dtype == "I32"), name << " is not an I32 tensor of " << f.path());
        std::vector<int32_t> v(t->numel());
        std::memcpy(v.data(), f.data(*t), t->end - t->begin);
        return v;
    };
    HfReference r;
    const SafeTensor* tok = f.find("tokens");
    r.B = tok->shape[0], r.T = tok->shape[1];
    r.tokens = ints("tokens");
    r.targets = ints("targets");
    for (int32_t& t : r.targets) t = t < 0 ? -1 : t;  // transformers' -100 is our -1
    r.logits = floats(*f.find("logits"));
    r.loss = floats(*f.find("loss"))[0];
    r.inv_freq = floats(*f.find("inv_freq"));
    for (const SafeTensor& t : f.tensors())
        if (t.name.rfind("grad.", 0) == 0) r.grads[t.name.substr(5)] = floats(t);
    return r;
}

void write_logits(const std::string& path, const std::vector<int32_t>& tokens, int64_t B, int64_t T,
                  const std::vector<float>& logits) {
    const int64_t V = (int64_t)logits.size() / (B * T);
    const SafetensorsPlan plan = plan_safetensors({{"logits", DType::f32, {B * T, V}}, {"tokens", DType::i32, {B, T}}}, {});
    std::ofstream f(path, std::ios::binary);
    f << plan.header;
    f.write((const char*)logits.data(), (std::streamsize)(logits.size() * 4));
    f.write((const char*)tokens.data(), (std::streamsize)(tokens.size() * 4));
    REQUIRE_MESSAGE(f.good(), "writing " << path << " failed");
}

bool transformers_agrees(const std::string& python, const std::string& dir, const std::string& ours) {
    const std::string cmd = python + " " PENTA_SOURCE_DIR "/tools/hf_reference.py check '" + dir + "' '" + ours + "'";
    return std::system(cmd.c_str()) == 0;
}

void check_close_scaled(const std::vector<float>& got, const std::vector<float>& want, double rtol,
                        const std::string& what) {
    REQUIRE_MESSAGE(got.size() == want.size(), what << ": " << got.size() << " values vs " << want.size());
    double scale = 0;
    for (float w : want) scale = std::max(scale, (double)std::fabs(w));
    size_t worst = 0;
    double worst_excess = -1;
    for (size_t i = 0; i < got.size(); i++) {
        const double excess = std::fabs((double)got[i] - want[i]) - rtol * (std::fabs(want[i]) + scale);
        if (excess > worst_excess) worst_excess = excess, worst = i;
    }
    CHECK_MESSAGE(worst_excess <= 0, what << ": element " << worst << " is " << got[worst] << ", transformers' "
                                          << want[worst] << " (tensor scale " << scale << ", rtol " << rtol << ")");
}

}  // namespace penta::hf_testing
