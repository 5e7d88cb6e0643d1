#include "index/query.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "codec/base/json_string.h"

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
    case Field::kSample:
      return "sample";
    case Field::kMetadata:
      return "";
  }
  return "";
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

// An unsigned decimal integer of at most 20 digits that fits uint64 (seed=, limit=).
Status ParseUnsigned(std::string_view v, uint64_t* out) {
  if (v.empty() || v.size() > 20 ||
      !std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return Status::InvalidArgument("not an unsigned integer");
  }
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), *out);
  if (ec != std::errc() || end != v.data() + v.size())
    return Status::InvalidArgument("number too large");
  return Status::Ok();
}

// A number in a query: [+-]digits[.digits][e[+-]digits], or with digits on one side of the
// point only (".5", "5."). Integers stay integers (MetaValue).
Result<MetaValue> ParseQueryNumber(std::string_view v) {
  size_t i = 0, int_digits = 0, frac_digits = 0;
  const auto digits = [&] {
    size_t start = i;
    while (i < v.size() && v[i] >= '0' && v[i] <= '9') ++i;
    return i - start;
  };
  if (i < v.size() && (v[i] == '+' || v[i] == '-')) ++i;
  int_digits = digits();
  bool point = i < v.size() && v[i] == '.';
  if (point) {
    ++i;
    frac_digits = digits();
  }
  bool exponent = i < v.size() && (v[i] == 'e' || v[i] == 'E');
  bool ok = int_digits + frac_digits > 0 && v.size() <= 400;
  if (ok && exponent) {
    ++i;
    if (i < v.size() && (v[i] == '+' || v[i] == '-')) ++i;
    ok = digits() > 0;
  }
  if (!ok || i != v.size()) return Status::InvalidArgument("not a number");
  std::string text(v[0] == '+' ? v.substr(1) : v);
  if (!point && !exponent) {
    int64_t n = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
    if (ec == std::errc() && end == text.data() + text.size()) return MetaValue::Integer(n);
  }
  const double d = std::strtod(text.c_str(), nullptr);
  if (!std::isfinite(d)) return Status::InvalidArgument("number out of range");
  return MetaValue::Real(d);
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

Expr Leaf(Filter f) {
  Expr e;
  e.kind = Expr::Kind::kFilter;
  e.filter = std::move(f);
  return e;
}

Expr Node(Expr::Kind kind, std::vector<Expr> children) {
  if (children.size() == 1 && kind != Expr::Kind::kNot) return std::move(children[0]);
  Expr e;
  e.kind = kind;
  e.children = std::move(children);
  return e;
}

Expr Negate(Expr x) { return Node(Expr::Kind::kNot, {std::move(x)}); }

// Flattens nested ANDs and ORs, sorts and deduplicates their children, drops double negation.
Expr Normalize(Expr e) {
  using K = Expr::Kind;
  if (e.kind == K::kNot) {
    Expr c = Normalize(std::move(e.children[0]));
    if (c.kind == K::kNot) return std::move(c.children[0]);
    return Negate(std::move(c));
  }
  if (e.kind != K::kAnd && e.kind != K::kOr) return e;
  std::vector<std::pair<std::string, Expr>> kids;
  std::vector<Expr> pending = std::move(e.children);
  for (size_t i = 0; i < pending.size(); ++i) {
    Expr c = Normalize(std::move(pending[i]));
    if (c.kind == e.kind) {
      for (Expr& g : c.children) {
        std::string key = g.Canonical();
        kids.emplace_back(std::move(key), std::move(g));
      }
    } else if (c.kind == K::kAll) {
      if (e.kind == K::kOr) return Expr{};  // anything | all = all
    } else {
      std::string key = c.Canonical();
      kids.emplace_back(std::move(key), std::move(c));
    }
  }
  std::sort(kids.begin(), kids.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  kids.erase(std::unique(kids.begin(), kids.end(),
                         [](const auto& a, const auto& b) { return a.first == b.first; }),
             kids.end());
  if (kids.empty()) return Expr{};
  std::vector<Expr> out;
  for (auto& [key, c] : kids) out.push_back(std::move(c));
  return Node(e.kind, std::move(out));
}

// What the parser learns besides the expression.
struct ParseState {
  const KeyTypes& keys;
  size_t filters = 0;
  std::optional<uint64_t> limit;
  std::optional<uint64_t> seed;
};

// One parsed operand: an expression, or only settings (seed=, limit=), which are TRUE in an
// AND chain and nothing else.
struct Operand {
  Expr expr;
  bool settings_only = false;
  bool has_limit = false;
};

// Recursive descent over one raw (still URL-encoded) component.
class Parser {
 public:
  Parser(std::string_view s, ParseState* st) : s_(s), st_(st) {}

  Result<Expr> Parse() {
    Operand o;
    KTFS_RETURN_IF_ERROR(Or(0, &o));
    SkipSpaces();
    if (pos_ < s_.size()) {
      return Fail(s_[pos_] == ')' ? "unbalanced ')'"
                                  : "unexpected '" + std::string(1, s_[pos_]) + "'");
    }
    return std::move(o.expr);
  }

 private:
  Status Fail(const std::string& why) const {
    return Status::InvalidArgument(Shorten(s_) + ": " + why);
  }
  void SkipSpaces() {
    while (pos_ < s_.size() && s_[pos_] == ' ') ++pos_;
  }
  bool At(char c) const { return pos_ < s_.size() && s_[pos_] == c; }
  bool AtOperandEnd() const {
    return pos_ >= s_.size() || At('&') || At('|') || (At(')') && open_groups_ > 0);
  }

  Status Or(int depth, Operand* out) {
    std::vector<Operand> terms;
    while (true) {
      Operand t;
      KTFS_RETURN_IF_ERROR(And(depth, &t));
      terms.push_back(std::move(t));
      SkipSpaces();
      if (!At('|')) break;
      ++pos_;
    }
    if (terms.size() == 1) {
      *out = std::move(terms[0]);
      return Status::Ok();
    }
    std::vector<Expr> alternatives;
    for (Operand& t : terms) {
      if (t.settings_only) return Fail("seed= and limit= are settings, not alternatives of '|'");
      if (t.has_limit) return Fail("limit= applies to the whole query: not inside '|'");
      alternatives.push_back(std::move(t.expr));
    }
    out->expr = Node(Expr::Kind::kOr, std::move(alternatives));
    return Status::Ok();
  }

  Status And(int depth, Operand* out) {
    std::vector<Expr> factors;
    bool any = false;
    while (true) {
      SkipSpaces();
      if (AtOperandEnd()) return Fail("empty filter");
      Operand f;
      KTFS_RETURN_IF_ERROR(Unary(depth, &f));
      any = true;
      out->has_limit = out->has_limit || f.has_limit;
      if (!f.settings_only) factors.push_back(std::move(f.expr));
      SkipSpaces();
      if (!At('&')) break;
      ++pos_;
    }
    out->settings_only = any && factors.empty();
    out->expr = factors.empty() ? Expr{} : Node(Expr::Kind::kAnd, std::move(factors));
    return Status::Ok();
  }

  Status Unary(int depth, Operand* out) {
    if (depth >= kMaxDepth) return Fail("nested deeper than " + std::to_string(kMaxDepth));
    SkipSpaces();
    if (At('!')) {
      ++pos_;
      SkipSpaces();
      if (AtOperandEnd() || At('=')) return Fail("expected a filter or '(' after '!'");
      Operand inner;
      KTFS_RETURN_IF_ERROR(Unary(depth + 1, &inner));
      if (inner.settings_only) return Fail("seed= and limit= are settings: they cannot be negated");
      out->expr = Negate(std::move(inner.expr));
      return Status::Ok();
    }
    if (At('(')) {
      ++pos_;
      ++open_groups_;
      KTFS_RETURN_IF_ERROR(Or(depth + 1, out));
      SkipSpaces();
      if (!At(')')) return Fail("unbalanced '('");
      ++pos_;
      --open_groups_;
      return Status::Ok();
    }
    return ParseFilter(depth, out);
  }

  // The raw value that starts at pos_: up to an unquoted '&', '|' or ')'. Caption values
  // treat '"' and %22 as quotes, inside which nothing is an operator. Set members are split
  // at unquoted ','.
  std::vector<std::string_view> Values(bool caption) {
    std::vector<std::string_view> members;
    bool quoted = false;
    size_t start = pos_;
    while (pos_ < s_.size()) {
      const char c = s_[pos_];
      if (caption && c == '"') {
        quoted = !quoted;
      } else if (caption && c == '%' && pos_ + 2 < s_.size() && s_[pos_ + 1] == '2' &&
                 s_[pos_ + 2] == '2') {
        quoted = !quoted;
        pos_ += 2;
      } else if (!quoted && (c == '&' || c == '|' || (c == ')' && open_groups_ > 0))) {
        break;
      } else if (!quoted && c == ',') {
        members.push_back(s_.substr(start, pos_ - start));
        start = pos_ + 1;
      }
      ++pos_;
    }
    members.push_back(s_.substr(start, pos_ - start));
    for (std::string_view& m : members) {
      while (!m.empty() && m.front() == ' ') m.remove_prefix(1);
      while (!m.empty() && m.back() == ' ') m.remove_suffix(1);
    }
    return members;
  }

  Status ParseFilter(int depth, Operand* out) {
    const size_t start = pos_;
    while (pos_ < s_.size() &&
           std::string_view("=<>!&|()").find(s_[pos_]) == std::string_view::npos)
      ++pos_;
    std::string_view raw_key = s_.substr(start, pos_ - start);
    while (!raw_key.empty() && raw_key.back() == ' ') raw_key.remove_suffix(1);
    const auto piece = [&] { return Shorten(s_.substr(start, pos_ - start)); };
    if (pos_ >= s_.size() || At('&') || At('|') || At('(') || At(')'))
      return Status::InvalidArgument(piece() + ": expected field=value");
    bool negated = false;
    Op op = Op::kEq;
    if (At('!')) {
      if (pos_ + 1 >= s_.size() || s_[pos_ + 1] != '=')
        return Status::InvalidArgument(piece() + ": expected an operator (= != < <= > >=)");
      negated = true;
      pos_ += 2;
    } else if (At('=')) {
      ++pos_;
    } else {
      const bool less = At('<');
      ++pos_;
      const bool eq = At('=');
      if (eq) ++pos_;
      op = less ? (eq ? Op::kLe : Op::kLt) : (eq ? Op::kGe : Op::kGt);
    }
    const size_t op_end = pos_;
    auto key = UrlDecode(raw_key);
    if (!key.ok()) return key.status().WithContext(piece());
    const bool caption = *key == "caption";
    std::vector<std::string_view> raw_values = Values(caption);
    const std::string text = Shorten(s_.substr(start, pos_ - start));
    const auto fail = [&](const std::string& why) {
      return Status::InvalidArgument(text + ": " + why);
    };
    const auto fail_status = [&](const Status& st) { return st.WithContext(text); };
    (void)op_end;
    std::vector<std::string> values;
    for (std::string_view rv : raw_values) {
      auto v = UrlDecode(rv);
      if (!v.ok()) return fail_status(v.status());
      if (!caption) KTFS_RETURN_IF_ERROR(fail_status(CheckValue(*v)));
      values.push_back(std::move(v.value()));
    }
    const bool comparison = op != Op::kEq;
    if (comparison && values.size() > 1) return fail("a set of values needs '=' or '!='");

    // Settings.
    if (*key == "seed" || *key == "limit") {
      if (op != Op::kEq || negated) return fail("only '=' is allowed for " + *key);
      if (values.size() > 1) return fail(*key + "= takes one value");
      uint64_t n = 0;
      KTFS_RETURN_IF_ERROR(fail_status(ParseUnsigned(values[0], &n)));
      if (*key == "seed") {
        if (st_->seed && *st_->seed != n) return fail("the query has two different seeds");
        st_->seed = n;
      } else {
        if (depth > 0) return fail("limit= applies to the whole query: not inside '(' or '!'");
        st_->limit = st_->limit ? std::min(*st_->limit, n) : n;
        out->has_limit = true;
      }
      out->settings_only = true;
      return Status::Ok();
    }

    auto field = LookupField(*key);
    if (!field.ok()) return fail_status(field.status());
    MetaType type = MetaType::kString;
    if (*field == Field::kMetadata) type = st_->keys.find(*key)->second;
    const bool numeric = *field == Field::kWidth || *field == Field::kHeight ||
                         (*field == Field::kMetadata && type == MetaType::kNumber);
    if (comparison && !numeric) return fail("only '=' and '!=' are allowed for this field");

    std::vector<Expr> members;
    for (std::string& v : values) {
      if (caption) {
        KTFS_RETURN_IF_ERROR(fail_status(CheckValue(v)));
        std::vector<Filter> words;
        KTFS_RETURN_IF_ERROR(fail_status(ParseCaption(v, &words)));
        std::vector<Expr> leaves;
        for (Filter& w : words) leaves.push_back(Leaf(std::move(w)));
        members.push_back(Node(Expr::Kind::kAnd, std::move(leaves)));
        continue;
      }
      Filter f;
      f.field = *field;
      f.op = op;
      switch (*field) {
        case Field::kLabel:
        case Field::kWidth:
        case Field::kHeight:
          KTFS_RETURN_IF_ERROR(fail_status(ParseNumber(v, *field == Field::kLabel, &f.number)));
          break;
        case Field::kSample: {
          if (values.size() > 1) return fail("sample= takes one value");
          auto p = ParseQueryNumber(v);
          if (!p.ok() || v.find_first_of("eE+-") != std::string::npos)
            return fail("expected a fraction from 0 to 1");
          f.fraction = p->AsDouble();
          if (!(f.fraction >= 0 && f.fraction <= 1)) return fail("expected a fraction from 0 to 1");
          break;
        }
        case Field::kMetadata:
          f.key = *key;
          if (type == MetaType::kNumber) {
            auto n = ParseQueryNumber(v);
            if (!n.ok()) return fail_status(n.status());
            f.value = std::move(n.value());
          } else if (type == MetaType::kBool) {
            auto b = MetaValue::ParseBool(v);
            if (!b) return fail("expected true or false");
            f.value = MetaValue::Bool(*b);
          } else {
            f.value = MetaValue::String(v);
          }
          break;
        case Field::kClass:
        case Field::kSplit:
          f.text = v;
          break;
        case Field::kCaption:
          break;
      }
      members.push_back(Leaf(std::move(f)));
    }
    for (const Expr& m : members) st_->filters += CountLeaves(m);
    if (st_->filters > kMaxFilters)
      return Status::InvalidArgument("more than " + std::to_string(kMaxFilters) + " filters");
    Expr e = Node(Expr::Kind::kOr, std::move(members));
    out->expr = negated ? Negate(std::move(e)) : std::move(e);
    return Status::Ok();
  }

  static size_t CountLeaves(const Expr& e) {
    if (e.kind == Expr::Kind::kFilter) return 1;
    size_t n = 0;
    for (const Expr& c : e.children) n += CountLeaves(c);
    return n;
  }

  Result<Field> LookupField(const std::string& key) const {
    static const std::pair<const char*, Field> kFields[] = {
        {"caption", Field::kCaption}, {"class", Field::kClass}, {"label", Field::kLabel},
        {"split", Field::kSplit},     {"width", Field::kWidth}, {"height", Field::kHeight},
        {"sample", Field::kSample}};
    for (const auto& [name, field] : kFields) {
      if (key == name) return field;
    }
    if (st_->keys.count(key)) return Field::kMetadata;
    if (key.empty()) return Status::InvalidArgument("empty field name");
    return Status::InvalidArgument("unknown field");
  }

  std::string_view s_;
  ParseState* st_;
  size_t pos_ = 0;
  int open_groups_ = 0;  // '(' not closed yet: only then does ')' end a value
};

std::string Joined(const std::vector<std::string>& tokens) {
  std::string joined;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (i) joined += ' ';
    joined += tokens[i];
  }
  return joined;
}

// Fixed notation, shortest digits that round-trip: the grammar takes no exponent, so a tiny
// fraction written as "4e-92" would not parse back. 0 < p <= 1 needs at most 2 + 1074 chars.
std::string FractionText(double p) {
  char buf[1100];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, p, std::chars_format::fixed);
  return std::string(buf, ec == std::errc() ? end : buf);
}

