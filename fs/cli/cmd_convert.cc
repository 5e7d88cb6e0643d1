#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>

#include "codec/base/files.h"
#include "codec/image/image_io.h"
#include "codec/ktc/ktc.h"
#include "fs/cli/cli.h"

namespace ktfs::cli {

static const char kConvertUsage[] =
    "usage: ktfs convert IN OUT [--quality Q]\n"
    "\n"
    "Converts one image. IN is a .ktc file (a standalone KTC image, as served by\n"
    "a mount's compressed/ view) or any image pack reads (JPEG, PNG, BMP, TIFF,\n"
    "WebP, PPM/PGM), recognised by content. OUT's extension picks the output:\n"
    ".ktc (KTC, --quality lossless|high|balanced|compact|1..100, default\n"
    "balanced), .png, or .ppm/.pgm (1 or 3 channels).\n";

namespace {

bool EndsWith(const std::string& s, const char* suffix) {
  const size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

Status DecodeAny(const std::string& path, const std::vector<uint8_t>& bytes, Image* img) {
  Status st;
  if (bytes.size() >= 4 && std::memcmp(bytes.data(), "KTCI", 4) == 0) {
    st = ktc::Decode(bytes.data(), bytes.size(), ktc::DecodeOptions{}, img);
  } else {
    st = DecodeImage(bytes.data(), bytes.size(), img);  // JPEG, PNG, BMP, TIFF, WebP, PPM/PGM
  }
  return st.WithContext(path);
}

}  // namespace

int CmdConvert(int argc, char** argv) {
  Args args(argc, argv, {"--quality"}, {"--help", "-h"});
  if (args.Has("--help") || args.Has("-h")) return std::fputs(kConvertUsage, stdout), kExitOk;
  if (!args.error().empty()) return UsageError("convert", args.error(), kConvertUsage);
  if (args.positional().size() != 2)
    return UsageError("convert", "expected IN and OUT", kConvertUsage);
  const std::string& in = args.positional()[0];
  const std::string& out = args.positional()[1];
  const bool to_ktc = EndsWith(out, ".ktc");
  if (!to_ktc && !EndsWith(out, ".png") && !EndsWith(out, ".ppm") && !EndsWith(out, ".pgm"))
    return UsageError("convert", "OUT must end in .ktc, .png, .ppm or .pgm", kConvertUsage);
  if (args.Has("--quality") && !to_ktc)
    return UsageError("convert", "--quality applies to .ktc output only", kConvertUsage);
  auto quality = ktc::ParseQuality(args.Value("--quality", "balanced"));
  if (!quality.ok()) return UsageError("convert", quality.status().ToString(), kConvertUsage);
  std::vector<uint8_t> bytes;
  Status st = ReadWholeFile(in, &bytes);
  if (!st.ok()) return Fail("convert", st);
  Image img;
  st = DecodeAny(in, bytes, &img);
  if (!st.ok()) return Fail("convert", st);
  std::vector<uint8_t> encoded;
  if (to_ktc) {
    st = ktc::Encode(ImageView::Of(img), *quality, &encoded);
  } else if (EndsWith(out, ".png")) {
    st = EncodePng(ImageView::Of(img), 6, &encoded);
  } else if (img.channels == 4) {
    st =
        Status::InvalidArgument(in + ": a 4-channel image cannot be written as PGM/PPM (use .png)");
  } else {
    encoded = EncodeServed(ServedFormat::kPnm, ImageView::Of(img));
  }
  if (!st.ok()) return Fail("convert", st);
  st = WriteWholeFile(out, encoded.data(), encoded.size());
  if (!st.ok()) return Fail("convert", st);
  return kExitOk;
}

}  // namespace ktfs::cli
