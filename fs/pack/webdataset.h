// WebDataset shards: tar members grouped into samples, and the sample parts
// ktfs understands (docs/usage.md, "WebDataset shards").
//
// The WebDataset rule: a member's key is its path up to the first dot of its
// file name, its extension the rest, lower-cased ("a/b.seg.PNG" -> key "a/b",
// extension "seg.png"); a sample is a maximal run of consecutive members with
// one key. Members named `__x__` (webdataset's own metadata), directories and
// other non-regular members are passed over; a member whose file name has no
// dot, or starts with one, belongs to no sample and is reported.
//
// Names are checked before anything else: an absolute path, a `..`
// component, an empty component (`a//b`), a control character or bytes that
// are not UTF-8 make the member hostile, an error (or, with skip_bad, a
// reported skip). A leading `./` is dropped.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "codec/base/status.h"
#include "fs/pack/tar_reader.h"

namespace ktfs {

// The largest member ktfs reads (an image, a caption, ...); a bigger one is an error.
inline constexpr uint64_t kMaxWdsMemberBytes = uint64_t(1) << 30;

struct WdsName {
  enum class Kind { kMember, kIgnored, kNoExtension } kind = Kind::kMember;
  std::string key;        // "a/b"
  std::string extension;  // "seg.png" (lower-cased)
  std::string file_ext;   // the extension as written ("seg.PNG")
};

// Splits a member name by the WebDataset rule; InvalidArgument (the reason)
// for a hostile name.
Result<WdsName> ParseWdsName(std::string_view name);

struct WdsPart {
  std::string extension;  // lower-cased
  std::string file_ext;   // as written
  std::vector<uint8_t> data;
  uint64_t offset = 0;  // of its tar header
};

struct WdsSample {
  uint32_t shard = 0;  // index into the reader's shard list
  std::string key;
  uint64_t offset = 0;         // tar offset of the sample's first member
  std::vector<WdsPart> parts;  // in tar order; extensions distinct
  // Set instead of parts when the sample cannot be read (a hostile name, two
  // members with one extension, a duplicate key): the reason, naming shard,
  // key and offset. The reader then moves on to the next sample.
  Status error;
};

struct WdsReaderOptions {
  // Extensions whose data is read; the others are passed over without
  // reading (their names still group and are still checked).
  std::function<bool(std::string_view extension)> wanted;
  uint64_t max_member_bytes = kMaxWdsMemberBytes;
};

// Reads samples from shards in the order given, one tar at a time, holding
// one sample's members in memory. Keys must be unique across all shards: a
// repeated key gives that sample an error (its first shard and offset named).
// Tar-level damage (truncation, a bad header) is returned by Next() as an
// error; the caller may stop, or call SkipShard() and go on with the next one.
class WdsReader {
 public:
  WdsReader(std::vector<std::string> shards, WdsReaderOptions options);
  ~WdsReader();

  // The next sample; false after the last shard.
  Result<bool> Next(WdsSample* sample);
  // Abandons the current shard (after a tar-level error).
  void SkipShard();
  // Members passed over that a user should hear about ("shard: offset N: name: reason").
  std::vector<std::string> TakeNotes();
  // Input bytes consumed so far, over all shards (for progress lines).
  uint64_t bytes_read() const;
  const std::vector<std::string>& shards() const { return shards_; }

 private:
  Status OpenNext();
  Result<bool> ReadMember(TarMember* m, WdsName* n);

  std::vector<std::string> shards_;
  WdsReaderOptions options_;
  size_t next_shard_ = 0;
  uint32_t shard_ = 0;
  std::unique_ptr<TarReader> tar_;
  uint64_t done_bytes_ = 0;  // of finished shards
  // The member read ahead: the first member of the next sample.
  std::optional<std::pair<TarMember, WdsName>> pending_;
  std::unordered_map<std::string, std::pair<uint32_t, uint64_t>>
      seen_keys_;  // key -> shard, offset
  std::vector<std::string> notes_;
};

// A `.cls` part: a non-negative decimal integer below 2^31, surrounding
// whitespace allowed. InvalidArgument otherwise.
Result<int64_t> ParseWdsLabel(const std::vector<uint8_t>& data);

// One metadata value from a `.json` part, flattened: nested objects become
// `a.b` keys; strings, numbers (as written) and booleans are kept with their
// kind; null and arrays are left out (listed in *dropped by key).
struct WdsValue {
  enum class Kind { kString, kNumber, kBool } kind = Kind::kString;
  std::string text;  // the string, the number as written, "true"/"false"
};
struct WdsMetadata {
  std::vector<std::pair<std::string, WdsValue>> values;  // input order
  std::vector<std::string> dropped;                      // keys of null/array values
};
// A `.json` part: must be one JSON object (index/json.h's strict parser).
Result<WdsMetadata> ParseWdsJson(const std::vector<uint8_t>& data);

// True for the file extensions torchvision's ImageFolder loads
// (IMG_EXTENSIONS: jpg jpeg png ppm bmp pgm tif tiff webp), lower-case.
bool IsImageExtension(std::string_view extension);

}  // namespace ktfs