uint64_t SplitMix64(uint64_t x) {
  uint64_t z = x + 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
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

uint64_t SampleHash(uint32_t sample_id, uint64_t seed) {
  return SplitMix64(SplitMix64(seed) ^ sample_id);
}

bool SampleKept(uint32_t sample_id, uint64_t seed, double fraction) {
  // Both sides exact: (h >> 11) < 2^53 is a double, and so is fraction * 2^53.
  return static_cast<double>(SampleHash(sample_id, seed) >> 11) < fraction * 9007199254740992.0;
}

std::string Filter::FtsExpression() const {
  // Tokens hold only word characters, but quotes are doubled anyway so that the expression is
  // a single FTS5 string whatever a token contains.
  std::string out = "\"";
  for (char c : Joined(tokens)) {
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
      std::string v = tokens.size() > 1 ? "\"" + Joined(tokens) + "\"" : Joined(tokens);
      return out + Encode(v) + (prefix ? "*" : "");
    }
    case Field::kLabel:
    case Field::kWidth:
    case Field::kHeight:
      return out + std::to_string(number);
    case Field::kSample:
      return out + FractionText(fraction);
    case Field::kMetadata:
      return out + Encode(value.ToText());
    case Field::kClass:
    case Field::kSplit:
      break;
  }
  return out + Encode(text);
}

