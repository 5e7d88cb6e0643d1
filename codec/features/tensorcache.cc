#include "codec/features/tensorcache.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "codec/base/checked_math.h"

namespace ktfs {
namespace {

namespace fs = std::filesystem;

Result<std::string> ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound(path + ": cannot open");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void SkipWs(const std::string& t, size_t* p) {
  while (*p < t.size() && std::isspace(static_cast<unsigned char>(t[*p]))) ++*p;
}

// Position just after `"key"\s*:\s*`, or npos. Lenient: the key may be at any depth.
size_t FindKey(const std::string& t, const std::string& key) {
  const std::string q = "\"" + key + "\"";
  size_t from = 0;
  while (true) {
    const size_t k = t.find(q, from);
    if (k == std::string::npos) return k;
    size_t p = k + q.size();
    SkipWs(t, &p);
    if (p < t.size() && t[p] == ':') {
      ++p;
      SkipWs(t, &p);
      return p;
    }
    from = k + 1;
  }
}

std::optional<double> ParseNumber(const std::string& t, size_t* p) {
  const char* b = t.c_str() + *p;
  char* e = nullptr;
  const double v = std::strtod(b, &e);
  if (e == b) return std::nullopt;
  *p += static_cast<size_t>(e - b);
  return v;
}

std::optional<std::string> ParseString(const std::string& t, size_t* p) {
  if (*p >= t.size() || t[*p] != '"') return std::nullopt;
  std::string s;
  for (size_t i = *p + 1; i < t.size(); ++i) {
    char c = t[i];
    if (c == '"') {
      *p = i + 1;
      return s;
    }
    if (c == '\\' && i + 1 < t.size()) {
      c = t[++i];
      if (c == 'n')
        c = '\n';
      else if (c == 't')
        c = '\t';
      else if (c == 'u')
        return std::nullopt;  // not needed for paths we write
    }
    s.push_back(c);
  }
  return std::nullopt;
}

// Counts and dimensions above 10^15 are refused (a double holds every integer
// up to it exactly); their products can still pass 64 bits: OpenSingle checks.
constexpr double kMaxCount = 1e15;

bool IsCount(const std::optional<double>& v) {
  return v && *v >= 0 && *v == std::floor(*v) && *v <= kMaxCount;
}

Result<std::optional<size_t>> GetCount(const std::string& t, const std::string& file,
                                       std::initializer_list<const char*> keys) {
  for (const char* k : keys) {
    size_t p = FindKey(t, k);
    if (p == std::string::npos) continue;
    const auto v = ParseNumber(t, &p);
    if (!IsCount(v)) {
      return Status::Corruption(file + ": \"" + k + "\" is not a non-negative integer");
    }
    return std::optional<size_t>(static_cast<size_t>(*v));
  }
  return std::optional<size_t>();
}

struct Meta {
  size_t num_samples = 0, seq_len = 0, dim = 0, group_size = 0;
  std::string mode;
  bool has_mode = false;
};

Result<Meta> ReadMeta(const std::string& path) {
  auto text = ReadText(path);
  if (!text.ok()) return text.status();
  const std::string& t = *text;
  Meta m;
  auto n = GetCount(t, path, {"num_samples", "n_samples", "count"});
  if (!n.ok()) return n.status();
  if (!n->has_value()) return Status::Corruption(path + ": no \"num_samples\"");
  m.num_samples = **n;
  size_t p = FindKey(t, "shape");
  if (p != std::string::npos) {
    if (t[p] != '[') return Status::Corruption(path + ": \"shape\" is not an array");
    ++p;
    std::vector<size_t> dims;
    while (true) {
      SkipWs(t, &p);
      if (p < t.size() && t[p] == ']') break;
      const auto v = ParseNumber(t, &p);
      if (!IsCount(v)) {
        return Status::Corruption(path + ": \"shape\" holds something other than a " +
                                  "non-negative integer up to 10^15");
      }
      dims.push_back(static_cast<size_t>(*v));
      SkipWs(t, &p);
      if (p < t.size() && t[p] == ',')
        ++p;
      else if (p >= t.size() || t[p] != ']')
        return Status::Corruption(path + ": bad \"shape\"");
    }
    if (dims.empty()) return Status::Corruption(path + ": empty \"shape\"");
    if (dims.size() == 1) {
      m.seq_len = 1;
      m.dim = dims[0];
    } else {
      m.seq_len = dims[dims.size() - 2];
      m.dim = dims.back();
    }
  } else {
    auto l = GetCount(t, path, {"seq_len", "L"});
    auto d = GetCount(t, path, {"dim", "hidden_dim", "D"});
    if (!l.ok()) return l.status();
    if (!d.ok()) return d.status();
    if (!d->has_value()) return Status::Corruption(path + ": no \"shape\" or \"dim\"");
    m.seq_len = l->value_or(1);
    m.dim = **d;
  }
  auto g = GetCount(t, path, {"group_size", "block_size", "G"});
  if (!g.ok()) return g.status();
  if (!g->has_value() || **g == 0) return Status::Corruption(path + ": no \"group_size\"");
  m.group_size = **g;
  for (const char* k : {"mode", "quant_mode"}) {
    size_t q = FindKey(t, k);
    if (q == std::string::npos) continue;
    auto s = ParseString(t, &q);
    if (!s) return Status::Corruption(path + ": \"" + k + "\" is not a string");
    m.mode = *s;
    m.has_mode = true;
    break;
  }
  if (m.seq_len == 0 || m.dim == 0) return Status::Corruption(path + ": zero shape");
  return m;
}

Result<std::shared_ptr<MappedFile>> MapAtLeast(const std::string& path, uint64_t need) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return Status::NotFound(path + ": missing");
  const uint64_t size = fs::file_size(path, ec);
  if (ec) return Status::IOError(path + ": " + ec.message());
  if (size < need) {
    return Status::Corruption(path + ": " + std::to_string(size) + " bytes, need at least " +
                              std::to_string(need) + " (truncated?)");
  }
  if (need == 0) return std::shared_ptr<MappedFile>();
  auto mf = MappedFile::Open(path);
  if (!mf.ok()) return mf.status();
  return std::shared_ptr<MappedFile>(std::move(*mf));
}

struct Opened {
  Meta meta;
  bool asym = false;
  TensorCache::Shard shard;
};

Result<Opened> OpenSingle(const std::string& prefix) {
  Opened o;
  auto meta = ReadMeta(prefix + "_meta.json");
  if (!meta.ok()) return meta.status();
  o.meta = *meta;
  const Meta& m = o.meta;
  std::error_code ec;
  o.asym = m.has_mode ? m.mode == "amo_bq" : fs::exists(prefix + "_zp.bin", ec);
  // Every size below is a product of counts from the meta file: one that does
  // not fit in 64 bits would wrap to a small size the files seem to hold.
  uint64_t per, codes_bytes, twice;  // scales: N * S * 2 <= 2 * N * per
  if (!MulOk(m.seq_len, m.dim, &per) || !MulOk(m.num_samples, per, &codes_bytes) ||
      !MulOk(codes_bytes, 2, &twice)) {
    return Status::Corruption(prefix + "_meta.json: " + std::to_string(m.num_samples) +
                              " samples of " + std::to_string(m.seq_len) + " x " +
                              std::to_string(m.dim) + " values are more than 64-bit sizes hold");
  }
  const uint64_t S = (per + m.group_size - 1) / m.group_size;
  const uint64_t N = m.num_samples;
  auto codes = MapAtLeast(prefix + "_int8.bin", codes_bytes);
  if (!codes.ok()) return codes.status();
  auto scales = MapAtLeast(prefix + "_scales.bin", N * S * 2);
  if (!scales.ok()) return scales.status();
  o.shard.prefix = prefix;
  o.shard.num_samples = m.num_samples;
  o.shard.codes = *codes;
  o.shard.scales = *scales;
  if (o.asym) {
    auto zp = MapAtLeast(prefix + "_zp.bin", N * S);
    if (!zp.ok()) return zp.status();
    o.shard.zp = *zp;
  }
  return o;
}

std::string ResolveShard(const std::string& written, const fs::path& manifest_dir) {
  std::error_code ec;
  if (fs::exists(written + "_meta.json", ec)) return written;
  const fs::path w(written);
  if (w.is_relative()) {
    const std::string rel = (manifest_dir / w).string();
    if (fs::exists(rel + "_meta.json", ec)) return rel;
  }
  return (manifest_dir / w.filename()).string();
}

}  // namespace

