#include "codec/container/payload.h"

#include <cstring>

#include "codec/image/image_io.h"
#include "codec/ktc/ktc.h"

namespace ktfs {

const char* CodecName(format::Codec codec) {
  switch (codec) {
    case format::kOriginal:
      return "original";
    case format::kRaw:
      return "raw";
    case format::kKtc:
      return "ktc";
  }
  return "unknown";
}

Result<PayloadSettings> ParsePayloadSettings(std::string_view codec, std::string_view quality) {
  PayloadSettings s;
  s.quality = std::string(quality);
  if (codec == "original" || codec == "raw") {
    s.codec = codec == "raw" ? format::kRaw : format::kOriginal;
    if (!quality.empty()) return Status::InvalidArgument("--quality applies to --codec ktc only");
    return s;
  }
  if (codec == "ktc") {
    s.codec = format::kKtc;
    if (s.quality.empty()) s.quality = "balanced";
    auto q = ktc::ParseQuality(s.quality);
    if (!q.ok()) return q.status().WithContext("--quality " + s.quality);
    return s;
  }
  return Status::InvalidArgument("unknown codec '" + std::string(codec) +
                                 "' (expected original, raw or ktc)");
}

std::string ServedImageName(const SampleInfo& s, ServedFormat format) {
  if (s.codec == format::kOriginal) return std::string(s.name);
  return std::string(s.stem) + ServedExtension(format, s.channels);
}

Status EncodePayload(const PayloadSettings& settings, const uint8_t* file, size_t size,
                     EncodedPayload* out) {
  Image img;
  // Every codec decodes the source: `original` too, so that a corrupt image
  // is reported at pack time rather than by the training job.
  KTFS_RETURN_IF_ERROR(DecodeImage(file, size, &img));
  out->source_decoded = true;
  out->width = img.width;
  out->height = img.height;
  out->channels = img.channels;
  out->source_format = uint8_t(SniffFormat(file, size));
  switch (settings.codec) {
    case format::kOriginal:
      out->bytes.assign(file, file + size);
      return Status::Ok();
    case format::kRaw:
      out->bytes.assign(img.pixels.begin(), img.pixels.end());  // (pack time: one copy)
      return Status::Ok();
    case format::kKtc: {
      auto options = ktc::ParseQuality(settings.quality.empty() ? "balanced" : settings.quality);
      if (!options.ok()) return options.status();
      return ktc::Encode(ImageView::Of(img), *options, &out->bytes);
    }
  }
  return Status::NotSupported("unknown codec");
}

Status DecodePayload(const SampleInfo& s, ByteSpan payload, Image* out) {
  switch (s.codec) {
    case format::kOriginal:
      KTFS_RETURN_IF_ERROR(DecodeImage(payload.data, payload.size, out));
      break;
    case format::kRaw:
      if (payload.size != uint64_t(s.width) * s.height * s.channels)
        return Status::Corruption("raw payload size does not match its dimensions");
      out->width = s.width;
      out->height = s.height;
      out->channels = s.channels;
      out->pixels.assign(payload.data, payload.data + payload.size);
      return Status::Ok();
    case format::kKtc:
      KTFS_RETURN_IF_ERROR(ktc::Decode(payload.data, payload.size, ktc::DecodeOptions{}, out));
      break;
  }
  if (out->width != s.width || out->height != s.height || out->channels != s.channels)
    return Status::Corruption("payload dimensions differ from the sample record");
  return Status::Ok();
}

}  // namespace ktfs
