// json_strict.hpp — JSON from a file that may be damaged or crafted (a checkpoint's metadata.json, a safetensors
// header), read so that every mistake in it is an error naming the file, the key and the rule.
//
// nlohmann-json alone lets three kinds of bad input through: get<uint64_t>() of -8 is 2^64 - 8 and get<int>()
// of 2^40 is 0 (silent wraps), a string where a number belongs throws a bare "[json.exception.type_error.302]"
// that names no file, and a value nested a million levels deep parses but crashes the first copy or dump()
// (their recursion overflows the stack). So:
//   parse_json_bounded   parses with a limit on the nesting depth (a checkpoint's metadata is 5 deep);
//   JsonField            a value with the path of keys that led to it ("shards[0].pieces[3].offset"): at()
//                        and the typed getters check the type and the range and throw
//                        "FILE: \"shards[0].pieces[3].offset\" must be an integer in [0, 2^63), is -8".
// A getter never converts: 3.0 is not an integer, 1 is not true.
// Used by checkpoint_load.cpp (via checkpoint_format.cpp) and safetensors.cpp. Test:
// tests/00_common/test_file_fuzz.cpp (`build/bin/tests_00 -tc='*fuzz*'`).
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace penta {

constexpr int kJsonMaxDepth = 32;

// bytes [begin, end) of `file` as JSON, nested at most max_depth levels; throws "FILE: not valid JSON: ..." or
// "FILE: nested deeper than N levels"
nlohmann::json parse_json_bounded(const char* begin, const char* end, const std::string& file,
                                  int max_depth = kJsonMaxDepth);

// "an integer -8", "a string \"abc\"", "an array of 3", "an object", "null", ...: what a bad value is, short
std::string json_what(const nlohmann::json& j);

class JsonField {
   public:
    JsonField(const nlohmann::json& j, std::string file, std::string key = "")
        : j_(j), file_(std::move(file)), key_(std::move(key)) {}
    const nlohmann::json& json() const { return j_; }
    const std::string& file() const { return file_; }
    const std::string& key() const { return key_; }  // "" for the root

    bool has(const std::string& key) const { return j_.is_object() && j_.contains(key); }
    JsonField at(const std::string& key) const;  // an object's member: missing, or not an object, throws
    JsonField at(size_t i) const;                // an array's element
    size_t size(size_t max = SIZE_MAX) const;    // an array's length, at most max
    size_t members() const;                      // an object's member count (it must be one)

    int64_t integer(int64_t lo, int64_t hi) const;  // an integer in [lo, hi]
    uint64_t uinteger(uint64_t hi) const;           // an integer in [0, hi] (up to 2^64 - 1)
    double number() const;                          // any finite number
    bool boolean() const;
    std::string string() const;
    void object() const;  // must be an object
    void array() const;   // must be an array

    // throws "FILE: "KEY" MESSAGE" (the root: "FILE: MESSAGE")
    [[noreturn]] void fail(const std::string& message) const;

   private:
    const nlohmann::json& j_;
    std::string file_, key_;
};

}  // namespace penta
