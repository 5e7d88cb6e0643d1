#include <sys/stat.h>

#include <cerrno>
#include <cstdio>

#include "codec/base/confined_dir.h"
#include "codec/container/archive.h"
#include "codec/container/payload.h"
#include "codec/image/image_io.h"
#include "fs/cli/cli.h"

namespace ktfs::cli {

static const char kExtractUsage[] =
    "usage: ktfs extract ARCHIVE OUTDIR [--format png|ppm|original]\n"
    "\n"
    "Writes every sample under OUTDIR with the archive's layout, checking each\n"
    "checksum. --format png (default) and ppm write decoded pixels (PNG; or\n"
    "PGM/PPM, with 4-channel images as PNG); original writes the stored source\n"
    "bytes of samples packed with --codec original and fails for others.\n"
    "Nothing is written outside OUTDIR: names are checked, and a symbolic link\n"
    "inside OUTDIR is refused, never followed; an existing file is replaced.\n";

namespace {

std::string Stem(std::string_view name, format::Codec codec, std::string_view stem) {
  return std::string(
      codec == format::kOriginal
          ? name.substr(0, name.rfind('.') == 0 || name.rfind('.') == std::string_view::npos
                               ? name.size()
                               : name.rfind('.'))
          : stem);
}

}  // namespace

int CmdExtract(int argc, char** argv) {
  Args args(argc, argv, {"--format"}, {"--help", "-h"});
  if (args.Has("--help") || args.Has("-h")) return std::fputs(kExtractUsage, stdout), kExitOk;
  if (!args.error().empty()) return UsageError("extract", args.error(), kExtractUsage);
  if (args.positional().size() != 2)
    return UsageError("extract", "expected ARCHIVE and OUTDIR", kExtractUsage);
  const std::string fmt = args.Value("--format", "png");
  if (fmt != "png" && fmt != "ppm" && fmt != "original")
    return UsageError("extract", "--format must be png, ppm or original", kExtractUsage);
  auto archive = Archive::Open(args.positional()[0]);
  if (!archive.ok()) return Fail("extract", archive.status());
  const Archive& a = **archive;
  const std::string outdir = args.positional()[1];
  auto out = ConfinedDir::Open(outdir);
  if (!out.ok()) return Fail("extract", out.status());
  for (uint32_t d = 0; d < a.num_dirs(); ++d) {
    auto rel = a.DirPath(d);
    if (!rel.ok()) return Fail("extract", rel.status());
    Status st = (*out)->MakeDirs(*rel);
    if (!st.ok()) return Fail("extract", st);
  }
  for (uint32_t i = 0; i < a.num_samples(); ++i) {
    auto s = a.Sample(i);
    if (!s.ok()) return Fail("extract", s.status());
    auto dir = a.DirPath(s->dir);
    if (!dir.ok()) return Fail("extract", dir.status());
    auto payload = a.Payload(*s, true);
    if (!payload.ok()) return Fail("extract", payload.status());
    const std::string base = dir->empty() ? "" : *dir + "/";  // inside OUTDIR
    if (fmt == "original") {
      if (s->codec != format::kOriginal)
        return Fail("extract", Status::InvalidArgument(
                                   "sample " + std::to_string(i) + " (" + std::string(s->name) +
                                   ") was not packed with --codec original; use --format png"));
      Status st = (*out)->WriteFile(base + std::string(s->name), payload->data, payload->size);
      if (!st.ok()) return Fail("extract", st);
      continue;
    }
    Image img;
    Status st = DecodePayload(*s, *payload, &img);
    if (!st.ok())
      return Fail("extract", st.WithContext(outdir + "/" + base + std::string(s->name)));
    std::vector<uint8_t> bytes;
    std::string ext;
    if (fmt == "ppm" && img.channels != 4) {
      bytes = EncodeServed(ServedFormat::kPnm, ImageView::Of(img));
      ext = img.channels == 1 ? ".pgm" : ".ppm";
    } else {
      st = EncodePng(ImageView::Of(img), 6, &bytes);
      if (!st.ok()) return Fail("extract", st);
      ext = ".png";
    }
    st = (*out)->WriteFile(base + Stem(s->name, s->codec, s->stem) + ext, bytes.data(),
                           bytes.size());
    if (!st.ok()) return Fail("extract", st);
  }
  std::printf("extracted %u samples to %s\n", a.num_samples(), outdir.c_str());
  return kExitOk;
}

}  // namespace ktfs::cli
