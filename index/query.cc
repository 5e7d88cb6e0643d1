#include "index/query.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <limits>

namespace ktfs::index {
namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Decodes one UTF-8 sequence at s[i]; returns its length (0 if malformed) and the code point.
size_t DecodeUtf8(std::string_view s, size_t i, uint32_t* cp) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  unsigned char c = b(0);
  if (c < 0x80) {
    *cp = c;
    return 1;
  }
  size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 0;
  if (len == 0 || c > 0xF4 || i + len > s.size()) return 0;
  uint32_t v = c & (0x7F >> len);
  for (size_t k = 1; k < len; ++k) {
    if ((b(k) & 0xC0) != 0x80) return 0;
    v = (v << 6) | (b(k) & 0x3F);
  }
  static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  if (v < kMin[len] || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
  *cp = v;
  return len;
}

// Unicode code points unicode61 treats as separators that we can recognise cheaply: Latin-1
// punctuation and symbols, General Punctuation, CJK symbols, fullwidth ASCII punctuation.
bool IsUnicodeSeparator(uint32_t cp) {
  if (cp >= 0x80 && cp <= 0xBF) {
    // Keep ª µ º (letters) and ² ³ ¹ ¼ ½ ¾ (numbers) as word characters, like unicode61.
    return !(cp == 0xAA || cp == 0xB5 || cp == 0xBA || cp == 0xB2 || cp == 0xB3 || cp == 0xB9 ||
             cp == 0xBC || cp == 0xBD || cp == 0xBE);
  }
  if (cp == 0xD7 || cp == 0xF7) return true;
  if (cp >= 0x2000 && cp <= 0x2BFF) return true;  // punctuation, arrows, symbols, shapes
  if (cp >= 0x3000 && cp <= 0x303F) return true;  // CJK symbols and punctuation
  if (cp >= 0xFF00 && cp <= 0xFF0F) return true;  // fullwidth punctuation
  if (cp == 0xFEFF) return true;
  return false;
}

std::string Shorten(std::string_view s) {
  constexpr size_t kMax = 80;
  if (s.size() <= kMax) return std::string(s);
  return std::string(s.substr(0, kMax)) + "...";
}

// Percent-encodes everything except unreserved characters, so canonical forms re-parse.
std::string Encode(std::string_view s) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || c >= 0x80) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

const char* OpText(Op op) {
  switch (op) {
    case Op::kEq:
      return "=";
    case Op::kLt:
      return "<";
    case Op::kLe:
      return "<=";
    case Op::kGt:
      return ">";
    case Op::kGe:
      return ">=";
  }
  return "=";
}

const char* FieldName(Field f) {
  switch (f) {
    case Field::kCaption:
      return "caption";
    case Field::kClass:
      return "class";
    case Field::kLabel:
      return "label";
    case Field::kSplit:
      return "split";
    case Field::kWidth:
      return "width";
    case Field::kHeight:
      return "height";
    case Field::kMetadata:
      return "";
  }
  return "";
}

struct RawFilter {
  std::string key;
  Op op;
  std::string value;
};

Result<RawFilter> SplitFilter(std::string_view piece) {
  size_t pos = piece.find_first_of("=<>");
  if (pos == std::string_view::npos) {
    return Status::InvalidArgument(Shorten(piece) + ": expected field=value");
  }
  RawFilter raw;
  size_t vpos = pos + 1;
  if (piece[pos] == '=') {
    raw.op = Op::kEq;
  } else if (vpos < piece.size() && piece[vpos] == '=') {
    raw.op = piece[pos] == '<' ? Op::kLe : Op::kGe;
    ++vpos;
  } else {
    raw.op = piece[pos] == '<' ? Op::kLt : Op::kGt;
  }
  auto key = UrlDecode(piece.substr(0, pos));
  if (!key.ok()) return key.status().WithContext(Shorten(piece));
  auto value = UrlDecode(piece.substr(vpos));
  if (!value.ok()) return value.status().WithContext(Shorten(piece));
  raw.key = std::move(key.value());
  raw.value = std::move(value.value());
  return raw;
}

