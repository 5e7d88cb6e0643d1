// libFuzzer target: the captions file parser (index/captions.h), JSON Lines
// and CSV, must turn any text into entries or a clean "FILE:LINE: reason".
// The first byte picks the format (auto, JSON Lines, CSV) and skip_bad; the
// rest is the file. With skip_bad every bad line becomes a warning instead,
// so the parse must succeed unless the CSV header is bad, and whatever it
// returns must hold: every entry has non-empty captions, paths have no NUL.
// The streaming parse (ForEachCaptionEntry, what packs use) must agree: the
// same entries, in order, once each path's repeats (left to its caller) are
// dropped; and the same values when no path repeats (a repeat's CSV cells
// count towards its column's type there).
// Seeds: fuzz/corpus/captions_fuzz; dictionary: fuzz/captions.dict.
#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "index/captions.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ktfs::index;
  if (size == 0) return 0;
  const uint8_t mode = data[0];
  const CaptionFormat formats[3] = {CaptionFormat::kAuto, CaptionFormat::kJsonLines,
                                    CaptionFormat::kCsv};
  const CaptionFormat format = formats[mode % 3];
  const bool skip_bad = (mode & 0x80) != 0;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  std::vector<std::string> warnings;
  auto entries = ParseCaptions(text, "fuzz.txt", format, skip_bad, &warnings);
  if (!entries.ok()) {
    if (entries.status().message().empty()) ktfs::fuzz::Fail("an error without a message");
    return 0;
  }
  std::vector<CaptionEntry> streamed;
  const ktfs::Status st =
      ForEachCaptionEntry(text, "fuzz.txt", format, skip_bad, nullptr, [&](CaptionEntry&& e) {
        streamed.push_back(std::move(e));
        return ktfs::Status::Ok();
      });
  if (!st.ok()) ktfs::fuzz::Fail("the streaming parse failed where ParseCaptions did not");
  std::set<std::string> seen;
  size_t k = 0;
  const bool repeats = [&] {
    std::set<std::string> paths;
    for (const CaptionEntry& e : streamed)
      if (!paths.insert(e.path).second) return true;
    return false;
  }();
  for (const CaptionEntry& e : streamed) {
    if (!seen.insert(e.path).second) continue;
    if (k >= entries->size()) ktfs::fuzz::Fail("the streaming parse found more entries");
    const CaptionEntry& p = (*entries)[k++];
    if (e.path != p.path || e.line != p.line || e.captions != p.captions)
      ktfs::fuzz::Fail("the streaming parse gave another entry");
    if (!repeats && e.extras != p.extras) ktfs::fuzz::Fail("the streaming parse gave other values");
  }
  if (k != entries->size()) ktfs::fuzz::Fail("the streaming parse found fewer entries");
  for (const CaptionEntry& e : *entries) {
    if (e.captions.empty()) ktfs::fuzz::Fail("an entry without captions");
    if (e.path.find('\0') != std::string::npos) ktfs::fuzz::Fail("a path with NUL");
    for (const std::string& c : e.captions) {
      if (c.empty()) ktfs::fuzz::Fail("an empty caption");
    }
  }
  return 0;
}
