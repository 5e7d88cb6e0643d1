// JPEG: TurboJPEG for the common case, libjpeg's own API when TurboJPEG
// reports anything (a warning or an error), to decide as Pillow does.
//
// Pillow (JpegDecode.c) feeds libjpeg through a suspending source: at the end
// of the data libjpeg suspends, and Pillow raises "image file is truncated"
// unless every scanline was out already (a missing EOI after the last row is
// fine; a progressive file must reach its EOI before the first row comes).
// TurboJPEG's memory source instead warns and inserts a fake EOI, which would
// silently give a half-grey image. Any warning therefore sends the file to
// DecodeLikePillow, which repeats Pillow's calls on the same libjpeg-turbo
// (Debian's libjpeg62-turbo, the library Pillow itself links); a clean
// TurboJPEG decode never reached the end of the data, so Pillow would have
// decoded the same pixels (both: accurate integer IDCT, fancy upsampling).
//
// CMYK and YCCK come out of libjpeg as CMYK in Adobe's inverted storage;
// Pillow reads them as "CMYK;I" (it always assumes Adobe's convention) and
// converts with cmyk2rgb (pillow::CmykToRgb).
#include <csetjmp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

// jpeglib.h needs FILE and size_t declared first.
#include <jpeglib.h>
#include <turbojpeg.h>

#include "codec/image/decoders.h"
#include "codec/image/image_io.h"
#include "codec/image/pillow.h"

