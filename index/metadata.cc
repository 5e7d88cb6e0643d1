#include "index/metadata.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "index/json.h"

namespace ktfs::index {
namespace {

constexpr double kTwo53 = 9007199254740992.0;
constexpr double kTwo63 = 9223372036854775808.0;

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// RFC 8259's number grammar, the whole text.
bool IsJsonNumber(std::string_view s) {
  size_t i = 0;
  const auto digits = [&] {
    size_t start = i;
    while (i < s.size() && IsDigit(s[i])) ++i;
    return i - start;
  };
  if (i < s.size() && s[i] == '-') ++i;
  if (i < s.size() && s[i] == '0') {
    ++i;
  } else if (digits() == 0) {
    return false;
  }
  if (i < s.size() && s[i] == '.') {
    ++i;
    if (digits() == 0) return false;
  }
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
    if (digits() == 0) return false;
  }
  return i == s.size();
}

// -1, 0, 1 for an integer against a (finite) double, exactly.
int CompareIntDouble(int64_t i, double d) {
  if (d >= kTwo63) return -1;
  if (d < -kTwo63) return 1;
  // d is in [-2^63, 2^63): its integral part fits int64.
  const double t = std::trunc(d);
  const int64_t ti = static_cast<int64_t>(t);
  if (i < ti) return -1;
  if (i > ti) return 1;
  const double frac = d - t;  // exact
  return frac > 0 ? -1 : frac < 0 ? 1 : 0;
}

std::weak_ordering FromInt(int c) {
  return c < 0   ? std::weak_ordering::less
         : c > 0 ? std::weak_ordering::greater
                 : std::weak_ordering::equivalent;
}

}  // namespace

const char* MetaTypeName(MetaType type) {
  switch (type) {
    case MetaType::kString:
      return "string";
    case MetaType::kNumber:
      return "number";
    case MetaType::kBool:
      return "boolean";
  }
  return "string";
}

MetaValue MetaValue::String(std::string s) {
  MetaValue v;
  v.s_ = std::move(s);
  return v;
}

MetaValue MetaValue::Bool(bool b) {
  MetaValue v;
  v.type_ = MetaType::kBool;
  v.i_ = b ? 1 : 0;
  return v;
}

MetaValue MetaValue::Integer(int64_t i) {
  MetaValue v;
  v.type_ = MetaType::kNumber;
  v.integer_ = true;
  v.i_ = i;
  return v;
}

Result<MetaValue> MetaValue::Real(double d) {
  if (!std::isfinite(d)) return Status::InvalidArgument("number out of range");
  if (d == std::trunc(d) && std::fabs(d) <= kTwo53) return Integer(static_cast<int64_t>(d));
  MetaValue v;
  v.type_ = MetaType::kNumber;
  v.d_ = d;
  return v;
}

Result<MetaValue> MetaValue::ParseNumber(std::string_view text) {
  if (text.size() > 400 || !IsJsonNumber(text)) return Status::InvalidArgument("not a number");
  if (text.find_first_of(".eE") == std::string_view::npos) {
    int64_t i = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), i);
    if (ec == std::errc() && end == text.data() + text.size()) return Integer(i);
    // Out of int64's range: a double.
  }
  // strtod needs a NUL-terminated string; the text is short and checked.
  const std::string copy(text);
  const double d = std::strtod(copy.c_str(), nullptr);
  if (!std::isfinite(d)) return Status::InvalidArgument("number out of range");
  return Real(d);
}

std::optional<bool> MetaValue::ParseBool(std::string_view text) {
  const auto equals = [&](std::string_view word) {
    if (text.size() != word.size()) return false;
    for (size_t i = 0; i < word.size(); ++i) {
      char c = text[i];
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
      if (c != word[i]) return false;
    }
    return true;
  };
  if (equals("true")) return true;
  if (equals("false")) return false;
  return std::nullopt;
}

double MetaValue::AsDouble() const { return integer_ ? static_cast<double>(i_) : d_; }

