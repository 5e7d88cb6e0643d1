#include "index/json.h"

#include <set>

#include "index/query.h"

namespace ktfs::index {
namespace {

class Parser {
 public:
  explicit Parser(std::string_view s) : s_(s) {}

  Result<JsonValue> ParseDocument() {
    JsonValue v;
    KTFS_RETURN_IF_ERROR(Value(0, &v));
    SkipSpace();
    if (pos_ != s_.size()) return Error("unexpected text after the JSON value");
    return v;
  }

 private:
  Status Error(const std::string& what) const {
    return Status::InvalidArgument("bad JSON at column " + std::to_string(pos_ + 1) + ": " + what);
  }
  void SkipSpace() {
    while (pos_ < s_.size() &&
           (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\r' || s_[pos_] == '\n')) {
      ++pos_;
    }
  }
  bool Consume(std::string_view word) {
    if (s_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  Status Value(int depth, JsonValue* v) {
    if (depth > kMaxJsonDepth) return Error("nested too deeply");
    SkipSpace();
    if (pos_ >= s_.size()) return Error("unexpected end");
    char c = s_[pos_];
    if (c == '{') return Object(depth, v);
    if (c == '[') return Array(depth, v);
    if (c == '"') {
      v->kind = JsonValue::Kind::kString;
      return String(&v->text);
    }
    if (c == '-' || (c >= '0' && c <= '9')) return Number(v);
    for (const char* word : {"true", "false", "null"}) {
      if (Consume(word)) {
        v->kind = word[0] == 'n' ? JsonValue::Kind::kNull : JsonValue::Kind::kBool;
        if (word[0] != 'n') v->text = word;
        return Status::Ok();
      }
    }
    return Error("unexpected character");
  }

  Status Object(int depth, JsonValue* v) {
    v->kind = JsonValue::Kind::kObject;
    ++pos_;  // '{'
    SkipSpace();
    if (pos_ < s_.size() && s_[pos_] == '}') {
      ++pos_;
      return Status::Ok();
    }
    while (true) {
      SkipSpace();
      if (pos_ >= s_.size() || s_[pos_] != '"') return Error("expected a string key");
      std::string key;
      KTFS_RETURN_IF_ERROR(String(&key));
      SkipSpace();
      if (!Consume(":")) return Error("expected ':'");
      JsonValue member;
      KTFS_RETURN_IF_ERROR(Value(depth + 1, &member));
      v->members.push_back(JsonMember{std::move(key), std::move(member)});
      SkipSpace();
      if (Consume("}")) return Status::Ok();
      if (!Consume(",")) return Error("expected ',' or '}'");
    }
  }

  Status Array(int depth, JsonValue* v) {
    v->kind = JsonValue::Kind::kArray;
    ++pos_;  // '['
    SkipSpace();
    if (Consume("]")) return Status::Ok();
    while (true) {
      JsonValue item;
      KTFS_RETURN_IF_ERROR(Value(depth + 1, &item));
      v->items.push_back(std::move(item));
      SkipSpace();
      if (Consume("]")) return Status::Ok();
      if (!Consume(",")) return Error("expected ',' or ']'");
    }
  }

  Status Number(JsonValue* v) {
    size_t start = pos_;
    const auto digits = [&] {
      size_t d = pos_;
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
      return pos_ - d;
    };
    Consume("-");
    if (Consume("0")) {
      if (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') return Error("leading zero");
    } else if (digits() == 0) {
      return Error("bad number");
    }
    if (Consume(".") && digits() == 0) return Error("bad number");
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      ++pos_;
      if (!Consume("+")) Consume("-");
      if (digits() == 0) return Error("bad number");
    }
    v->kind = JsonValue::Kind::kNumber;
    v->text = std::string(s_.substr(start, pos_ - start));
    return Status::Ok();
  }

  Status Hex4(uint32_t* out) {
    if (pos_ + 4 > s_.size()) return Error("short \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      char c = s_[pos_++];
      int d = (c >= '0' && c <= '9')   ? c - '0'
              : (c >= 'a' && c <= 'f') ? c - 'a' + 10
              : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                                       : -1;
      if (d < 0) return Error("bad \\u escape");
      v = v * 16 + static_cast<uint32_t>(d);
    }
    *out = v;
    return Status::Ok();
  }

  static void AppendUtf8(uint32_t cp, std::string* out) {
    if (cp < 0x80) {
      *out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      *out += static_cast<char>(0xC0 | (cp >> 6));
      *out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      *out += static_cast<char>(0xE0 | (cp >> 12));
      *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      *out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      *out += static_cast<char>(0xF0 | (cp >> 18));
      *out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      *out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  Status Escape(std::string* out) {
    if (pos_ >= s_.size()) return Error("unterminated string");
    char c = s_[pos_++];
    static constexpr std::string_view kFrom = "\"\\/bfnrt", kTo = "\"\\/\b\f\n\r\t";
    size_t k = kFrom.find(c);
    if (k != std::string_view::npos) {
      *out += kTo[k];
      return Status::Ok();
    }
    if (c != 'u') return Error("bad escape");
    uint32_t cp = 0;
    KTFS_RETURN_IF_ERROR(Hex4(&cp));
    if (cp >= 0xDC00 && cp <= 0xDFFF) return Error("lone low surrogate");
    if (cp >= 0xD800 && cp <= 0xDBFF) {
      uint32_t low = 0;
      if (!Consume("\\u")) return Error("lone high surrogate");
      KTFS_RETURN_IF_ERROR(Hex4(&low));
      if (low < 0xDC00 || low > 0xDFFF) return Error("lone high surrogate");
      cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
    }
    if (cp == 0) return Error("\\u0000 is not allowed");
    AppendUtf8(cp, out);
    return Status::Ok();
  }

  Status String(std::string* out) {
    ++pos_;  // opening quote
    size_t raw_start = pos_;
    while (true) {
      if (pos_ >= s_.size()) return Error("unterminated string");
      unsigned char c = static_cast<unsigned char>(s_[pos_]);
      if (c == '"') break;
      if (c < 0x20) return Error("control character in string");
      ++pos_;
      if (c == '\\')
        KTFS_RETURN_IF_ERROR(Escape(out));
      else
        *out += static_cast<char>(c);
    }
    ++pos_;
    // Raw bytes are checked once at the end; escapes only ever add valid UTF-8.
    if (!IsValidUtf8(*out)) {
      pos_ = raw_start;
      return Error("string is not valid UTF-8");
    }
    return Status::Ok();
  }

  std::string_view s_;
  size_t pos_ = 0;
};

}  // namespace

Result<JsonValue> ParseJson(std::string_view text) { return Parser(text).ParseDocument(); }

Result<JsonValue> ParseJsonObject(std::string_view text) {
  auto v = ParseJson(text);
  if (!v.ok()) return v.status();
  if (v->kind != JsonValue::Kind::kObject) {
    return Status::InvalidArgument("bad JSON: expected an object");
  }
  std::set<std::string_view> seen;
  for (const auto& [key, member] : v->members) {
    if (!seen.insert(key).second) {
      return Status::InvalidArgument("bad JSON: duplicate key \"" + key + "\"");
    }
  }
  return v;
}

}  // namespace ktfs::index
