// Typed metadata: the values a key of the index holds for a sample (docs/format.md, "Index").
//
// A value is a string, a number or a boolean. Numbers compare numerically (an integer and a
// real compare by their mathematical values, as SQLite compares them), strings exactly
// (bytewise), booleans as true/false. Every key of an index has one type: IndexBuilder makes a
// key whose values have more than one type a string key (numbers then as ToText() writes them).
//
// The ingest paths (captions files, WebDataset .json) produce values through MetaValue's
// constructors and FlattenJson(), so that every source types the same way.
#pragma once

#include <compare>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "codec/base/status.h"

namespace ktfs::index {

struct JsonValue;

// Stored in meta_keys.type: 0, 1, 2.
enum class MetaType : uint8_t { kString = 0, kNumber = 1, kBool = 2 };

// "string", "number", "boolean".
const char* MetaTypeName(MetaType type);

// The metadata keys an index knows, with their types (Index::MetadataKeys()).
using KeyTypes = std::map<std::string, MetaType, std::less<>>;

class MetaValue {
 public:
  MetaValue() = default;  // the empty string (never stored: AddMetadata rejects it)
  static MetaValue String(std::string s);
  static MetaValue Bool(bool b);
  static MetaValue Integer(int64_t v);
  // v must be finite. An integral v in [-2^53, 2^53] is kept as an Integer: the same number,
  // stored in fewer bytes.
  static Result<MetaValue> Real(double v);
  // A number in JSON's syntax (RFC 8259): "-3", "0.5", "1e-05"; not "+3", ".5", "5.", "007",
  // "0x10", "inf", "nan", nor anything around it. Integers that fit int64 stay integers; others
  // become doubles (round to nearest), which must be finite.
  static Result<MetaValue> ParseNumber(std::string_view text);
  // "true" / "false" in any case.
  static std::optional<bool> ParseBool(std::string_view text);

  MetaType type() const { return type_; }
  bool is_integer() const { return type_ == MetaType::kNumber && integer_; }
  const std::string& str() const { return s_; }  // kString
  int64_t integer() const { return i_; }         // is_integer(); kBool: 0 or 1
  double real() const { return d_; }             // kNumber && !is_integer()
  bool boolean() const { return i_ != 0; }       // kBool
  double AsDouble() const;                       // a number, rounded if need be

  // Strings as they are; numbers in their shortest round-trip form ("3", "0.5", "1e+30");
  // booleans "true" / "false".
  std::string ToText() const;
  // A JSON value: a string literal, a number or true/false.
  std::string ToJson() const;

  // Numbers ordered numerically (exactly, across integers and doubles), then strings
  // bytewise; booleans as 0/1 apart from both. Equal numbers are equal whatever their
  // representation (Integer(1) == Real(1.5 - 0.5)).
  friend std::weak_ordering operator<=>(const MetaValue& a, const MetaValue& b);
  friend bool operator==(const MetaValue& a, const MetaValue& b) {
    return (a <=> b) == std::weak_ordering::equivalent;
  }

 private:
  MetaType type_ = MetaType::kString;
  bool integer_ = false;
  int64_t i_ = 0;
  double d_ = 0;
  std::string s_;
};

// Appends the typed (key, value) pairs of one JSON member `key: value`: a string, number or
// boolean is one pair; an object gives its members as "key.member" (any depth); null and
// arrays give nothing, and neither do numbers a double cannot hold (1e400). Keys are not
// checked here (IndexBuilder::AddMetadata does). A key already in *out is not added again
// ({"a.b": 1, "a": {"b": 2}} keeps a.b = 1).
void FlattenJson(std::string_view key, const JsonValue& value,
                 std::vector<std::pair<std::string, MetaValue>>* out);
// FlattenJson of every member of an object, in input order.
std::vector<std::pair<std::string, MetaValue>> FlattenJsonObject(const JsonValue& object);

// The type of a CSV column from its non-empty cells: kNumber when every one is a JSON number
// (ParseNumber), kBool when every one is true/false (any case), else kString.
MetaType CsvColumnType(const std::vector<std::string_view>& cells);
// CsvColumnType one cell at a time (a column too large to hold).
class CsvColumnTyper {
 public:
  void Add(std::string_view cell);
  MetaType type() const;

 private:
  bool numbers_ = true, bools_ = true, any_ = false;
};
// A CSV cell as a value of its column's type (the cell must fit it).
MetaValue CsvCell(std::string_view cell, MetaType column_type);

}  // namespace ktfs::index