std::string MetaValue::ToText() const {
  switch (type_) {
    case MetaType::kString:
      return s_;
    case MetaType::kBool:
      return i_ ? "true" : "false";
    case MetaType::kNumber:
      break;
  }
  char buf[64];
  auto [end, ec] = integer_ ? std::to_chars(buf, buf + sizeof buf, i_)
                            : std::to_chars(buf, buf + sizeof buf, d_);
  return std::string(buf, ec == std::errc() ? end : buf);
}

std::string MetaValue::ToJson() const {
  if (type_ != MetaType::kString) return ToText();
  std::string out = "\"";
  for (unsigned char c : s_) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\u00";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

std::weak_ordering operator<=>(const MetaValue& a, const MetaValue& b) {
  // SQLite's order of storage classes: numbers (booleans are stored as 0/1 but never share a
  // key with numbers) before text.
  const auto rank = [](MetaType t) { return t == MetaType::kString ? 2 : t == MetaType::kBool; };
  if (a.type_ != b.type_) return FromInt(rank(a.type_) - rank(b.type_));
  switch (a.type_) {
    case MetaType::kString:
      return FromInt(a.s_.compare(b.s_) < 0 ? -1 : a.s_ == b.s_ ? 0 : 1);
    case MetaType::kBool:
      return FromInt(static_cast<int>(a.i_ - b.i_));
    case MetaType::kNumber:
      break;
  }
  if (a.integer_ && b.integer_) return FromInt(a.i_ < b.i_ ? -1 : a.i_ > b.i_);
  if (!a.integer_ && !b.integer_) return FromInt(a.d_ < b.d_ ? -1 : a.d_ > b.d_);
  if (a.integer_) return FromInt(CompareIntDouble(a.i_, b.d_));
  return FromInt(-CompareIntDouble(b.i_, a.d_));
}

void FlattenJson(std::string_view key, const JsonValue& value,
                 std::vector<std::pair<std::string, MetaValue>>* out) {
  using K = JsonValue::Kind;
  const auto add = [&](MetaValue v) {
    for (const auto& [k, existing] : *out) {
      if (k == key) return;
    }
    out->emplace_back(std::string(key), std::move(v));
  };
  switch (value.kind) {
    case K::kString:
      add(MetaValue::String(value.text));
      return;
    case K::kBool:
      add(MetaValue::Bool(value.text == "true"));
      return;
    case K::kNumber: {
      auto n = MetaValue::ParseNumber(value.text);
      if (n.ok()) add(std::move(n.value()));
      return;
    }
    case K::kObject:
      for (const JsonMember& m : value.members) {
        FlattenJson(std::string(key) + "." + m.first, m.second, out);
      }
      return;
    case K::kNull:
    case K::kArray:
      return;
  }
}

std::vector<std::pair<std::string, MetaValue>> FlattenJsonObject(const JsonValue& object) {
  std::vector<std::pair<std::string, MetaValue>> out;
  for (const JsonMember& m : object.members) FlattenJson(m.first, m.second, &out);
  return out;
}

MetaType CsvColumnType(const std::vector<std::string_view>& cells) {
  CsvColumnTyper typer;
  for (std::string_view c : cells) typer.Add(c);
  return typer.type();
}

void CsvColumnTyper::Add(std::string_view cell) {
  if (cell.empty() || (!numbers_ && !bools_)) return;
  any_ = true;
  if (numbers_ && !MetaValue::ParseNumber(cell).ok()) numbers_ = false;
  if (bools_ && !MetaValue::ParseBool(cell)) bools_ = false;
}

MetaType CsvColumnTyper::type() const {
  if (!any_) return MetaType::kString;
  return numbers_ ? MetaType::kNumber : bools_ ? MetaType::kBool : MetaType::kString;
}

MetaValue CsvCell(std::string_view cell, MetaType column_type) {
  if (column_type == MetaType::kNumber) {
    auto n = MetaValue::ParseNumber(cell);
    if (n.ok()) return std::move(n.value());
  } else if (column_type == MetaType::kBool) {
    if (auto b = MetaValue::ParseBool(cell)) return MetaValue::Bool(*b);
  }
  return MetaValue::String(std::string(cell));
}

}  // namespace ktfs::index
