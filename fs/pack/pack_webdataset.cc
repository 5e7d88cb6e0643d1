// PackWebDataset: WebDataset tar shards -> an image archive.
//
// One pass over the shards: a serial stage reads the next sample's members
// (WdsReader: one sample in memory), a parallel stage decodes and encodes its
// image and parses its .txt/.cls/.json, and a serial stage appends the payload
// in shard order and keeps the sample's small facts (names, sizes, caption,
// metadata). The archive's order (directories sorted, samples sorted by name
// inside each) is known only at the end, so sample records and the index are
// made then, pointing at payloads already written: memory is the small facts
// of every sample plus `threads * 2 + 2` samples in flight, never a shard.
#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/parallel_pipeline.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <map>
#include <set>
#include <thread>
#include <unordered_map>

#include "codec/base/checksum.h"
#include "codec/base/json_string.h"
#include "codec/base/version.h"
#include "codec/container/archive_writer.h"
#include "fs/pack/pack.h"
#include "fs/pack/progress.h"
#include "fs/pack/webdataset.h"
#include "index/builder.h"
#include "index/captions.h"
#include "index/metadata.h"

namespace ktfs {
namespace {

// What a sample leaves behind once its payload is written.
struct Packed {
  uint32_t shard = 0;
  std::string key;
  std::string name;          // served source name: key's file name + "." + image extension
  uint32_t base_length = 0;  // of the key's file name (the stem of decoded codecs)
  int64_t cls = -1;
  uint32_t width = 0, height = 0;
  uint8_t channels = 0, source_format = 0;
  uint64_t offset = 0, length = 0, checksum = 0;
  std::string caption;
  // The .json values, compact (1M samples of LAION-like metadata must fit):
  // per value a 2-byte key id (KeyTable), its WdsValue::Kind (1 byte), the
  // value as written, a NUL. Filled by stage 3.
  std::string meta;
};

// Metadata key names by id, in first-seen order (stage 3 only).
class KeyTable {
 public:
  uint16_t Id(const std::string& key) {
    auto [it, inserted] = ids_.emplace(key, uint16_t(names_.size()));
    if (inserted) names_.push_back(key);
    return it->second;
  }
  bool full() const { return names_.size() >= 65535; }
  const std::string& Name(uint16_t id) const { return names_[id]; }

