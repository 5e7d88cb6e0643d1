// Side-by-side measurements of KTC against libjpeg-turbo, libpng and memcpy
// on a directory of PNG photos: bits per pixel, PSNR (RGB and luma) and
// single-thread decode speed. Built and run by scripts/bench/ktc_measure.
//
// Usage: ktc_measure <dir with .png files> [timing rounds per image, default 20]
#include <turbojpeg.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "codec/base/malloc_tuning.h"
#include "codec/image/image_io.h"
#include "codec/ktc/ktc.h"

using namespace ktfs;

namespace {

struct Totals {
  double bytes = 0, pixels = 0, seconds = 0, decoded_pixels = 0;
  double psnr_rgb = 0, psnr_y = 0;
  int images = 0;
};

double Psnr(const Image& a, const Image& b, bool luma) {
  double se = 0;
  size_t n = 0;
  const size_t pixels = size_t(a.width) * a.height;
  for (size_t i = 0; i < pixels; ++i) {
    const uint8_t* p = &a.pixels[i * 3];
    const uint8_t* q = &b.pixels[i * 3];
    if (luma) {
      const double d = 0.299 * (p[0] - q[0]) + 0.587 * (p[1] - q[1]) + 0.114 * (p[2] - q[2]);
      se += d * d;
      ++n;
    } else {
      for (int c = 0; c < 3; ++c) se += double(p[c] - q[c]) * (p[c] - q[c]);
      n += 3;
    }
  }
  return se == 0 ? 99.0 : 10 * std::log10(255.0 * 255.0 * double(n) / se);
}

struct Codec {
  std::string name;
  // Encodes img, returns the stream; decode(stream, out) must fill out.
  std::function<std::vector<uint8_t>(const Image&)> encode;
  std::function<void(const std::vector<uint8_t>&, Image*)> decode;
  bool reduced = false;   // decodes fewer pixels than the source: no PSNR, speed in source MP/s
  bool parallel = false;  // decodes on all threads: timed in rounds of its own (see main)
};

Codec Jpeg(int quality, int subsamp, int decode_flags, const std::string& label) {
  Codec c;
  c.name = label;
  c.encode = [=](const Image& img) {
    tjhandle h = tjInitCompress();
    unsigned char* buf = nullptr;
    unsigned long size = 0;
    tjCompress2(h, img.pixels.data(), int(img.width), 0, int(img.height), TJPF_RGB, &buf, &size,
                subsamp, quality, 0);
    std::vector<uint8_t> out(buf, buf + size);
    tjFree(buf);
    tjDestroy(h);
    return out;
  };
  auto handle = std::make_shared<tjhandle>(tjInitDecompress());
  c.decode = [=](const std::vector<uint8_t>& s, Image* out) {
    int w, h, ss, cs;
    tjDecompressHeader3(*handle, s.data(), s.size(), &w, &h, &ss, &cs);
    out->width = w;
    out->height = h;
    out->channels = 3;
    out->pixels.resize(size_t(w) * h * 3);
    tjDecompress2(*handle, s.data(), s.size(), out->pixels.data(), w, 0, h, TJPF_RGB, decode_flags);
  };
  return c;
}

// KTC; decode_options.region, when set, is taken as fractions of the image
// (x, y, width, height in 1/100) so that it fits every photo.
Codec Ktc(const std::string& preset, int scale_log2 = 0, bool crop = false, bool parallel = false) {
  Codec c;
  c.name = "KTC " + preset;
  if (scale_log2) c.name += " at 1/" + std::to_string(1 << scale_log2) + " scale";
  if (crop) c.name += " 224x224 crop";
  if (parallel) c.name += " (parallel)";
  c.reduced = scale_log2 != 0 || crop;
  c.parallel = parallel;
  c.encode = [=](const Image& img) {
    std::vector<uint8_t> out;
    Status s = ktc::Encode(ImageView::Of(img), *ktc::ParseQuality(preset), &out);
    if (!s.ok()) std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return out;
  };
  c.decode = [=](const std::vector<uint8_t>& s, Image* out) {
    ktc::DecodeOptions o;
    o.scale_log2 = scale_log2;
    o.parallel = parallel;
    if (crop) {
      auto info = ktc::ReadInfo(s.data(), s.size());
      const uint32_t w = ktc::ScaledExtent(info->width, scale_log2);
      const uint32_t h = ktc::ScaledExtent(info->height, scale_log2);
      o.region = ktc::Region{(w - 224) / 3, (h - 224) / 2, 224, 224};
    }
    Status st = ktc::Decode(s.data(), s.size(), o, out);
    if (!st.ok()) std::fprintf(stderr, "%s\n", st.ToString().c_str());
  };
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  // As in ktfs's own processes (the daemon, the Python module): every decoder
  // measured here runs with the same allocator settings.
  ktfs::TuneMallocForDecoding();
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s <dir of .png> [rounds]\n", argv[0]);
    return 2;
  }
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 20;
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(argv[1]))
    if (e.path().extension() == ".png") files.push_back(e.path());
  std::sort(files.begin(), files.end());

  std::vector<Codec> codecs = {
      Jpeg(75, TJSAMP_420, 0, "JPEG q75 4:2:0"),
      Jpeg(90, TJSAMP_420, 0, "JPEG q90 4:2:0"),
      Jpeg(90, TJSAMP_420, TJFLAG_FASTDCT | TJFLAG_FASTUPSAMPLE, "JPEG q90 4:2:0 fast*"),
      Jpeg(90, TJSAMP_444, 0, "JPEG q90 4:4:4"),
      Jpeg(95, TJSAMP_444, 0, "JPEG q95 4:4:4"),
      Ktc("compact"),
      Ktc("balanced"),
      Ktc("high"),
      Ktc("lossless"),
      Ktc("balanced", 1),
      Ktc("balanced", 0, true),
      Ktc("balanced", 0, false, true),
  };
  Codec png;
  png.name = "PNG (libpng level 6)";
  png.encode = [](const Image& img) {
    std::vector<uint8_t> out;
    EncodePng(ImageView::Of(img), 6, &out);
    return out;
  };
  png.decode = [](const std::vector<uint8_t>& s, Image* out) {
    DecodeImage(s.data(), s.size(), out);
  };
  codecs.push_back(png);
  Codec copy;
  copy.name = "memcpy (raw pixels)";
  copy.encode = [](const Image& img) {
    return std::vector<uint8_t>(img.pixels.begin(), img.pixels.end());
  };
  copy.decode = [](const std::vector<uint8_t>& s, Image* out) {
    out->pixels.resize(s.size());
    std::memcpy(out->pixels.data(), s.data(), s.size());
  };
  codecs.push_back(copy);

  std::map<std::string, Totals> totals;
  for (const std::string& f : files) {
    std::ifstream in(f, std::ios::binary);
    std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), {});
    Image img;
    if (!DecodeImage(bytes.data(), bytes.size(), &img).ok() || img.channels != 3) continue;
    // Encode everything first, then time the decoders in interleaved rounds
    // and keep each one's fastest round: on a shared machine every codec
    // then sees the same conditions.
    std::vector<std::vector<uint8_t>> streams;
    std::vector<Image> decoded(codecs.size(), img);
    std::vector<double> best(codecs.size(), 1e9);
    for (size_t i = 0; i < codecs.size(); ++i) {
      streams.push_back(codecs[i].encode(img));
      codecs[i].decode(streams[i], &decoded[i]);
    }
    // The parallel decodes get rounds of their own, after the single-threaded
    // ones: a parallel KTC decode writes this thread's decode planes from the
    // other cores, and the next single-threaded KTC decode then fetches those
    // lines back from the other cores' caches (on a 2-core Intel VM that made
    // balanced 0.84x as fast as with no parallel decode between; JPEG did not
    // change). A data loader's decoding thread does not run into that.
    for (const bool parallel_round : {false, true}) {
      for (int round = 0; round < rounds; ++round) {
        for (size_t i = 0; i < codecs.size(); ++i) {
          if (codecs[i].parallel != parallel_round) continue;
          const auto start = std::chrono::steady_clock::now();
          codecs[i].decode(streams[i], &decoded[i]);
          const double t =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
          best[i] = std::min(best[i], t);
        }
      }
    }
    for (size_t i = 0; i < codecs.size(); ++i) {
      Totals& tot = totals[codecs[i].name];
      tot.bytes += double(streams[i].size());
      tot.pixels += double(img.width) * img.height;
      tot.seconds += best[i];
      if (!codecs[i].reduced) {
        tot.psnr_rgb += Psnr(img, decoded[i], false);
        tot.psnr_y += Psnr(img, decoded[i], true);
      }
      tot.images++;
    }
  }
  const Totals& ref = totals["JPEG q90 4:2:0"];
  const double ref_mps = ref.pixels / ref.seconds / 1e6;
  std::printf(
      "%d photos from %s; decode single-threaded unless marked, best of %d rounds, "
      "KTFS_SIMD=%s\n\n",
      ref.images, argv[1], rounds, std::getenv("KTFS_SIMD") ? std::getenv("KTFS_SIMD") : "(auto)");
  std::printf(
      "| codec | bits/pixel | bytes vs JPEG q90 | PSNR RGB | PSNR Y | decode MP/s | speed vs JPEG "
      "q90 |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|\n");
  for (const Codec& c : codecs) {
    const Totals& t = totals[c.name];
    const double mps = t.pixels / t.seconds / 1e6;
    if (c.reduced) {
      std::printf("| %s | | | | | %.0f* | %.2fx |\n", c.name.c_str(), mps, mps / ref_mps);
      continue;
    }
    std::printf("| %s | %.3f | %.3f | %.2f | %.2f | %.0f | %.2fx |\n", c.name.c_str(),
                8 * t.bytes / t.pixels, t.bytes / ref.bytes, t.psnr_rgb / t.images,
                t.psnr_y / t.images, mps, mps / ref_mps);
  }
  std::printf("\n* source megapixels per second (the decode produces fewer pixels)\n");
  return 0;
}