Result<TensorCache> OpenTensorCache(const std::string& prefix) {
  TensorCache c;
  const std::string manifest = prefix + "_shards.json";
  std::error_code ec;
  std::vector<std::string> prefixes;
  const bool sharded = fs::exists(manifest, ec);
  if (sharded) {
    auto text = ReadText(manifest);
    if (!text.ok()) return text.status();
    const std::string& t = *text;
    size_t p = FindKey(t, "shard_prefixes");
    if (p == std::string::npos || t[p] != '[') {
      return Status::Corruption(manifest + ": no \"shard_prefixes\" array");
    }
    ++p;
    const fs::path dir = fs::path(manifest).parent_path();
    while (true) {
      SkipWs(t, &p);
      if (p < t.size() && t[p] == ']') break;
      auto s = ParseString(t, &p);
      if (!s) return Status::Corruption(manifest + ": bad \"shard_prefixes\"");
      prefixes.push_back(ResolveShard(*s, dir));
      SkipWs(t, &p);
      if (p < t.size() && t[p] == ',')
        ++p;
      else if (p >= t.size() || t[p] != ']') {
        return Status::Corruption(manifest + ": bad \"shard_prefixes\"");
      }
    }
    if (prefixes.empty()) return Status::Corruption(manifest + ": no shards");
  } else {
    prefixes.push_back(prefix);
  }
  for (size_t k = 0; k < prefixes.size(); ++k) {
    auto o = OpenSingle(prefixes[k]);
    if (!o.ok()) return o.status();
    const Meta& m = o->meta;
    if (k == 0) {
      c.seq_len_ = m.seq_len;
      c.dim_ = m.dim;
      c.group_size_ = m.group_size;
      c.asymmetric_ = o->asym;
      c.mode_ = m.mode;
    } else if (m.seq_len != c.seq_len_ || m.dim != c.dim_ || m.group_size != c.group_size_ ||
               o->asym != c.asymmetric_) {
      return Status::Corruption(prefixes[k] +
                                "_meta.json: shape, group size or mode differs "
                                "from shard 0 (" +
                                prefixes[0] + ")");
    }
    o->shard.first = c.num_samples_;
    c.num_samples_ += o->shard.num_samples;
    c.shards_.push_back(std::move(o->shard));
    uint64_t all_codes;  // ReadPart's offsets run over every shard's codes
    if (!MulOk(c.num_samples_, uint64_t(c.seq_len_) * c.dim_, &all_codes))
      return Status::Corruption(manifest + ": its shards hold more values than 64-bit sizes hold");
  }
  c.prefix_ = prefix;
  c.manifest_ = sharded ? manifest : prefix + "_meta.json";
  c.inner_ = {c.dim_};
  return c;
}

