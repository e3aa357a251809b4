// words_dataset.cpp — see words_dataset.hpp. Playbook: "Mixed precision training". Run: `make test CH=01`.
#include "words_dataset.hpp"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>

#include "../../common/core.hpp"

namespace penta::testing {

std::unique_ptr<Dataset> words_dataset(int32_t vocab) {
    std::vector<std::string> words(512);
    for (uint64_t w = 0; w < words.size(); w++)
        for (uint32_t n = 2 + philox4x32(99, 1, w).v[0] % 6, c = 0; c < n; c++)
            words[w] += (char)('a' + philox4x32(99, 2, w * 8 + c).v[0] % 26);
    std::string text;
    for (uint64_t i = 0; text.size() < 65536; i++) {
        const Philox4 r = philox4x32(99, 3, i);
        const uint32_t rank = (uint32_t)(words.size() * std::pow(u32_to_unit(r.v[0]), 2.0));  // frequent words first
        text += words[rank];
        text += r.v[1] % 9 == 0 ? ".\n" : " ";
    }
    const std::string path = "/tmp/penta_precision_words_" + std::to_string(getpid()) + ".txt";
    std::ofstream(path) << text;
    auto data = make_dataset("text:" + path, 1337, vocab);
    std::remove(path.c_str());  // the dataset maps the file: its bytes stay readable
    return data;
}

}  // namespace penta::testing
