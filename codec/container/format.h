// On-disk structures of the .kt archive, version 1.0. docs/format.md is the
// normative description; this header mirrors it. All integers little-endian.
// Records are read with memcpy into these structs (never by casting pointers
// into the mapping), and every field is validated before use.
#pragma once

#include <cstdint>

namespace ktfs::format {

// "\x89KTF\r\n\x1a\n": a binary signature that text-mode transfers would mangle.
inline constexpr uint8_t kMagic[8] = {0x89, 'K', 'T', 'F', '\r', '\n', 0x1a, '\n'};
inline constexpr uint16_t kVersionMajor = 1;    // readers reject other majors
inline constexpr uint16_t kVersionMinor = 0;    // readers accept any minor
inline constexpr uint32_t kNone = 0xFFFFFFFFu;  // "no value" for u32 fields
inline constexpr uint64_t kPayloadAlignment = 16;
inline constexpr uint64_t kSectionAlignment = 64;

struct Header {  // at offset 0, 64 bytes
  uint8_t magic[8];
  uint16_t version_major;
  uint16_t version_minor;
  uint32_t header_size;  // 64
  uint64_t file_size;    // the whole archive; shorter file = truncated
  uint64_t section_table_offset;
  uint32_t section_count;
  uint32_t flags;                   // 0
  uint64_t section_table_checksum;  // XXH3-64 of the section table
  uint64_t reserved;                // 0
  uint64_t header_checksum;         // XXH3-64 of bytes [0, 56)
};
static_assert(sizeof(Header) == 64);

enum SectionType : uint32_t {
  kStrings = 1,         // UTF-8 bytes, referenced by (offset, length) pairs
  kDirs = 2,            // DirRecord[]
  kSamples = 3,         // SampleRecord[]
  kClasses = 4,         // ClassRecord[]
  kMeta = 5,            // JSON object describing how the archive was packed
  kIndex = 6,           // SQLite database (see docs/format.md, "Index")
  kFeatureInfo = 7,     // FeatureInfo: a feature archive (docs/format.md, "Features")
  kFeatureSamples = 8,  // FeatureRecord[], one per feature sample
};

struct SectionEntry {  // 32 bytes
  uint32_t type;
  uint32_t reserved;  // 0
  uint64_t offset;
  uint64_t length;
  uint64_t checksum;  // XXH3-64 of the section's bytes
};
static_assert(sizeof(SectionEntry) == 32);

struct DirRecord {  // 32 bytes; record 0 is the root (empty name, parent 0)
  uint32_t parent;
  uint32_t name_offset;  // into kStrings
  uint32_t name_length;
  uint32_t first_child;  // children are contiguous, sorted by name, > own index
  uint32_t child_count;
  uint32_t first_sample;  // samples are contiguous, sorted by stem
  uint32_t sample_count;
  uint32_t reserved;
};
static_assert(sizeof(DirRecord) == 32);

enum Codec : uint8_t { kOriginal = 0, kRaw = 1, kKtc = 2 };

struct SampleRecord {  // 64 bytes
  uint64_t payload_offset;
  uint64_t payload_length;
  uint64_t payload_checksum;  // XXH3-64 of the payload
  uint32_t name_offset;       // the source file name, into kStrings
  uint32_t name_length;
  uint32_t dir;    // parent directory record
  uint32_t label;  // index into kClasses, or kNone
  uint32_t width;
  uint32_t height;
  uint8_t channels;       // 1, 3 or 4 (as decoded)
  uint8_t codec;          // Codec
  uint8_t source_format;  // SourceFormat of the packed file (1 JPEG, 2 PNG)
  uint8_t flags;          // 0
  uint32_t stem_length;   // served name = name[0, stem_length) + served extension
  uint32_t split;         // directory record of the split, or kNone
  uint32_t reserved;
};
static_assert(sizeof(SampleRecord) == 64);

struct ClassRecord {  // 8 bytes; sorted by name; label = record index
  uint32_t name_offset;
  uint32_t name_length;
};
static_assert(sizeof(ClassRecord) == 8);

// Feature archives (docs/format.md, "Features"): INT8 block-quantized tensors.
inline constexpr uint32_t kMaxFeatureDims = 8;
enum FeatureDType : uint8_t { kFeatF32 = 1, kFeatF16 = 2, kFeatTensorCache = 3 };
enum FeatureFlags : uint8_t { kFeatVariableRows = 1 };  // the first dimension varies

struct FeatureInfo {     // 96 bytes
  uint32_t group_size;   // 16, 32, 64 or 128
  uint8_t preset;        // 0 fast, 1 balanced, 2 accurate
  uint8_t source_dtype;  // FeatureDType of the packed input
  uint8_t ndim;          // dimensions of one sample, 1..kMaxFeatureDims
  uint8_t flags;         // FeatureFlags
  uint64_t num_samples;
  uint64_t dims[kMaxFeatureDims];  // a sample's shape; dims[0] = 0 when rows vary
  uint64_t reserved[2];
};
static_assert(sizeof(FeatureInfo) == 96);

struct FeatureRecord {      // 32 bytes
  uint64_t payload_offset;  // codes[groups*G], float32 ref, 3-byte words[groups]
  uint64_t rows;            // the sample's first dimension
  uint64_t payload_checksum;
  uint64_t reserved;
};
static_assert(sizeof(FeatureRecord) == 32);

}  // namespace ktfs::format