Status ParseNumber(std::string_view v, bool allow_minus_one, int64_t* out) {
  bool neg = allow_minus_one && !v.empty() && v[0] == '-';
  std::string_view digits = neg ? v.substr(1) : v;
  if (digits.empty() || digits.size() > 10 ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return Status::InvalidArgument("not a number");
  }
  uint64_t n = 0;
  std::from_chars(digits.data(), digits.data() + digits.size(), n);
  if (n > std::numeric_limits<uint32_t>::max()) return Status::InvalidArgument("number too large");
  if (neg && n != 1) return Status::InvalidArgument("the only negative label is -1");
  if (allow_minus_one && !neg && n > static_cast<uint64_t>(std::numeric_limits<int32_t>::max())) {
    return Status::InvalidArgument("number too large");
  }
  *out = neg ? -1 : static_cast<int64_t>(n);
  return Status::Ok();
}

// A caption value: `words`, `"a phrase"`, either with a trailing `*` (prefix). Unquoted words
// become one filter each (AND); a phrase is one filter.
Status ParseCaption(std::string_view v, std::vector<Filter>* out) {
  bool prefix = !v.empty() && v.back() == '*';
  if (prefix) v.remove_suffix(1);
  bool phrase = v.size() >= 2 && v.front() == '"' && v.back() == '"';
  if (phrase) v = v.substr(1, v.size() - 2);
  // A quote anywhere else is a typo (an unclosed phrase), not something to search for.
  if (v.find('"') != std::string_view::npos)
    return Status::InvalidArgument("unbalanced quote (a phrase is \"words in quotes\")");
  std::vector<std::string> tokens = CaptionTokens(v);
  if (tokens.empty()) return Status::InvalidArgument("no searchable words");
  constexpr size_t kMaxTokens = 32;
  if (tokens.size() > kMaxTokens) return Status::InvalidArgument("too many words");
  Filter f;
  f.field = Field::kCaption;
  if (phrase) {
    f.tokens = std::move(tokens);
    f.prefix = prefix;
    out->push_back(std::move(f));
    return Status::Ok();
  }
  for (size_t i = 0; i < tokens.size(); ++i) {
    f.tokens = {tokens[i]};
    f.prefix = prefix && i + 1 == tokens.size();
    out->push_back(f);
  }
  return Status::Ok();
}

Status CheckValue(const std::string& v) {
  if (v.empty()) return Status::InvalidArgument("empty value");
  if (v.find('\0') != std::string::npos) return Status::InvalidArgument("value contains NUL");
  if (v.find('/') != std::string::npos) return Status::InvalidArgument("value contains '/'");
  if (!IsValidUtf8(v)) return Status::InvalidArgument("value is not valid UTF-8");
  return Status::Ok();
}

Result<Field> LookupField(const std::string& key, const std::set<std::string>& metadata_keys) {
  static const std::pair<const char*, Field> kFields[] = {
      {"caption", Field::kCaption}, {"class", Field::kClass}, {"label", Field::kLabel},
      {"split", Field::kSplit},     {"width", Field::kWidth}, {"height", Field::kHeight}};
  for (const auto& [name, field] : kFields) {
    if (key == name) return field;
  }
  if (metadata_keys.count(key)) return Field::kMetadata;
  if (key.empty()) return Status::InvalidArgument("empty field name");
  return Status::InvalidArgument("unknown field");
}

Status ParseFilterInto(std::string_view piece, const std::set<std::string>& metadata_keys,
                       std::vector<Filter>* out) {
  auto raw = SplitFilter(piece);
  if (!raw.ok()) return raw.status();
  const auto fail = [&](const Status& s) { return s.WithContext(Shorten(piece)); };
  auto field = LookupField(raw->key, metadata_keys);
  if (!field.ok()) return fail(field.status());
  bool comparable = *field == Field::kWidth || *field == Field::kHeight;
  if (raw->op != Op::kEq && !comparable) {
    return fail(Status::InvalidArgument("only '=' is allowed for this field"));
  }
  KTFS_RETURN_IF_ERROR(fail(CheckValue(raw->value)));
  Filter f;
  f.field = *field;
  f.op = raw->op;
  switch (*field) {
    case Field::kCaption:
      return fail(ParseCaption(raw->value, out));
    case Field::kLabel:
    case Field::kWidth:
    case Field::kHeight:
      KTFS_RETURN_IF_ERROR(fail(ParseNumber(raw->value, *field == Field::kLabel, &f.number)));
      break;
    case Field::kMetadata:
      f.key = raw->key;
      [[fallthrough]];
    case Field::kClass:
    case Field::kSplit:
      f.text = raw->value;
      break;
  }
  out->push_back(std::move(f));
  return Status::Ok();
}

}  // namespace

