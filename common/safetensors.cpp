// safetensors.cpp — reading and planning safetensors files (safetensors.hpp).
// Test: `build/bin/tests_01 -ts='ch01 np1' -tc='*safetensors*'`.
#include "safetensors.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "json_strict.hpp"

namespace penta {

int64_t SafeTensor::numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}

size_t safetensors_dtype_size(const std::string& d) {
    static const std::map<std::string, size_t> sizes = {
        {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E4M3", 1}, {"F8_E5M2", 1}, {"I16", 2}, {"U16", 2}, {"F16", 2},
        {"BF16", 2}, {"I32", 4}, {"U32", 4}, {"F32", 4},     {"F64", 8},     {"I64", 8}, {"U64", 8}};
    auto it = sizes.find(d);
    return it == sizes.end() ? 0 : it->second;
}

const char* safetensors_dtype_name(DType d) {
    switch (d) {
        case DType::f32: return "F32";
        case DType::bf16: return "BF16";
        case DType::f16: return "F16";
        case DType::i32: return "I32";
        default: FAIL("safetensors: tensors of dtype %s are not written (f32, bf16, f16 or i32)", dtype_name(d));
    }
}

namespace {
// the format's own limit (the reference implementation refuses larger headers)
constexpr uint64_t kMaxHeaderBytes = 100u << 20;

uint64_t read_u64_le(const uint8_t* p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}
}  // namespace

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
    const char* p = path.c_str();
    int fd = ::open(p, O_RDONLY);
    CHECK(fd >= 0, "cannot open safetensors file '%s': %s", p, std::strerror(errno));
    struct stat st;
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        ::close(fd);
        FAIL("safetensors file '%s' is not a regular file", p);
    }
    size_ = (size_t)st.st_size;
    if (size_ < 8) {
        ::close(fd);
        FAIL("%s: %zu bytes, shorter than the 8-byte header length that starts every safetensors file", p, size_);
    }
    void* m = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);
    CHECK(m != MAP_FAILED, "cannot map '%s' (%zu bytes): %s", p, size_, std::strerror(errno));
    map_ = (const uint8_t*)m;
    try {
        const uint64_t n = read_u64_le(map_);
        if (n > size_ - 8)
            FAIL("%s: the header length %llu runs past the end of the file (%zu bytes): truncated, or not safetensors", p,
                 (unsigned long long)n, size_);
        if (n > kMaxHeaderBytes) FAIL("%s: header length %llu is over the format's 100 MiB limit", p, (unsigned long long)n);
        data_ = map_ + 8 + n;
        const uint64_t data_bytes = size_ - 8 - n;
        // bounded nesting: a shape of a million nested lists parses, but its dump() in a message would overflow
        // the stack (json_strict.hpp)
        const nlohmann::json h = parse_json_bounded((const char*)map_ + 8, (const char*)map_ + 8 + n,
                                                    path_ + ": the header");
        if (!h.is_object()) FAIL("%s: the header must be a JSON object", p);
        for (auto it = h.begin(); it != h.end(); ++it) {
            const std::string& name = it.key();
            const nlohmann::json& v = it.value();
            if (name == "__metadata__") {
                if (!v.is_object()) FAIL("%s: __metadata__ must be an object of strings", p);
                for (auto m2 = v.begin(); m2 != v.end(); ++m2) {
                    if (!m2.value().is_string()) FAIL("%s: __metadata__ \"%s\" must be a string", p, m2.key().c_str());
                    metadata_[m2.key()] = m2.value().get<std::string>();
                }
                continue;
            }
            const char* nm = name.c_str();
            if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets"))
                FAIL("%s: tensor '%s' needs dtype, shape and data_offsets", p, nm);
            SafeTensor t;
            t.name = name;
            if (!v["dtype"].is_string()) FAIL("%s: tensor '%s': dtype must be a string", p, nm);
            t.dtype = v["dtype"].get<std::string>();
            const size_t esize = safetensors_dtype_size(t.dtype);
            if (esize == 0) FAIL("%s: tensor '%s': dtype \"%s\" is not a safetensors dtype", p, nm, t.dtype.c_str());
            if (!v["shape"].is_array()) FAIL("%s: tensor '%s': shape must be a list", p, nm);
            uint64_t bytes = esize;
            for (const auto& d : v["shape"]) {
                if (!d.is_number_unsigned()) FAIL("%s: tensor '%s': shape %s must hold sizes >= 0", p, nm, v["shape"].dump().c_str());
                const uint64_t s = d.get<uint64_t>();
                if (s > (uint64_t)INT64_MAX || __builtin_mul_overflow(bytes, s, &bytes))
                    FAIL("%s: tensor '%s': shape %s overflows a 64-bit byte count", p, nm, v["shape"].dump().c_str());
                t.shape.push_back((int64_t)s);
            }
            const nlohmann::json& o = v["data_offsets"];
            if (!o.is_array() || o.size() != 2 || !o[0].is_number_unsigned() || !o[1].is_number_unsigned())
                FAIL("%s: tensor '%s': data_offsets %s must be [BEGIN, END], two integers >= 0", p, nm, o.dump().c_str());
            t.begin = o[0].get<uint64_t>(), t.end = o[1].get<uint64_t>();
            if (t.begin > t.end) FAIL("%s: tensor '%s': data_offsets [%llu, %llu] end before they begin", p, nm,
                                      (unsigned long long)t.begin, (unsigned long long)t.end);
            if (t.end > data_bytes)
                FAIL("%s: tensor '%s': data_offsets [%llu, %llu] run past the %llu bytes of data the file has "
                     "(truncated?)", p, nm, (unsigned long long)t.begin, (unsigned long long)t.end,
                     (unsigned long long)data_bytes);
            if (t.end - t.begin != bytes)
                FAIL("%s: tensor '%s': shape %s of %s is %llu bytes, but data_offsets [%llu, %llu] hold %llu", p, nm,
                     shape_str(t.shape).c_str(), t.dtype.c_str(), (unsigned long long)bytes,
                     (unsigned long long)t.begin, (unsigned long long)t.end, (unsigned long long)(t.end - t.begin));
            index_[name] = tensors_.size();
            tensors_.push_back(std::move(t));
        }
        // the data is exactly the tensors, back to back in offset order: no overlap, no hole
        std::vector<const SafeTensor*> by_offset;
        for (const SafeTensor& t : tensors_) by_offset.push_back(&t);
        std::sort(by_offset.begin(), by_offset.end(), [](const SafeTensor* a, const SafeTensor* b) {
            return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
        });
        uint64_t at = 0;
        const SafeTensor* prev = nullptr;
        for (const SafeTensor* t : by_offset) {
            if (t->begin < at)
                FAIL("%s: tensors '%s' and '%s' overlap (bytes %llu.. and ..%llu)", p, prev->name.c_str(), t->name.c_str(),
                     (unsigned long long)t->begin, (unsigned long long)at);
            if (t->begin > at)
                FAIL("%s: %llu bytes before tensor '%s' belong to no tensor (the format leaves no holes)", p,
                     (unsigned long long)(t->begin - at), t->name.c_str());
            at = t->end;
            prev = t;
        }
        if (at != data_bytes)
            FAIL("%s: the tensors end at byte %llu of the data but the file holds %llu (trailing bytes, or a lying "
                 "header)", p, (unsigned long long)at, (unsigned long long)data_bytes);
    } catch (...) {
        ::munmap((void*)map_, size_);
        throw;
    }
}

