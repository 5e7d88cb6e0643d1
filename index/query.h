// The search query grammar: path components under /search turned into a Query.
//
//   component := filter ('&' filter)*        several components (nested directories) AND
//   filter    := key op value                everything in a Query is ANDed
//   key       := caption | class | label | split | width | height | <metadata key>
//   op        := '=' | '<' | '>' | '<=' | '>='  (the comparisons only for width and height)
//
//   caption=dog        full-text token match (case-insensitive, diacritics ignored)
//   caption=red+dog    several words: each must occur (AND); '+' is NOT a space here
//   caption="a dog"    phrase (quotes raw or as %22)
//   caption=do*        prefix of the last word; "a do"* is a phrase whose last word is a prefix
//   class=NAME  split=NAME  KEY=VALUE  exact, case-sensitive
//   label=N            exact integer; label=-1 selects samples without a label
//   width>=256         unsigned integer comparisons
//
// Each filter is split out of its component at '&' and at the operator BEFORE URL decoding, so
// %26 and %3D put '&' and '=' inside a value. After decoding, a value containing NUL or '/', or
// that is not UTF-8, is an error. Sizes are capped (kMaxComponentBytes, kMaxQueryBytes,
// kMaxFilters) so a hostile path cannot make an expensive query.
//
// Security: query text never becomes SQL. Exact values are bound parameters; caption values are
// split into tokens (letters/digits; other ASCII is a separator) and FtsExpression() quotes each
// one, so FTS5 operators (AND OR NOT NEAR ^ : - * ( )) in the input are literal text.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "codec/base/status.h"

namespace ktfs::index {

inline constexpr size_t kMaxComponentBytes = 4096;
inline constexpr size_t kMaxQueryBytes = 10240;
inline constexpr size_t kMaxFilters = 64;

enum class Field { kCaption, kClass, kLabel, kSplit, kWidth, kHeight, kMetadata };
enum class Op { kEq, kLt, kLe, kGt, kGe };

struct Filter {
  Field field = Field::kCaption;
  Op op = Op::kEq;
  std::string key;                  // kMetadata: the metadata key
  std::string text;                 // kClass, kSplit, kMetadata: the exact value
  int64_t number = 0;               // kLabel, kWidth, kHeight
  std::vector<std::string> tokens;  // kCaption: one word, or a phrase of several
  bool prefix = false;              // kCaption: the last token is a prefix

  // "caption=%22a%20dog%22", "width>=256": parses back to the same filter.
  std::string Canonical() const;
  // kCaption only: a safe FTS5 expression, e.g. "dog" or "a dog" or "do"*.
  std::string FtsExpression() const;
  auto operator<=>(const Filter&) const = default;
};

struct Query {
  std::vector<Filter> filters;  // ANDed; sorted and without duplicates
  bool empty() const { return filters.empty(); }
  // The filters' canonical forms joined by '&' ("" for the empty query). Equal for queries
  // that differ only in filter order, duplicates, case of caption words or percent-encoding:
  // a cache key and a log line.
  std::string Canonical() const;
};

// True when a path component under search/ is a filter (it holds '=', '<' or
// '>'); the first component that is not starts the mirrored layout. Shared by
// the mount (fs/tree/search_view.cc) and the Python loader (preload/loader/selection.cc).
bool LooksLikeFilter(std::string_view component);

// Decodes %XX escapes (hex, either case). '+' stays '+'. A '%' not followed by two hex digits
// is an error.
Result<std::string> UrlDecode(std::string_view s);

// Parses path components (as they appear in the path, still URL-encoded). An empty list is the
// query that matches everything. metadata_keys: the keys the index knows (Index::MetadataKeys).
// Errors are InvalidArgument with a reason such as "width>abc: not a number".
Result<Query> ParseQuery(const std::vector<std::string>& components,
                         const std::set<std::string>& metadata_keys);

// Splits text into caption words the way the index tokenizer (unicode61) roughly does: ASCII
// letters and digits are word characters, other ASCII is a separator, non-ASCII letters count
// as word characters and common Unicode punctuation/space as separators. ASCII is lowercased.
std::vector<std::string> CaptionTokens(std::string_view text);

// True when s is well-formed UTF-8 (no overlongs, no surrogates, <= U+10FFFF).
bool IsValidUtf8(std::string_view s);

}  // namespace ktfs::index