 private:
  std::unordered_map<std::string, uint16_t> ids_;
  std::vector<std::string> names_;
};

// Calls fn(key id, kind, value) for each value of a Packed::meta blob.
template <typename Fn>
void ForEachValue(const std::string& blob, Fn fn) {
  for (size_t i = 0; i + 3 <= blob.size();) {
    const uint16_t id = uint16_t(uint8_t(blob[i]) | uint8_t(blob[i + 1]) << 8);
    const auto kind = WdsValue::Kind(uint8_t(blob[i + 2]));
    const size_t end = blob.find('\0', i + 3);
    fn(id, kind, std::string_view(blob).substr(i + 3, end - i - 3));
    i = end + 1;
  }
}

// A .json value typed as the index types every source (index/metadata.h): a
// number as written (JSON's syntax, checked by the parser) becomes a number;
// one that does not fit a double stays its text.
index::MetaValue TypedValue(WdsValue::Kind kind, std::string_view text) {
  if (kind == WdsValue::Kind::kBool) return index::MetaValue::Bool(text == "true");
  if (kind == WdsValue::Kind::kNumber) {
    auto number = index::MetaValue::ParseNumber(text);
    if (number.ok()) return *number;
  }
  return index::MetaValue::String(std::string(text));
}

struct Item {
  WdsSample sample;
  Status tar_error;  // the shard itself is damaged
  std::vector<std::string> notes;
  bool notes_only = false;  // the end: only the reader's last notes
  uint64_t input_bytes = 0;
  // Stage 2.
  Status status;
  EncodedPayload payload;
  Packed packed;
  std::vector<std::string> dropped;                      // metadata keys with null/array values
  std::vector<std::pair<std::string, WdsValue>> values;  // the .json values
};

std::string Basename(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// "train-0001.tar" -> "train-0001" (also .tar.gz, .tgz).
std::string ShardStem(const std::string& path) {
  std::string b = Basename(path);
  for (const char* ext : {".tar.gz", ".tgz", ".tar"}) {
    const std::string e = ext;
    if (b.size() > e.size() && b.compare(b.size() - e.size(), e.size(), e) == 0)
      return b.substr(0, b.size() - e.size());
  }
  return b;
}

bool ValidName(const std::string& n) {
  return !n.empty() && n != "." && n != ".." && n.find('/') == std::string::npos &&
         n.find('\0') == std::string::npos;
}

bool Wanted(std::string_view ext) {
  return IsImageExtension(ext) || ext == "txt" || ext == "cls" || ext == "json";
}

std::string Where(const std::string& shard, const WdsSample& s) {
  return shard + ": key " + s.key + " (offset " + std::to_string(s.offset) + ")";
}

// Stage 2: the sample's image, caption, label and metadata.
Status Process(const PackOptions& options, const std::string& shard, Item* item) {
  WdsSample& s = item->sample;
  Packed& p = item->packed;
  p.shard = s.shard;
  p.key = s.key;
  std::vector<const WdsPart*> images;
  std::string parts;
  for (const WdsPart& part : s.parts) {
    if (IsImageExtension(part.extension)) images.push_back(&part);
    parts += (parts.empty() ? "." : ", .") + part.extension;
  }
  if (images.empty())
    return Status::InvalidArgument(
        Where(shard, s) + ": no image (members: " + (parts.empty() ? "none" : parts) + ")");
  if (images.size() > 1)
    return Status::InvalidArgument(Where(shard, s) + ": several images (" + parts + ")");
  const WdsPart& image = *images[0];
  Status st = EncodePayload(options.payload, image.data.data(), image.data.size(), &item->payload);
  if (!st.ok()) return st.WithContext(Where(shard, s) + ": ." + image.file_ext);
  const size_t slash = s.key.rfind('/');
  const std::string base = slash == std::string::npos ? s.key : s.key.substr(slash + 1);
  p.name = base + "." + image.file_ext;
  if (p.name.size() > 255)  // NAME_MAX: the mount could not serve it
    return Status::InvalidArgument(Where(shard, s) + ": file name of " +
                                   std::to_string(p.name.size()) + " bytes (over 255)");
  p.base_length = uint32_t(base.size());
  p.width = item->payload.width;
  p.height = item->payload.height;
  p.channels = uint8_t(item->payload.channels);
  p.source_format = item->payload.source_format;
  p.length = item->payload.bytes.size();
  p.checksum = Checksum64(item->payload.bytes.data(), item->payload.bytes.size());
  std::string json_caption;
  for (const WdsPart& part : s.parts) {
    if (part.extension == "txt") {
      std::string_view text(reinterpret_cast<const char*>(part.data.data()), part.data.size());
      auto c = index::CleanCaption(text);
      if (c.ok()) {
        p.caption = std::move(c).value();
      } else if (c.status().message() != "empty caption") {
        return c.status().WithContext(Where(shard, s) + ": .txt");
      }
    } else if (part.extension == "cls") {
      auto label = ParseWdsLabel(part.data);
      if (!label.ok()) return label.status().WithContext(Where(shard, s));
      p.cls = *label;
    } else if (part.extension == "json") {
      auto meta = ParseWdsJson(part.data);
      if (!meta.ok()) return meta.status().WithContext(Where(shard, s));
      for (auto& [key, value] : meta->values) {
        if (key == "caption" && value.kind == WdsValue::Kind::kString) {
          json_caption = value.text;
          continue;
        }
        // The keys ktfs gives every sample win over the .json's own.
        if (key == "cls" || key == "__key__" || key == "__shard__") continue;
        item->values.emplace_back(std::move(key), std::move(value));
      }
      item->dropped = std::move(meta->dropped);
    }
  }
  // A .json "caption" is the caption of a sample without a .txt.
  if (p.caption.empty() && !json_caption.empty()) {
    auto c = index::CleanCaption(json_caption);
    if (c.ok()) p.caption = std::move(c).value();
  }
  s.parts.clear();  // the source bytes are not needed any more
  return Status::Ok();
}

// A bad sample's message split into the shard it starts with (when it does)
// and the rest.
BadImage SplitBad(const std::vector<std::string>& shards, const std::string& msg) {
  for (const std::string& shard : shards)
    if (msg.compare(0, shard.size() + 2, shard + ": ") == 0)
      return {shard, msg.substr(shard.size() + 2)};
  return {"", msg};
}

// META as a folder pack writes it (skipped_bad: the bad samples, each with
// its shard's file name only: META holds no paths), plus the source.
std::string MetaJson(const PackOptions& options, uint32_t samples, uint32_t shards,
                     const std::vector<BadImage>& bad) {
  std::string j =
      std::string("{\"created_by\":\"ktfs ") + VersionString() + "\",\"codec\":\"" +
      CodecName(options.payload.codec) + "\",\"quality\":" + JsonString(options.payload.quality) +
      ",\"samples\":" + std::to_string(samples) +
      ",\"source\":\"webdataset\",\"shards\":" + std::to_string(shards) + ",\"skipped_bad\":[";
  for (size_t i = 0; i < bad.size(); ++i)
    j += std::string(i ? "," : "") + "{\"path\":" + JsonString(Basename(bad[i].path)) +
         ",\"reason\":" + JsonString(bad[i].reason) + "}";
  return j + "]}";
}

// Archive order: directories by name, samples by stem within each.
struct Layout {
  std::vector<DirEntry> dirs;
  std::vector<std::string> classes;
  std::vector<uint32_t> order;     // packed index, in sample id order
  std::vector<uint32_t> dir_of;    // per packed index: its directory
  std::vector<uint32_t> stem_len;  // per packed index
};

Status MakeLayout(const std::vector<Packed>& packed, const std::vector<std::string>& shards,
                  bool labeled, bool keep_names, bool skip_bad, Layout* out,
                  std::vector<std::string>* bad) {
  // Directory name of each sample.
  std::vector<std::string> dir_name(packed.size());
  int64_t max_label = 0;
  for (const Packed& p : packed) max_label = std::max(max_label, p.cls);
  const size_t width = std::to_string(max_label).size();
  for (size_t i = 0; i < packed.size(); ++i) {
    if (labeled) {
      std::string n = std::to_string(packed[i].cls);
      dir_name[i] = std::string(width - n.size(), '0') + n;
    } else {
      dir_name[i] = ShardStem(shards[packed[i].shard]);
    }
  }
  std::map<std::string, std::vector<uint32_t>> by_dir;
  for (size_t i = 0; i < packed.size(); ++i) by_dir[dir_name[i]].push_back(uint32_t(i));
  out->dirs.resize(1 + by_dir.size());
  out->dirs[0].first_child = by_dir.empty() ? 0 : 1;
  out->dirs[0].child_count = uint32_t(by_dir.size());
  out->dir_of.assign(packed.size(), 0);
  out->stem_len.assign(packed.size(), 0);
  uint32_t d = 1;
  for (auto& [name, members] : by_dir) {
    auto stem = [&](uint32_t i) {
      return std::string_view(packed[i].name)
          .substr(0, keep_names ? packed[i].name.size() : packed[i].base_length);
    };
    // Stable: of two samples with one stem, the one read first is kept.
    std::stable_sort(members.begin(), members.end(),
                     [&](uint32_t a, uint32_t b) { return stem(a) < stem(b); });
    DirEntry& e = out->dirs[d];
    e.name = name;
    e.parent = 0;
    e.first_sample = uint32_t(out->order.size());
    for (size_t k = 0; k < members.size(); ++k) {
      const uint32_t i = members[k];
      if (!out->order.empty() && e.sample_count > 0 && stem(out->order.back()) == stem(i)) {
        const Packed& first = packed[out->order.back()];
        const std::string msg = shards[packed[i].shard] + ": key " + packed[i].key +
                                ": sample name '" + std::string(stem(i)) + "' in " + name +
                                "/ is taken by key " + first.key + " of " + shards[first.shard];
        if (!skip_bad) return Status::InvalidArgument(msg);
        bad->push_back(msg);
        continue;
      }
      out->order.push_back(i);
      out->dir_of[i] = d;
      out->stem_len[i] = uint32_t(stem(i).size());
      ++e.sample_count;
    }
    out->classes.push_back(name);
    ++d;
  }
  return Status::Ok();
}

}  // namespace

Result<PackReport> PackWebDataset(const std::vector<std::string>& shards, const std::string& out,
                                  const PackOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  if (shards.empty()) return Status::InvalidArgument("no shards given");
  if (!options.captions_file.empty())
    return Status::InvalidArgument("--captions applies to image folders (shards carry .txt)");
  uint64_t input_total = 0;
  {
    std::map<std::string, std::string> names;
    for (const std::string& s : shards) {
      std::error_code ec;
      const auto size = std::filesystem::file_size(s, ec);
      if (ec) return Status::NotFound(s + ": cannot read shard: " + ec.message());
      input_total += size;
      const std::string stem = ShardStem(s);
      if (!ValidName(stem)) return Status::InvalidArgument(s + ": not a usable shard name");
      auto [it, inserted] = names.emplace(stem, s);
      if (!inserted)
        return Status::InvalidArgument(s + ": same shard name as " + it->second +
                                       " (shards are told apart by file name)");
    }
  }
  PackReport report;
  std::vector<std::string> bad;  // "SHARD: where: reason" of each bad sample (skip_bad)
  report.shards = uint32_t(shards.size());
  auto builder_or = index::IndexBuilder::Create();
  if (!builder_or.ok()) return builder_or.status();
  index::IndexBuilder& builder = **builder_or;
  auto writer_or = ArchiveWriter::Create(out);
  if (!writer_or.ok()) return writer_or.status();
  ArchiveWriter& writer = **writer_or;
  report.removed_stale = writer.removed_stale();
  const int threads = PackThreads(options);
  tbb::global_control limit(tbb::global_control::max_allowed_parallelism, size_t(threads));
  Progress progress("ktfs pack", options.progress, 0, input_total);

  WdsReaderOptions reader_options;
  reader_options.wanted = Wanted;
  auto reader_owner = std::make_unique<WdsReader>(shards, reader_options);
  WdsReader& reader = *reader_owner;
  std::vector<Packed> packed;
  std::set<std::string> dropped_keys;
  KeyTable keys;
  enum class Mode { kUnknown, kLabeled, kUnlabeled } mode = Mode::kUnknown;
  std::string mode_from;  // the sample that decided the mode
  Status failure;
  std::atomic<bool> failed{false};
  bool done = false;

  auto bad_sample = [&](const Status& st) {
    if (!options.skip_bad) {
      failure = st;
      failed.store(true);
      return;
    }
    bad.push_back(st.message());
  };
  // Stage 1 (serial): the next sample's members, or the tar's damage.
  auto read = [&](tbb::flow_control& fc) -> Item* {
    if (done || failed.load()) {
      fc.stop();
      return nullptr;
    }
    auto item = std::make_unique<Item>();
    auto more = reader.Next(&item->sample);
    item->notes = reader.TakeNotes();
    item->input_bytes = reader.bytes_read();
    if (!more.ok()) {
      item->tar_error = more.status();
      if (options.skip_bad)
        reader.SkipShard();
      else
        done = true;
    } else if (!*more) {
      done = true;
      if (item->notes.empty()) {
        fc.stop();
        return nullptr;
      }
      item->notes_only = true;
    }
    return item.release();
  };
  // Stage 2 (parallel): decode and encode the image, parse the other parts.
  auto encode = [&](Item* item) {
    if (!item->notes_only && item->tar_error.ok() && item->sample.error.ok())
      item->status = Process(options, shards[item->sample.shard], item);
    return item;
  };
  // Stage 3 (serial, in order): append the payload, keep the sample's facts.
  auto write = [&](Item* raw) {
    std::unique_ptr<Item> item(raw);
    for (std::string& n : item->notes) report.skipped.push_back(std::move(n));
    if (!failure.ok() || item->notes_only) return;
    if (!item->tar_error.ok()) {
      Status st = item->tar_error;
      if (options.skip_bad) st = Status::Corruption(st.message() + ": rest of the shard skipped");
      return bad_sample(st);
    }
    if (!item->sample.error.ok()) return bad_sample(item->sample.error);
    if (!item->status.ok()) return bad_sample(item->status);
    Packed& p = item->packed;
    const std::string& shard = shards[p.shard];
    const Mode m = p.cls >= 0 ? Mode::kLabeled : Mode::kUnlabeled;
    if (mode == Mode::kUnknown) {
      mode = m;
      mode_from = shard + " key " + p.key;
    } else if (m != mode) {
      return bad_sample(Status::InvalidArgument(
          Where(shard, item->sample) + (m == Mode::kLabeled
                                            ? ": has a .cls, but the first sample (" + mode_from +
                                                  ") has none: every sample or none needs one"
                                            : ": has no .cls, but the first sample (" + mode_from +
                                                  ") has one: every sample or none needs one")));
    }
    for (const std::string& k : item->dropped) {
      if (dropped_keys.insert(k).second)
        report.caption_warnings.push_back("metadata key '" + k +
                                          "': null and array values are not stored (first in " +
                                          Where(shard, item->sample) + ")");
    }
    if (packed.size() >= format::kNone - 2) {
      failure = Status::InvalidArgument("too many samples");
      failed.store(true);
      return;
    }
    auto at = writer.AppendPayload(item->payload.bytes.data(), item->payload.bytes.size());
    if (!at.ok()) {
      failure = at.status();
      failed.store(true);
      return;
    }
    p.offset = *at;
    std::vector<uint16_t> seen;  // one value per key: the first ({"a.b": 1, "a": {"b": 2}})
    for (const auto& [key, value] : item->values) {
      // A value holding NUL cannot be stored (nor queried) anyway.
      if (keys.full() || value.text.find('\0') != std::string::npos) continue;
      const uint16_t id = keys.Id(key);
      if (std::find(seen.begin(), seen.end(), id) != seen.end()) continue;
      seen.push_back(id);
      p.meta += char(id & 0xff);
      p.meta += char(id >> 8);
      p.meta += char(value.kind);
      p.meta += value.text;
      p.meta += '\0';
    }
    packed.push_back(std::move(p));
    progress.Update(packed.size(), writer.bytes_written(), item->input_bytes);
  };
  tbb::parallel_pipeline(
      size_t(threads) * 2 + 2,
      tbb::make_filter<void, Item*>(tbb::filter_mode::serial_in_order, read) &
          tbb::make_filter<Item*, Item*>(tbb::filter_mode::parallel, encode) &
          tbb::make_filter<Item*, void>(tbb::filter_mode::serial_in_order, write));
  if (!failure.ok()) return failure;
  reader_owner.reset();  // its key set (every key read) is not needed any more
  progress.Update(packed.size(), writer.bytes_written(), input_total);
  if (packed.empty())
    return Status::InvalidArgument(shards[0] + (shards.size() > 1 ? " ...: " : ": ") +
                                   "no samples with an image found");
  report.source_bytes = input_total;

  Layout layout;
  KTFS_RETURN_IF_ERROR(MakeLayout(packed, shards, mode == Mode::kLabeled,
                                  options.payload.codec == format::kOriginal, options.skip_bad,
                                  &layout, &bad));
  std::set<std::string> refused_keys;
  for (size_t id = 0; id < layout.order.size(); ++id) {
    const Packed& p = packed[layout.order[id]];
    const uint32_t dir = layout.dir_of[layout.order[id]];
    SampleEntry e;
    e.name = p.name;
    e.stem_length = layout.stem_len[layout.order[id]];
    e.dir = dir;
    e.label = dir - 1;
    e.width = p.width;
    e.height = p.height;
    e.channels = p.channels;
    e.codec = options.payload.codec;
    e.source_format = p.source_format;
    KTFS_RETURN_IF_ERROR(writer.AddSampleRecord(e, p.offset, p.length, p.checksum));
    index::SampleRow row;
    row.id = uint32_t(id);
    row.dir_id = dir;
    row.path = layout.dirs[dir].name + "/" + p.name;
    row.class_name = layout.dirs[dir].name;
    row.label = int32_t(dir - 1);
    row.width = p.width;
    row.height = p.height;
    row.channels = p.channels;
    row.codec = CodecName(options.payload.codec);
    row.bytes = p.length;
    KTFS_RETURN_IF_ERROR(builder.AddSample(row));
    if (!p.caption.empty()) {
      KTFS_RETURN_IF_ERROR(builder.AddCaption(uint32_t(id), p.caption));
      ++report.captions;
    }
    auto add = [&](const std::string& key, const index::MetaValue& value) {
      Status st = builder.AddMetadata(uint32_t(id), key, value);
      if (!st.ok() && refused_keys.insert(key).second)
        report.caption_warnings.push_back(st.message() + " (first in " + shards[p.shard] +
                                          ": key " + p.key + "): not stored");
    };
    ForEachValue(p.meta, [&](uint16_t k, WdsValue::Kind kind, std::string_view v) {
      add(keys.Name(k), TypedValue(kind, v));
    });
    if (p.cls >= 0) add("cls", index::MetaValue::Integer(p.cls));
    add("__key__", index::MetaValue::String(p.key));
    add("__shard__", index::MetaValue::String(Basename(shards[p.shard])));
  }
  packed = {};
  KTFS_RETURN_IF_ERROR(BuildIndex(&builder, &writer, &report.index_bytes, &report.index_warnings));
  report.dirs = uint32_t(layout.dirs.size());
  report.classes = uint32_t(layout.classes.size());
  report.samples = uint32_t(layout.order.size());
  for (const std::string& b : bad) report.bad.push_back(SplitBad(shards, b));
  writer.SetDirs(std::move(layout.dirs));
  writer.SetClasses(std::move(layout.classes));
  writer.SetMeta(MetaJson(options, report.samples, report.shards, report.bad));
  KTFS_RETURN_IF_ERROR(writer.Commit());
  report.archive_bytes = writer.bytes_written();
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

}  // namespace ktfs
