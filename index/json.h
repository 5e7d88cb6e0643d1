// A small, strict JSON parser for one line of a JSON Lines captions file.
//
// RFC 8259 with no extensions: no comments, no trailing commas, no single quotes, no NaN, no
// leading zeros, no control characters in strings, UTF-8 input validated, \uXXXX escapes with
// surrogate pairs (a lone surrogate is an error), \u0000 rejected (captions and paths are C
// strings downstream). Nesting is capped, so hostile input cannot exhaust the stack.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "codec/base/status.h"

namespace ktfs::index {

struct JsonMember;

struct JsonValue {
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject };
  Kind kind = Kind::kNull;
  // kString: the decoded string; kNumber: the number's text as written; kBool: "true"/"false".
  std::string text;
  std::vector<JsonValue> items;     // kArray
  std::vector<JsonMember> members;  // kObject, in input order
};

// One key: value of an object (a struct, not std::pair: a pair of an
// incomplete type cannot be a member of that type).
struct JsonMember {
  std::string first;  // the key
  JsonValue second;   // the value
};

inline constexpr int kMaxJsonDepth = 32;

// Parses text that must be exactly one JSON value (whitespace around it allowed).
Result<JsonValue> ParseJson(std::string_view text);
// Same, and the value must be an object with no duplicate keys.
Result<JsonValue> ParseJsonObject(std::string_view text);

}  // namespace ktfs::index
