// safetensors.hpp — the Hugging Face safetensors format, read (memory-mapped) and planned for writing.
//
//   [8 bytes: N, little-endian u64] [N bytes: a JSON header] [the tensors' bytes]
//   header = {"model.norm.weight": {"dtype": "F32", "shape": [576], "data_offsets": [BEGIN, END]}, ...,
//             "__metadata__": {"format": "pt"}}          offsets count from the first byte after the header
//
// No well-kept C++ library for it is packaged on Debian, and the format is small, so it is read here with
// nlohmann-json, checking every rule of the format before any byte is trusted: the header length within the
// file, a JSON object, every dtype known, every shape a list of sizes >= 0, shape × dtype size = END - BEGIN,
// every range inside the data, the ranges neither overlapping nor leaving holes (the data is exactly the
// tensors), __metadata__ a map of strings. A truncated or lying file is refused naming the file, the tensor
// and the rule. The file is memory-mapped read-only, so a rank that reads a slice touches only its pages.
//
// Used by hf_checkpoint.cpp (--model DIR, --export-hf DIR). Test: tests/01_single_gpu/test_hf_checkpoint.cpp
// (`build/bin/tests_01 -ts='ch01 np1' -tc='*safetensors*'`).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tensor.hpp"

namespace penta {

// One tensor of a safetensors file, as its header says.
struct SafeTensor {
    std::string name;
    std::string dtype;        // "F32", "BF16", "F16", ... (the format's names)
    Shape shape;
    uint64_t begin = 0, end = 0;  // byte range within the data section
    int64_t numel() const;
};

// bytes per element of a safetensors dtype name; 0 when the name is not one of the format's dtypes
size_t safetensors_dtype_size(const std::string& dtype);
// our dtype as the format names it (F32, BF16, F16, I32); throws for the others
const char* safetensors_dtype_name(DType d);

class SafetensorsFile {
   public:
    // maps the file and checks its header (see the file comment); throws naming the file and the rule
    explicit SafetensorsFile(const std::string& path);
    ~SafetensorsFile();
    SafetensorsFile(const SafetensorsFile&) = delete;
    SafetensorsFile& operator=(const SafetensorsFile&) = delete;

    const std::string& path() const { return path_; }
    const std::vector<SafeTensor>& tensors() const { return tensors_; }
    const SafeTensor* find(const std::string& name) const;  // nullptr when absent
    const uint8_t* data(const SafeTensor& t) const { return data_ + t.begin; }
    const std::map<std::string, std::string>& metadata() const { return metadata_; }

   private:
    std::string path_;
    const uint8_t* map_ = nullptr;
    size_t size_ = 0;
    const uint8_t* data_ = nullptr;  // first byte after the header
    std::vector<SafeTensor> tensors_;
    std::map<std::string, size_t> index_;
    std::map<std::string, std::string> metadata_;
};

// What a writer needs: the header bytes (padded with spaces to a multiple of 8, as the format allows, so
// the data is aligned) and where each tensor's bytes go in the file. Tensors are stored in the order given.
struct SafetensorsPlan {
    std::string header;              // 8-byte length + JSON + padding
    std::vector<uint64_t> offsets;   // file offset of each tensor's first byte
    uint64_t file_bytes = 0;
};
struct SafetensorsEntry {
    std::string name;
    DType dtype;
    Shape shape;
};
SafetensorsPlan plan_safetensors(const std::vector<SafetensorsEntry>& tensors,
                                 const std::map<std::string, std::string>& metadata);

}  // namespace penta