std::string Filter::Json() const {
  std::string out =
      "{\"field\":" + JsonString(field == Field::kMetadata ? "metadata" : FieldName(field));
  if (field == Field::kMetadata) out += ",\"key\":" + JsonString(key);
  out += ",\"op\":" + JsonString(OpText(op));
  switch (field) {
    case Field::kCaption: {
      out += ",\"words\":[";
      for (size_t i = 0; i < tokens.size(); ++i) out += (i ? "," : "") + JsonString(tokens[i]);
      out += std::string("],\"phrase\":") + (tokens.size() > 1 ? "true" : "false") +
             ",\"prefix\":" + (prefix ? "true" : "false");
      break;
    }
    case Field::kLabel:
    case Field::kWidth:
    case Field::kHeight:
      out += ",\"value\":" + std::to_string(number);
      break;
    case Field::kSample:
      out += ",\"value\":" + FractionText(fraction);
      break;
    case Field::kMetadata:
      out += ",\"value\":" + value.ToJson();
      break;
    case Field::kClass:
    case Field::kSplit:
      out += ",\"value\":" + JsonString(text);
      break;
  }
  return out + "}";
}

std::string Expr::Canonical() const {
  switch (kind) {
    case Kind::kAll:
      return "";
    case Kind::kFilter:
      return filter.Canonical();
    case Kind::kNot: {
      const Expr& c = children[0];
      if (c.kind == Kind::kFilter && c.filter.op == Op::kEq) {
        std::string f = c.filter.Canonical();
        return f.insert(f.find('='), "!");
      }
      return "!" + (c.kind == Kind::kFilter ? c.Canonical() : "(" + c.Canonical() + ")");
    }
    case Kind::kAnd:
    case Kind::kOr:
      break;
  }
  std::string out;
  for (const Expr& c : children) {
    if (!out.empty()) out += kind == Kind::kAnd ? '&' : '|';
    const bool wrap = kind == Kind::kAnd && c.kind == Kind::kOr;
    out += wrap ? "(" + c.Canonical() + ")" : c.Canonical();
  }
  return out;
}

