// json_strict.cpp — see json_strict.hpp.
#include "json_strict.hpp"

#include "core.hpp"

namespace penta {

namespace {
struct TooDeep {};  // thrown out of the parser's callback, caught below
}  // namespace

nlohmann::json parse_json_bounded(const char* begin, const char* end, const std::string& file, int max_depth) {
    // the callback sees every value with its depth as the parser builds it; throwing stops the parse, and the
    // partial value is freed (nlohmann frees without recursion since 3.10)
    auto limit = [max_depth](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
        if (depth > max_depth) throw TooDeep{};
        return true;
    };
    try {
        return nlohmann::json::parse(begin, end, limit);
    } catch (const TooDeep&) {
        FAIL("%s is nested deeper than %d levels (no field of the format is: a damaged or crafted file)", file.c_str(),
             max_depth);
    } catch (const nlohmann::json::exception& e) {
        FAIL("%s is not valid JSON: %s", file.c_str(), e.what());
    }
}

std::string json_what(const nlohmann::json& j) {
    switch (j.type()) {
        case nlohmann::json::value_t::null: return "null";
        case nlohmann::json::value_t::boolean: return j.get<bool>() ? "true" : "false";
        case nlohmann::json::value_t::number_integer:
        case nlohmann::json::value_t::number_unsigned: return "the integer " + j.dump();
        case nlohmann::json::value_t::number_float: return "the number " + j.dump();
        case nlohmann::json::value_t::string: {
            const std::string& s = j.get_ref<const std::string&>();
            return "the string " + nlohmann::json(s.size() > 40 ? s.substr(0, 40) + "..." : s).dump();
        }
        case nlohmann::json::value_t::array: return strfmt("an array of %zu", j.size());
        case nlohmann::json::value_t::object: return strfmt("an object of %zu keys", j.size());
        default: return "a binary value";
    }
}

void JsonField::fail(const std::string& message) const {
    if (key_.empty()) FAIL("%s: %s", file_.c_str(), message.c_str());
    FAIL("%s: \"%s\" %s", file_.c_str(), key_.c_str(), message.c_str());
}

void JsonField::object() const {
    if (!j_.is_object()) fail("must be an object, is " + json_what(j_));
}

void JsonField::array() const {
    if (!j_.is_array()) fail("must be an array, is " + json_what(j_));
}

JsonField JsonField::at(const std::string& key) const {
    object();
    const std::string path = key_.empty() ? key : key_ + "." + key;
    const auto it = j_.find(key);
    if (it == j_.end()) JsonField(j_, file_, path).fail("is missing");
    return JsonField(*it, file_, path);
}

JsonField JsonField::at(size_t i) const {
    array();
    const std::string path = strfmt("%s[%zu]", key_.c_str(), i);
    if (i >= j_.size()) JsonField(j_, file_, path).fail(strfmt("is missing (the array has %zu)", j_.size()));
    return JsonField(j_[i], file_, path);
}

size_t JsonField::size(size_t max) const {
    array();
    if (j_.size() > max) fail(strfmt("has %zu elements, at most %zu are allowed", j_.size(), max));
    return j_.size();
}

size_t JsonField::members() const {
    object();
    return j_.size();
}

int64_t JsonField::integer(int64_t lo, int64_t hi) const {
    // a negative integer is number_integer, one above 2^63 - 1 number_unsigned: both compared without a wrap
    const bool in = (j_.is_number_integer() && !j_.is_number_unsigned() && j_.get<int64_t>() >= lo &&
                     j_.get<int64_t>() <= hi) ||
                    (j_.is_number_unsigned() && j_.get<uint64_t>() <= (uint64_t)INT64_MAX &&
                     (int64_t)j_.get<uint64_t>() >= lo && (int64_t)j_.get<uint64_t>() <= hi);
    if (!in) fail(strfmt("must be an integer in [%lld, %lld], is ", (long long)lo, (long long)hi) + json_what(j_));
    return j_.is_number_unsigned() ? (int64_t)j_.get<uint64_t>() : j_.get<int64_t>();
}

uint64_t JsonField::uinteger(uint64_t hi) const {
    const bool in = (j_.is_number_unsigned() && j_.get<uint64_t>() <= hi) ||
                    (j_.is_number_integer() && !j_.is_number_unsigned() && j_.get<int64_t>() >= 0 &&
                     (uint64_t)j_.get<int64_t>() <= hi);
    if (!in) fail(strfmt("must be an integer in [0, %llu], is ", (unsigned long long)hi) + json_what(j_));
    return j_.is_number_unsigned() ? j_.get<uint64_t>() : (uint64_t)j_.get<int64_t>();
}

double JsonField::number() const {
    if (!j_.is_number() || !std::isfinite(j_.get<double>())) fail("must be a finite number, is " + json_what(j_));
    return j_.get<double>();
}

bool JsonField::boolean() const {
    if (!j_.is_boolean()) fail("must be true or false, is " + json_what(j_));
    return j_.get<bool>();
}

std::string JsonField::string() const {
    if (!j_.is_string()) fail("must be a string, is " + json_what(j_));
    return j_.get<std::string>();
}

}  // namespace penta