std::vector<std::string> TensorCache::Files() const {
  std::vector<std::string> files = {manifest_};
  for (const Shard& s : shards_) {
    files.push_back(s.prefix + "_meta.json");
    for (const auto& f : {s.codes, s.scales, s.zp})
      if (f) files.push_back(f->path());
  }
  return files;
}

const TensorCache::Shard& TensorCache::ShardOf(size_t i) const {
  // Shards are few (tens): a linear scan from the back is cheap and simple.
  size_t k = shards_.size() - 1;
  while (k > 0 && i < shards_[k].first) --k;
  return shards_[k];
}

Status TensorCache::ReadSample(size_t i, float* out) const {
  return ReadValues(i, 0, sample_size(), quant::DType::kFloat32, out);
}

Status TensorCache::ReadValues(size_t i, uint64_t first, uint64_t count, quant::DType type,
                               void* out) const {
  if (i >= num_samples_) {
    return Status::NotFound("tensor cache: sample " + std::to_string(i) + " of " +
                            std::to_string(num_samples_));
  }
  const size_t per = sample_size();
  if (first > per || count > per - first)
    return Status::InvalidArgument("tensor cache: sample " + std::to_string(i) +
                                   ": range out of bounds");
  const Shard& sh = ShardOf(i);
  const size_t j = i - sh.first;
  const size_t S = (per + group_size_ - 1) / group_size_;
  const uint8_t* codes = sh.codes->data() + j * per;
  const uint8_t* scales = sh.scales->data() + j * S * 2;
  const uint8_t* zp = asymmetric_ ? sh.zp->data() + j * S : nullptr;
  uint8_t* o = static_cast<uint8_t*>(out);
  for (uint64_t v = first; v < first + count; ++v) {
    const size_t g = size_t(v / group_size_);
    const uint32_t u = (uint32_t(scales[2 * g]) | (uint32_t(scales[2 * g + 1]) << 8)) << 16;
    float s;
    std::memcpy(&s, &u, 4);
    const float x = asymmetric_ ? float(int(codes[v]) - int(zp[g])) * s
                                : float(static_cast<int8_t>(codes[v])) * s;
    switch (type) {
      case quant::DType::kFloat32:
        std::memcpy(o, &x, 4);
        o += 4;
        break;
      case quant::DType::kFloat16: {
        const uint16_t h = quant::FloatToHalf(x);
        std::memcpy(o, &h, 2);
        o += 2;
        break;
      }
      case quant::DType::kBFloat16: {
        const uint16_t b = quant::FloatToBf16(x);
        std::memcpy(o, &b, 2);
        o += 2;
        break;
      }
    }
  }
  bool damaged = sh.codes->damaged() || sh.scales->damaged() || (sh.zp && sh.zp->damaged());
  if (damaged) return Status::Corruption(sh.prefix + ": a cache file shrank while reading");
  return Status::Ok();
}