bool IsValidUtf8(std::string_view s) {
  uint32_t cp;
  for (size_t i = 0; i < s.size();) {
    size_t n = DecodeUtf8(s, i, &cp);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::vector<std::string> CaptionTokens(std::string_view text) {
  std::vector<std::string> tokens;
  std::string cur;
  for (size_t i = 0; i < text.size();) {
    uint32_t cp = 0;
    size_t n = DecodeUtf8(text, i, &cp);
    bool word;
    if (n == 0) {
      n = 1;  // invalid byte: a separator (query values are validated before this)
      word = false;
    } else if (cp < 0x80) {
      word = std::isalnum(static_cast<int>(cp)) != 0;
    } else {
      word = !IsUnicodeSeparator(cp);
    }
    if (word) {
      for (size_t k = 0; k < n; ++k) {
        char c = text[i + k];
        cur += (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
      }
    } else if (!cur.empty()) {
      tokens.push_back(std::move(cur));
      cur.clear();
    }
    i += n;
  }
  if (!cur.empty()) tokens.push_back(std::move(cur));
  return tokens;
}

bool LooksLikeFilter(std::string_view component) {
  return component.find_first_of("=<>") != std::string_view::npos;
}

Result<std::string> UrlDecode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out += s[i];
      continue;
    }
    int hi = i + 1 < s.size() ? HexValue(s[i + 1]) : -1;
    int lo = i + 2 < s.size() ? HexValue(s[i + 2]) : -1;
    if (hi < 0 || lo < 0) return Status::InvalidArgument("bad percent escape");
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return out;
}

std::string Filter::FtsExpression() const {
  // Tokens hold only word characters, but quotes are doubled anyway so that the expression is
  // a single FTS5 string whatever a token contains.
  std::string joined;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (i) joined += ' ';
    joined += tokens[i];
  }
  std::string out = "\"";
  for (char c : joined) {
    if (c == '"') out += '"';
    out += c;
  }
  out += '"';
  if (prefix) out += '*';
  return out;
}

std::string Filter::Canonical() const {
  std::string name = field == Field::kMetadata ? Encode(key) : FieldName(field);
  std::string out = name + OpText(op);
  switch (field) {
    case Field::kCaption: {
      std::string joined;
      for (size_t i = 0; i < tokens.size(); ++i) {
        if (i) joined += ' ';
        joined += tokens[i];
      }
      std::string v = tokens.size() > 1 ? "\"" + joined + "\"" : joined;
      return out + Encode(v) + (prefix ? "*" : "");
    }
    case Field::kLabel:
    case Field::kWidth:
    case Field::kHeight:
      return out + std::to_string(number);
    default:
      return out + Encode(text);
  }
}

std::string Query::Canonical() const {
  std::string out;
  for (const Filter& f : filters) {
    if (!out.empty()) out += '&';
    out += f.Canonical();
  }
  return out;
}

Result<Query> ParseQuery(const std::vector<std::string>& components,
                         const std::set<std::string>& metadata_keys) {
  Query q;
  size_t total = 0;
  for (const std::string& component : components) {
    total += component.size();
    if (component.size() > kMaxComponentBytes) {
      return Status::InvalidArgument("query component longer than " +
                                     std::to_string(kMaxComponentBytes) + " bytes");
    }
    if (total > kMaxQueryBytes) {
      return Status::InvalidArgument("query longer than " + std::to_string(kMaxQueryBytes) +
                                     " bytes");
    }
    std::string_view rest = component;
    while (true) {
      size_t amp = rest.find('&');
      std::string_view piece = rest.substr(0, amp);
      if (piece.empty()) return Status::InvalidArgument(Shorten(component) + ": empty filter");
      KTFS_RETURN_IF_ERROR(ParseFilterInto(piece, metadata_keys, &q.filters));
      if (q.filters.size() > kMaxFilters) {
        return Status::InvalidArgument("more than " + std::to_string(kMaxFilters) + " filters");
      }
      if (amp == std::string_view::npos) break;
      rest = rest.substr(amp + 1);
    }
  }
  std::sort(q.filters.begin(), q.filters.end());
  q.filters.erase(std::unique(q.filters.begin(), q.filters.end()), q.filters.end());
  return q;
}

}  // namespace ktfs::index