SafetensorsFile::~SafetensorsFile() {
    if (map_) ::munmap((void*)map_, size_);
}

const SafeTensor* SafetensorsFile::find(const std::string& name) const {
    auto it = index_.find(name);
    return it == index_.end() ? nullptr : &tensors_[it->second];
}

SafetensorsPlan plan_safetensors(const std::vector<SafetensorsEntry>& tensors,
                                 const std::map<std::string, std::string>& metadata) {
    nlohmann::json h = nlohmann::json::object();
    if (!metadata.empty()) h["__metadata__"] = metadata;
    std::vector<uint64_t> begins;
    uint64_t at = 0;
    for (const SafetensorsEntry& t : tensors) {
        uint64_t bytes = dtype_size(t.dtype);
        for (int64_t d : t.shape) bytes *= (uint64_t)d;
        CHECK(!h.contains(t.name), "safetensors: tensor '%s' is listed twice", t.name.c_str());
        h[t.name] = {{"dtype", safetensors_dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {at, at + bytes}}};
        begins.push_back(at);
        at += bytes;
    }
    std::string json = h.dump();
    json.append((8 - json.size() % 8) % 8, ' ');  // the format allows trailing spaces: the data starts aligned
    SafetensorsPlan plan;
    const uint64_t n = json.size();
    for (int i = 0; i < 8; i++) plan.header.push_back((char)((n >> (8 * i)) & 0xff));
    plan.header += json;
    for (uint64_t b : begins) plan.offsets.push_back(plan.header.size() + b);
    plan.file_bytes = plan.header.size() + at;
    return plan;
}

}  // namespace penta