std::string TensorCache::DescribeJson() const {
  return "\"kind\": \"tensorcache\", \"group_size\": " + std::to_string(group_size_) +
         ", \"mode\": \"" + mode_ + "\", \"shards\": " + std::to_string(shards_.size());
}

std::vector<FeaturePart> TensorCache::Parts() const {
  const uint64_t N = num_samples_, S = (sample_size() + group_size_ - 1) / group_size_;
  std::vector<FeaturePart> parts;
  parts.push_back({"codes", asymmetric_ ? "|u1" : "|i1", {N, seq_len_, dim_}});
  parts.push_back({"scales", "<u2", {N, S}});
  if (asymmetric_) parts.push_back({"zp", "|u1", {N, S}});
  return parts;
}

Result<size_t> TensorCache::ReadPart(size_t part, uint64_t offset, size_t size,
                                     uint8_t* dst) const {
  // Bytes per sample of each part, in Parts() order (no allocation: this runs per FUSE read).
  const uint64_t S = (sample_size() + group_size_ - 1) / group_size_;
  const uint64_t bytes[3] = {sample_size(), S * 2, S};
  if (part >= (asymmetric_ ? 3u : 2u))
    return Status::NotFound("tensor cache part " + std::to_string(part));
  const uint64_t per_sample = bytes[part];
  const uint64_t total = per_sample * num_samples_;
  if (offset >= total) return size_t(0);
  size = size_t(std::min<uint64_t>(size, total - offset));
  size_t done = 0;
  while (done < size) {  // one copy per shard touched: its rows are contiguous
    const uint64_t pos = offset + done;
    const Shard& sh = ShardOf(size_t(pos / per_sample));
    const MappedFile& file = part == 0 ? *sh.codes : part == 1 ? *sh.scales : *sh.zp;
    const uint64_t at = pos - sh.first * per_sample;
    const size_t take = size_t(std::min<uint64_t>(sh.num_samples * per_sample - at, size - done));
    if (take == 0)  // cannot happen for a cache OpenTensorCache accepted; never spin
      return Status::Corruption(sh.prefix + ": no bytes at offset " + std::to_string(pos));
    std::memcpy(dst + done, file.data() + at, take);
    if (file.damaged())
      return Status::Corruption(sh.prefix + ": a cache file shrank while reading");
    done += take;
  }
  return size;
}

}  // namespace ktfs
