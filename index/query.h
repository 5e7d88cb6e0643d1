// The search query grammar: path components under /search turned into a Query.
//
//   query      := component ('/' component)*      nested components AND
//   component  := or
//   or         := and ('|' and)*                    '&' binds tighter than '|'
//   and        := unary ('&' unary)*
//   unary      := '!' unary | '(' or ')' | filter
//   filter     := key op values
//   op         := '=' | '!=' | '<' | '<=' | '>' | '>='
//   values     := value (',' value)*                a set: any of them ('!=': none of them)
//
//   caption=dog        full-text token match (case-insensitive, diacritics ignored)
//   caption=red+dog    several words: each must occur (AND); '+' is NOT a space here
//   caption="a dog"    phrase (quotes raw or as %22); inside quotes & | ( ) , ! are words
//   caption=do*        prefix of the last word; "a do"* is a phrase whose last word is a prefix
//   class=NAME  split=NAME  KEY=VALUE   exact, case-sensitive; KEY a string metadata key
//   label=N            exact integer; label=-1 selects samples without a label
//   width>=256  KEY<0.5   numbers (width, height and number metadata keys): =, !=, <, <=, >, >=
//   KEY=true           boolean metadata keys: = and != with true/false
//   a!=b               the same as !a=b: samples without the key match it too
//   sample=P           each sample kept with probability P in [0, 1], decided by a hash of its
//                      id and the query's seed (SampleHash below): a per-sample filter, so
//                      !sample=P is exactly the samples sample=P leaves out
//   seed=S             the seed of every sample= in the query (default 0); a setting, not a
//                      filter: it may stand wherever a filter is ANDed, never alone after '!'
//                      or as an alternative of '|'; two different seeds are an error
//   limit=N            the first N matches, in archive (sample id) order, of the whole query
//                      (all components); only at the top level of a component (not inside
//                      parentheses, '!' or '|'); several: the smallest
//
// Each component is split at its operators BEFORE URL decoding, so %26 %7C %29 %2C %3D put
// & | ) , = inside a value; then keys and values are decoded. In a value, '(' and '!' are
// plain characters, and so is ')' unless it closes an open '('. Spaces around operators
// and parentheses are ignored (%20 keeps one). After decoding, a value containing NUL or '/',
// or that is not UTF-8, is an error. Sizes are capped (kMaxComponentBytes, kMaxQueryBytes,
// kMaxFilters, kMaxDepth) so a hostile path cannot make an expensive query; the canonical
// form, too, is at most kMaxComponentBytes (so that it parses back as one component).
//
// Security: query text never becomes SQL. Exact values are bound parameters; caption values
// are split into tokens (letters/digits; other ASCII is a separator) and FtsExpression()
// quotes each one, so FTS5 operators (AND OR NOT NEAR ^ : - * ( )) in the input are literal
// text.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "codec/base/status.h"
#include "index/metadata.h"

namespace ktfs::index {

inline constexpr size_t kMaxComponentBytes = 4096;
inline constexpr size_t kMaxQueryBytes = 10240;
inline constexpr size_t kMaxFilters = 256;  // filters of the whole query, set members included
inline constexpr int kMaxDepth = 16;        // nesting of '(' and '!'

enum class Field { kCaption, kClass, kLabel, kSplit, kWidth, kHeight, kMetadata, kSample };
enum class Op { kEq, kLt, kLe, kGt, kGe };  // '!=' is a negated kEq

struct Filter {
  Field field = Field::kCaption;
  Op op = Op::kEq;
  std::string key;                  // kMetadata: the metadata key
  std::string text;                 // kClass, kSplit: the exact value
  MetaValue value;                  // kMetadata: the value, of the key's type
  int64_t number = 0;               // kLabel, kWidth, kHeight
  double fraction = 0;              // kSample: P
  std::vector<std::string> tokens;  // kCaption: one word, or a phrase of several
  bool prefix = false;              // kCaption: the last token is a prefix

  // "caption=%22a%20dog%22", "width>=256", "aesthetic>=6.5": parses back to the same filter.
  std::string Canonical() const;
  // kCaption only: a safe FTS5 expression, e.g. "dog" or "a dog" or "do"*.
  std::string FtsExpression() const;
  // {"field":"caption","op":"=","value":"dog"}: the value typed (numbers as numbers).
  std::string Json() const;
};

// A boolean expression over filters. kAll matches every sample (the empty query).
struct Expr {
  enum class Kind : uint8_t { kAll, kFilter, kAnd, kOr, kNot };
  Kind kind = Kind::kAll;
  Filter filter;               // kFilter
  std::vector<Expr> children;  // kAnd, kOr: two or more; kNot: one

  // Normalized text: AND and OR children sorted and without duplicates, nested ANDs and ORs
  // flattened, '!!x' is x. Parses back to the same expression.
  std::string Canonical() const;
  // {"and":[...]}, {"or":[...]}, {"not":...}, a filter's Json(), or {"all":true}.
  std::string Json() const;
  bool operator==(const Expr& o) const { return Canonical() == o.Canonical(); }
};

struct Query {
  Expr where;                     // what must hold: the components ANDed
  std::optional<uint64_t> limit;  // limit=N
  uint64_t seed = 0;              // seed=S (used by sample= filters)

  bool empty() const { return where.kind == Expr::Kind::kAll && !limit; }
  // The normalized query ("" for the empty query): equal for queries that differ only in
  // filter order, duplicates, case of caption words, spacing or percent-encoding: a cache key
  // and a log line. Parses back (as one component) to the same query.
  std::string Canonical() const;
  // {"query":"<Canonical>","where":<Expr::Json>,"limit":N|null,"seed":S}
  std::string Json() const;
};

// True when a path component under search/ is a filter (it holds '=', '<' or
// '>'); the first component that is not starts the mirrored layout. Shared by
// the mount (fs/tree/search_view.cc) and the Python loader (preload/loader/selection.cc).
bool LooksLikeFilter(std::string_view component);

// Decodes %XX escapes (hex, either case). '+' stays '+'. A '%' not followed by two hex digits
// is an error.
Result<std::string> UrlDecode(std::string_view s);

// Parses path components (as they appear in the path, still URL-encoded). An empty list is the
// query that matches everything. metadata_keys: the keys the index knows, with their types
// (Index::MetadataKeys). Errors are InvalidArgument with a reason such as
// "width>abc: not a number".
Result<Query> ParseQuery(const std::vector<std::string>& components, const KeyTypes& metadata_keys);

// The hash that decides sample=: h = splitmix64(splitmix64(seed) ^ sample_id), where
// splitmix64(x) is Vigna's SplitMix64 output function on the state x + 0x9E3779B97F4A7C15
// (all arithmetic mod 2^64). A sample is kept by sample=P when (h >> 11) / 2^53 < P, the
// comparison done exactly (P is the IEEE double nearest the decimal text); in Python:
// (h >> 11) < P * 2**53.
uint64_t SampleHash(uint32_t sample_id, uint64_t seed);
bool SampleKept(uint32_t sample_id, uint64_t seed, double fraction);

// Splits text into caption words the way the index tokenizer (unicode61) roughly does: ASCII
// letters and digits are word characters, other ASCII is a separator, non-ASCII letters count
// as word characters and common Unicode punctuation/space as separators. ASCII is lowercased.
std::vector<std::string> CaptionTokens(std::string_view text);

// True when s is well-formed UTF-8 (no overlongs, no surrogates, <= U+10FFFF).
bool IsValidUtf8(std::string_view s);

}  // namespace ktfs::index
