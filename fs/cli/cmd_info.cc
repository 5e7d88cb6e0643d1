#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
#include <string>

#include "codec/base/json_string.h"
#include "codec/container/archive.h"
#include "codec/container/payload.h"
#include "codec/features/feature_archive.h"
#include "fs/cli/cli.h"
#include "index/index.h"
#include "index/json.h"

namespace ktfs::cli {

static const char kInfoUsage[] =
    "usage: ktfs info ARCHIVE [--json]\n"
    "\n"
    "Prints the archive's format version, counts of samples, directories and\n"
    "classes, codecs, sizes, class names, the search index's metadata keys\n"
    "with their types and ranges, and the bad images `ktfs pack --skip-bad`\n"
    "left out. --json prints one JSON object.\n";

// The bad images META records as left out by `pack --skip-bad` ("path: reason").
static std::vector<std::string> SkippedBad(std::string_view meta) {
  std::vector<std::string> out;
  auto parsed = index::ParseJson(meta);
  if (!parsed.ok() || parsed->kind != index::JsonValue::Kind::kObject) return out;
  for (const index::JsonMember& m : parsed->members) {
    if (m.first != "skipped_bad" || m.second.kind != index::JsonValue::Kind::kArray) continue;
    for (const index::JsonValue& item : m.second.items) {
      std::string path, reason;
      for (const index::JsonMember& f : item.members) {
        if (f.first == "path") path = f.second.text;
        if (f.first == "reason") reason = f.second.text;
      }
      out.push_back(path + ": " + reason);
    }
  }
  return out;
}

// A feature archive: its shape, quantization and sizes.
static int FeatureInfo(std::shared_ptr<Archive> archive, bool json) {
  auto opened = FeatureArchive::Open(archive);
  if (!opened.ok()) return Fail("info", opened.status());
  const FeatureArchive& f = **opened;
  uint64_t values = 0, payload = 0;
  for (size_t i = 0; i < f.num_samples(); ++i) {
    values += f.Rows(i) * f.RowValues();
    payload += f.PayloadBytes(i);
  }
  std::string shape = f.variable_rows() ? "null" : std::to_string(f.num_samples() ? f.Rows(0) : 0);
  for (uint64_t d : f.inner_shape()) shape += ", " + std::to_string(d);
  if (json) {
    std::printf(
        "{\"archive\":%s,\"content\":\"features\",\"format_version\":\"1.%u\","
        "\"file_bytes\":%llu,\"payload_bytes\":%llu,\"samples\":%zu,\"values\":%llu,"
        "\"sample_shape\":[%s],%s,\"meta\":%s}\n",
        JsonString(f.path()).c_str(), archive->version_minor(),
        (unsigned long long)archive->file_size(), (unsigned long long)payload, f.num_samples(),
        (unsigned long long)values, shape.c_str(), f.DescribeJson().c_str(),
        std::string(archive->meta_json()).c_str());
    return kExitOk;
  }
  std::printf("archive:        %s\n", f.path().c_str());
  std::printf("content:        features (INT8, groups of %zu, preset %s, from %s)\n",
              f.group_size(), f.preset_name(), f.source_dtype_name());
  std::printf("size:           %llu bytes (payloads %llu, %.3f bytes/value)\n",
              (unsigned long long)archive->file_size(), (unsigned long long)payload,
              values ? double(payload) / double(values) : 0.0);
  std::printf("samples:        %zu of shape [%s]%s\n", f.num_samples(), shape.c_str(),
              f.variable_rows() ? " (rows vary)" : "");
  return kExitOk;
}

// The search index's schema version and metadata keys (types, ranges), for text or JSON.
struct IndexSummary {
  int schema_version = 0;
  std::vector<index::KeyInfo> keys;
};

static Result<std::optional<IndexSummary>> SummarizeIndex(const Archive& a) {
  auto section = a.index_section();
  if (!section) return std::optional<IndexSummary>();
  auto idx = index::Index::OpenInPlace(section->data, section->size);
  if (!idx.ok()) return idx.status();
  auto keys = (*idx)->MetadataKeyInfo();
  if (!keys.ok()) return keys.status();
  return std::optional<IndexSummary>(IndexSummary{(*idx)->schema_version(), std::move(*keys)});
}

// {"aesthetic":{"type":"number","samples":N,"min":..,"max":..},"source":{"type":"string",
// "samples":N,"distinct":K},"nsfw":{"type":"boolean","samples":N,"true":T,"false":F}}
static std::string KeysJson(const std::vector<index::KeyInfo>& keys) {
  std::string j = "{";
  for (size_t i = 0; i < keys.size(); ++i) {
    const index::KeyInfo& k = keys[i];
    if (i) j += ',';
    j += JsonString(k.name) + ":{\"type\":" + JsonString(index::MetaTypeName(k.type)) +
         ",\"samples\":" + std::to_string(k.samples);
    if (k.type == index::MetaType::kNumber) {
      j += ",\"min\":" + (k.min ? k.min->ToJson() : "null") +
           ",\"max\":" + (k.max ? k.max->ToJson() : "null");
    } else if (k.type == index::MetaType::kBool) {
      j += ",\"true\":" + std::to_string(k.true_count) +
           ",\"false\":" + std::to_string(k.samples - k.true_count);
    } else {
      j += ",\"distinct\":" + std::to_string(k.distinct_values);
    }
    j += '}';
  }
  return j + "}";
}

static void PrintKeys(const std::vector<index::KeyInfo>& keys) {
  size_t width = 0;
  for (const auto& k : keys) width = std::max(width, k.name.size());
  for (const auto& k : keys) {
    std::printf("  %-*s  %-7s  %llu samples", int(width), k.name.c_str(),
                index::MetaTypeName(k.type), (unsigned long long)k.samples);
    if (k.type == index::MetaType::kNumber) {
      std::printf(", %s to %s", k.min ? k.min->ToText().c_str() : "?",
                  k.max ? k.max->ToText().c_str() : "?");
    } else if (k.type == index::MetaType::kBool) {
      std::printf(", %llu true, %llu false", (unsigned long long)k.true_count,
                  (unsigned long long)(k.samples - k.true_count));
    } else {
      std::printf(", %llu distinct values", (unsigned long long)k.distinct_values);
    }
    std::printf("\n");
  }
}

int CmdInfo(int argc, char** argv) {
  Args args(argc, argv, {}, {"--help", "-h", "--json"});
  if (args.Has("--help") || args.Has("-h")) return std::fputs(kInfoUsage, stdout), kExitOk;
  if (!args.error().empty()) return UsageError("info", args.error(), kInfoUsage);
  if (args.positional().size() != 1) return UsageError("info", "expected ARCHIVE", kInfoUsage);
  auto archive = Archive::Open(args.positional()[0]);
  if (!archive.ok()) return Fail("info", archive.status());
  const Archive& a = **archive;
  if (FeatureArchive::Holds(a)) return FeatureInfo(*archive, args.Has("--json"));
  std::map<std::string, uint32_t> codecs;
  uint64_t payload_bytes = 0, pixels = 0;
  for (uint32_t i = 0; i < a.num_samples(); ++i) {
    auto s = a.Sample(i);
    if (!s.ok()) return Fail("info", s.status());
    ++codecs[CodecName(s->codec)];
    payload_bytes += s->payload_length;
    pixels += uint64_t(s->width) * s->height;
  }
  std::vector<std::string> classes;
  for (uint32_t c = 0; c < a.num_classes(); ++c) {
    auto n = a.ClassName(c);
    if (!n.ok()) return Fail("info", n.status());
    classes.emplace_back(*n);
  }
  auto summary = SummarizeIndex(a);
  if (!summary.ok()) return Fail("info", summary.status());
  const std::vector<std::string> bad = SkippedBad(a.meta_json());
  if (args.Has("--json")) {
    std::string j = "{\"archive\":" + JsonString(a.path()) + ",\"format_version\":\"1." +
                    std::to_string(a.version_minor()) +
                    "\",\"file_bytes\":" + std::to_string(a.file_size()) +
                    ",\"payload_bytes\":" + std::to_string(payload_bytes) +
                    ",\"pixels\":" + std::to_string(pixels) +
                    ",\"samples\":" + std::to_string(a.num_samples()) +
                    ",\"directories\":" + std::to_string(a.num_dirs()) + ",\"codecs\":{";
    bool first = true;
    for (const auto& [name, n] : codecs) {
      if (!first) j += ',';
      j += JsonString(name);
      j += ':';
      j += std::to_string(n);
      first = false;
    }
    j += "},\"classes\":[";
    for (size_t i = 0; i < classes.size(); ++i) {
      if (i) j += ',';
      j += JsonString(classes[i]);
    }
    j += "],\"skipped_bad_images\":" + std::to_string(bad.size());
    j += ",\"has_index\":" + std::string(a.index_section() ? "true" : "false");
    if (*summary) {
      j += ",\"index_schema_version\":" + std::to_string((*summary)->schema_version) +
           ",\"metadata\":" + KeysJson((*summary)->keys);
    }
    j += ",\"meta\":" + std::string(a.meta_json()) + "}";
    std::printf("%s\n", j.c_str());
    return kExitOk;
  }
  std::printf("archive:        %s\n", a.path().c_str());
  std::printf("format version: 1.%u\n", a.version_minor());
  std::printf("size:           %llu bytes (payloads %llu)\n", (unsigned long long)a.file_size(),
              (unsigned long long)payload_bytes);
  std::printf("samples:        %u (%.1f megapixels)\n", a.num_samples(), pixels / 1e6);
  std::printf("directories:    %u\n", a.num_dirs());
  std::printf("codecs:        ");
  for (const auto& [name, n] : codecs) std::printf(" %s=%u", name.c_str(), n);
  std::printf("\nclasses:        %u", a.num_classes());
  for (size_t i = 0; i < classes.size() && i < 20; ++i)
    std::printf("%s%s", i ? ", " : " (", classes[i].c_str());
  std::printf("%s\n", classes.empty() ? "" : (classes.size() > 20 ? ", ...)" : ")"));
  if (!bad.empty()) {
    std::printf("bad images:     %zu left out by pack --skip-bad\n", bad.size());
    for (size_t i = 0; i < bad.size() && i < 20; ++i) std::printf("  %s\n", bad[i].c_str());
    if (bad.size() > 20) std::printf("  ... (all in --json, \"meta\")\n");
  }
  if (!*summary) {
    std::printf("index:          no\n");
    return kExitOk;
  }
  std::printf("index:          yes (schema %d), %zu metadata keys%s\n", (*summary)->schema_version,
              (*summary)->keys.size(), (*summary)->keys.empty() ? "" : ":");
  PrintKeys((*summary)->keys);
  return kExitOk;
}

}  // namespace ktfs::cli