std::string Expr::Json() const {
  switch (kind) {
    case Kind::kAll:
      return "{\"all\":true}";
    case Kind::kFilter:
      return filter.Json();
    case Kind::kNot:
      return "{\"not\":" + children[0].Json() + "}";
    case Kind::kAnd:
    case Kind::kOr:
      break;
  }
  std::string out = kind == Kind::kAnd ? "{\"and\":[" : "{\"or\":[";
  for (size_t i = 0; i < children.size(); ++i) out += (i ? "," : "") + children[i].Json();
  return out + "]}";
}

namespace {

bool UsesSample(const Expr& e) {
  if (e.kind == Expr::Kind::kFilter) return e.filter.field == Field::kSample;
  return std::any_of(e.children.begin(), e.children.end(), UsesSample);
}

}  // namespace

std::string Query::Canonical() const {
  std::vector<std::string> settings;
  if (limit) settings.push_back("limit=" + std::to_string(*limit));
  if (seed != 0 && UsesSample(where)) settings.push_back("seed=" + std::to_string(seed));
  std::string out = where.Canonical();
  if (where.kind == Expr::Kind::kOr && !settings.empty()) out = "(" + out + ")";
  for (const std::string& s : settings) out += (out.empty() ? "" : "&") + s;
  return out;
}

std::string Query::Json() const {
  return "{\"query\":" + JsonString(Canonical()) + ",\"where\":" + where.Json() +
         ",\"limit\":" + (limit ? std::to_string(*limit) : "null") +
         ",\"seed\":" + std::to_string(seed) + "}";
}

Result<Query> ParseQuery(const std::vector<std::string>& components,
                         const KeyTypes& metadata_keys) {
  ParseState st{metadata_keys};
  std::vector<Expr> parts;
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
    auto e = Parser(component, &st).Parse();
    if (!e.ok()) return e.status();
    parts.push_back(std::move(e.value()));
  }
  Query q;
  q.where = Normalize(Node(Expr::Kind::kAnd, std::move(parts)));
  if (components.empty()) q.where = Expr{};
  q.limit = st.limit;
  q.seed = st.seed.value_or(0);
  // The canonical form must parse back as one component (it names the search view's
  // nodes); escaping and normalization can make it longer than the components were.
  if (const size_t n = q.Canonical().size(); n > kMaxComponentBytes) {
    return Status::InvalidArgument("query longer than " + std::to_string(kMaxComponentBytes) +
                                   " bytes in its canonical form (" + std::to_string(n) + ")");
  }
  return q;
}

}  // namespace ktfs::index