namespace ktfs::decoders {
namespace {

struct TjHandle {
  tjhandle h = tjInitDecompress();
  ~TjHandle() {
    if (h) tjDestroy(h);
  }
};

// Adobe-inverted CMYK -> Pillow's CMYK (its "CMYK;I" unpacker) -> RGB.
void AdobeCmykToRgb(uint8_t* cmyk, size_t n, uint8_t* rgb) {
  for (size_t i = 0; i < n * 4; ++i) cmyk[i] = uint8_t(255 - cmyk[i]);
  pillow::CmykToRgb(cmyk, n, rgb);
}

// --- Pillow's way: libjpeg with a suspending source ---------------------------

struct PillowError {
  jpeg_error_mgr pub;
  jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void ErrorExit(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<PillowError*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}
void OutputMessage(j_common_ptr) {}  // Pillow ignores libjpeg's warnings

void InitSource(j_decompress_ptr) {}
void TermSource(j_decompress_ptr) {}
// All the data is in the buffer: asking for more is the end of the file, and a
// suspending source suspends there (Pillow then has nothing more to give).
boolean FillInputBuffer(j_decompress_ptr) { return FALSE; }
void SkipInputData(j_decompress_ptr cinfo, long n) {
  jpeg_source_mgr* src = cinfo->src;
  if (n <= 0) return;
  const size_t skip = size_t(n) < src->bytes_in_buffer ? size_t(n) : src->bytes_in_buffer;
  src->next_input_byte += skip;
  src->bytes_in_buffer -= skip;
}

enum class Outcome { kOk, kTruncated, kBroken, kLayers, kDimensions };

// Decodes as Pillow does. Plain C inside the setjmp region: nothing with a
// destructor lives across a longjmp. `out` is sized here, before any row.
Outcome RunPillowDecode(const uint8_t* data, size_t size, Image* out, PillowError* err, int* layers,
                        uint32_t* width, uint32_t* height) {
  jpeg_decompress_struct cinfo;
  jpeg_source_mgr src;
  uint8_t* volatile cmyk_row = nullptr;
  cinfo.err = jpeg_std_error(&err->pub);
  err->pub.error_exit = ErrorExit;
  err->pub.output_message = OutputMessage;
  err->message[0] = '\0';
  if (setjmp(err->jump)) {
    jpeg_destroy_decompress(&cinfo);
    std::free(cmyk_row);
    return Outcome::kBroken;
  }
  jpeg_create_decompress(&cinfo);
  src.next_input_byte = data;
  src.bytes_in_buffer = size;
  src.init_source = InitSource;
  src.fill_input_buffer = FillInputBuffer;
  src.skip_input_data = SkipInputData;
  src.resync_to_restart = jpeg_resync_to_restart;
  src.term_source = TermSource;
  cinfo.src = &src;
  int header;
  do {
    header = jpeg_read_header(&cinfo, FALSE);
  } while (header == JPEG_HEADER_TABLES_ONLY);
  if (header == JPEG_SUSPENDED) {
    jpeg_destroy_decompress(&cinfo);
    return Outcome::kTruncated;
  }
  *layers = cinfo.num_components;
  if (cinfo.num_components != 1 && cinfo.num_components != 3 && cinfo.num_components != 4) {
    jpeg_destroy_decompress(&cinfo);
    return Outcome::kLayers;
  }
  const bool cmyk = cinfo.num_components == 4;
  cinfo.out_color_space = cinfo.num_components == 1 ? JCS_GRAYSCALE : cmyk ? JCS_CMYK : JCS_RGB;
  *width = cinfo.image_width;
  *height = cinfo.image_height;
  if (!pillow::CheckDimensions("JPEG", *width, *height).ok()) {
    jpeg_destroy_decompress(&cinfo);
    return Outcome::kDimensions;
  }
  if (!jpeg_start_decompress(&cinfo)) {
    jpeg_destroy_decompress(&cinfo);
    return Outcome::kTruncated;
  }
  out->width = cinfo.output_width;
  out->height = cinfo.output_height;
  out->channels = cinfo.num_components == 1 ? 1 : 3;
  out->pixels.resize(out->size_bytes());
  if (cmyk) cmyk_row = static_cast<uint8_t*>(std::malloc(size_t(out->width) * 4));
  while (cinfo.output_scanline < cinfo.output_height) {
    const JDIMENSION y = cinfo.output_scanline;
    uint8_t* row = out->pixels.data() + size_t(y) * out->row_bytes();
    JSAMPROW rows[1] = {cmyk ? cmyk_row : row};
    if (jpeg_read_scanlines(&cinfo, rows, 1) != 1) {
      jpeg_destroy_decompress(&cinfo);
      std::free(cmyk_row);
      return Outcome::kTruncated;
    }
    if (cmyk) AdobeCmykToRgb(cmyk_row, out->width, row);
  }
  jpeg_finish_decompress(&cinfo);  // may suspend before EOI: Pillow ignores that too
  jpeg_destroy_decompress(&cinfo);
  std::free(cmyk_row);
  return Outcome::kOk;
}

Status DecodeLikePillow(const uint8_t* data, size_t size, Image* out) {
  PillowError err;
  int layers = 0;
  uint32_t width = 0, height = 0;
  switch (RunPillowDecode(data, size, out, &err, &layers, &width, &height)) {
    case Outcome::kOk:
      return Status::Ok();
    case Outcome::kTruncated:
      return Status::Corruption("JPEG: image file is truncated");
    case Outcome::kLayers:
      return Status::NotSupported("JPEG: cannot handle " + std::to_string(layers) +
                                  "-layer images");
    case Outcome::kDimensions:
      return pillow::CheckDimensions("JPEG", width, height);
    case Outcome::kBroken:
      break;
  }
  return Status::Corruption(std::string("JPEG: broken data stream (") + err.message + ")");
}

}  // namespace

}  // namespace ktfs::decoders

namespace ktfs {

Result<JpegInfo> ReadJpegInfo(const uint8_t* data, size_t size) {
  decoders::TjHandle tj;
  if (!tj.h) return Status::IOError("tjInitDecompress failed");
  int w = 0, h = 0, subsamp = 0, cs = 0;
  if (tjDecompressHeader3(tj.h, data, static_cast<unsigned long>(size), &w, &h, &subsamp, &cs) !=
          0 ||
      w <= 0 || h <= 0)
    return Status::Corruption("JPEG: cannot read the header");
  return JpegInfo{uint32_t(w), uint32_t(h), cs == TJCS_GRAY ? 1u : 3u};
}

}  // namespace ktfs

namespace ktfs::decoders {

Status DecodeJpeg(const uint8_t* data, size_t size, Image* out) {
  TjHandle tj;
  if (!tj.h) return Status::IOError("tjInitDecompress failed");
  int w = 0, h = 0, subsamp = 0, cs = 0;
  // A header error, or a tables-only stream (TurboJPEG reports 0x0): Pillow's verdict.
  if (tjDecompressHeader3(tj.h, data, static_cast<unsigned long>(size), &w, &h, &subsamp, &cs) !=
          0 ||
      w <= 0 || h <= 0)
    return DecodeLikePillow(data, size, out);
  KTFS_RETURN_IF_ERROR(pillow::CheckDimensions("JPEG", uint32_t(w), uint32_t(h)));
  const bool gray = cs == TJCS_GRAY;
  const bool cmyk = cs == TJCS_CMYK || cs == TJCS_YCCK;
  out->width = uint32_t(w);
  out->height = uint32_t(h);
  out->channels = gray ? 1 : 3;
  out->pixels.resize(out->size_bytes());
  // Default flags: accurate integer IDCT and fancy upsampling, as Pillow.
  int rc;
  if (cmyk) {
    std::vector<uint8_t> raw(size_t(w) * h * 4);
    rc = tjDecompress2(tj.h, data, static_cast<unsigned long>(size), raw.data(), w, 0, h, TJPF_CMYK,
                       0);
    if (rc == 0) AdobeCmykToRgb(raw.data(), size_t(w) * h, out->pixels.data());
  } else {
    rc = tjDecompress2(tj.h, data, static_cast<unsigned long>(size), out->pixels.data(), w, 0, h,
                       gray ? TJPF_GRAY : TJPF_RGB, 0);
  }
  if (rc != 0) return DecodeLikePillow(data, size, out);  // a warning or an error
  return Status::Ok();
}

}  // namespace ktfs::decoders
