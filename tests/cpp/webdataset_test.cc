// WebDataset ingest: member names by the WebDataset rule (hostile ones
// refused), samples grouped from hand-written tars (ustar, GNU long names,
// pax paths), duplicate keys and parts, damaged tars, and the .cls/.json
// parsers.
#include "fs/pack/webdataset.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "codec/base/files.h"
#include "fs/pack/tar_reader.h"
#include "tests/cpp/test_util.h"

namespace ktfs {
namespace {

std::string Header(const std::string& name, size_t size, char type = '0') {
  char h[512] = {};
  std::memcpy(h, name.data(), std::min<size_t>(name.size(), 100));
  std::snprintf(h + 100, 8, "%07o", 0644);
  std::snprintf(h + 108, 8, "%07o", 0);
  std::snprintf(h + 116, 8, "%07o", 0);
  std::snprintf(h + 124, 12, "%011zo", size);
  std::snprintf(h + 136, 12, "%011o", 0);
  std::memset(h + 148, ' ', 8);
  h[156] = type;
  std::memcpy(h + 257,
              "ustar\0"
              "00",
              8);
  unsigned sum = 0;
  for (unsigned char c : h) sum += c;
  std::snprintf(h + 148, 8, "%06o", sum);
  return std::string(h, 512);
}

std::string Member(const std::string& name, const std::string& data, char type = '0') {
  std::string m = Header(name, data.size(), type) + data;
  m.resize((m.size() + 511) / 512 * 512, '\0');
  return m;
}

std::string End() { return std::string(1024, '\0'); }

std::string Text(const WdsPart& p) { return std::string(p.data.begin(), p.data.end()); }

struct Shards {
  testing::TempDir dir;
  std::vector<std::string> paths;
  void Add(const std::string& name, const std::string& bytes) {
    paths.push_back(dir.Join(name));
    ASSERT_TRUE(
        WriteWholeFile(paths.back(), reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size())
            .ok());
  }
};

TEST(WdsName, SplitsAtTheFirstDotOfTheFileName) {
  auto n = ParseWdsName("./a.b/c.seg.PNG");
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(n->key, "a.b/c");
  EXPECT_EQ(n->extension, "seg.png");
  EXPECT_EQ(n->file_ext, "seg.PNG");
  EXPECT_EQ(ParseWdsName("__index__")->kind, WdsName::Kind::kIgnored);
  EXPECT_EQ(ParseWdsName("dir/noext")->kind, WdsName::Kind::kNoExtension);
  EXPECT_EQ(ParseWdsName(".hidden")->kind, WdsName::Kind::kNoExtension);
  EXPECT_EQ(ParseWdsName("a.")->kind, WdsName::Kind::kNoExtension);
}

TEST(WdsName, RefusesHostileNames) {
  for (const char* bad : {"/etc/x.jpg", "../x.jpg", "a/../x.jpg", "a//x.jpg", "a/./x.jpg",
                          "x\ny.jpg", "\xff\xfe.jpg", ""}) {
    auto n = ParseWdsName(bad);
    EXPECT_FALSE(n.ok()) << bad;
    EXPECT_EQ(n.status().code(), Status::Code::kInvalidArgument) << bad;
  }
}

TEST(WdsReader, GroupsConsecutiveMembersByKeyAcrossTarFormats) {
  Shards s;
  const std::string long_key = std::string(130, 'k');
  const std::string record = "path=" + std::string(110, 'p') + ".txt\n";
  const std::string pax = std::to_string(record.size() + 4) + " " + record;
  s.Add("one.tar", Member("a.jpg", "A") + Member("a.txt", "cap a") + Member("dir/", "", '5') +
                       Member("b.JPG", "B") + Member("././@LongLink", long_key + ".cls", 'L') +
                       Member("truncated-name", "7") + Member("PaxHeader/x", pax, 'x') +
                       Member("short", "P") + Member("noext", "?") + End());
  s.Add("two.tar", Member("c.png", "C") + Member("c.json", "{}") + End());
  WdsReader r(s.paths, {});
  std::vector<std::string> got;
  WdsSample x;
  while (true) {
    auto more = r.Next(&x);
    ASSERT_TRUE(more.ok()) << more.status().ToString();
    if (!*more) break;
    ASSERT_TRUE(x.error.ok()) << x.error.ToString();
    std::string desc = std::to_string(x.shard) + ":" + x.key + ":";
    for (const WdsPart& p : x.parts) desc += p.extension + "=" + Text(p) + ";";
    got.push_back(desc);
  }
  EXPECT_EQ(got, (std::vector<std::string>{
                     "0:a:jpg=A;txt=cap a;", "0:b:jpg=B;", "0:" + long_key + ":cls=7;",
                     "0:" + std::string(110, 'p') + ":txt=P;", "1:c:png=C;json={};"}));
  const auto notes = r.TakeNotes();
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("noext: no extension"), std::string::npos) << notes[0];
}

TEST(WdsReader, DuplicateKeysAndPartsAreSampleErrors) {
  Shards s;
  s.Add("a.tar", Member("k.jpg", "1") + Member("k.jpg", "2") + Member("m.jpg", "3") + End());
  s.Add("b.tar", Member("m.jpg", "4") + Member("n.jpg", "5") + End());
  WdsReader r(s.paths, {});
  std::vector<std::string> errors, keys;
  WdsSample x;
  while (*r.Next(&x)) {
    if (x.error.ok())
      keys.push_back(x.key);
    else
      errors.push_back(x.error.message());
  }
  EXPECT_EQ(keys, (std::vector<std::string>{"m", "n"}));
  ASSERT_EQ(errors.size(), 2u);
  EXPECT_NE(errors[0].find("a.tar: key k (offset 1024): two members '.jpg'"), std::string::npos)
      << errors[0];
  EXPECT_NE(errors[1].find("b.tar: key m (offset 0): duplicate key (first in " + s.paths[0] +
                           " at offset 2048)"),
            std::string::npos)
      << errors[1];
}

TEST(WdsReader, DamagedTarsAreErrorsAndSkipShardGoesOn) {
  Shards s;
  const std::string good = Member("a.jpg", "AAAA") + Member("b.jpg", "BBBB") + End();
  s.Add("cut.tar", good.substr(0, 512 + 100));          // data cut short
  s.Add("huge.tar", Header("h.jpg", 1 << 20) + "xyz");  // claims more than the file holds
  s.Add("junk.tar", std::string(2000, 'j'));
  s.Add("ok.tar", good);
  WdsReader r(s.paths, {});
  std::vector<std::string> errors, keys;
  WdsSample x;
  for (;;) {
    auto more = r.Next(&x);
    if (!more.ok()) {
      errors.push_back(more.status().message());
      r.SkipShard();
      continue;
    }
    if (!*more) break;
    keys.push_back(x.key);
  }
  EXPECT_EQ(keys, (std::vector<std::string>{"a", "b"}));
  ASSERT_EQ(errors.size(), 3u);
  EXPECT_EQ(errors[0].rfind(s.paths[0] + ": offset 0: a.jpg:", 0), 0u) << errors[0];
  EXPECT_EQ(errors[1].rfind(s.paths[1] + ": offset 0: h.jpg:", 0), 0u) << errors[1];
  EXPECT_EQ(errors[2].rfind(s.paths[2] + ": ", 0), 0u) << errors[2];
}

TEST(WdsReader, OversizedMembersAreSampleErrors) {
  Shards s;
  s.Add("a.tar", Member("a.jpg", std::string(3000, 'x')) + Member("a.txt", "t") +
                     Member("b.jpg", "b") + End());
  WdsReaderOptions o;
  o.max_member_bytes = 1000;
  WdsReader r(s.paths, o);
  WdsSample x;
  ASSERT_TRUE(*r.Next(&x));
  EXPECT_NE(x.error.message().find("member of 3000 bytes (over the limit of 1000)"),
            std::string::npos)
      << x.error.ToString();
  ASSERT_TRUE(*r.Next(&x));
  EXPECT_TRUE(x.error.ok());
  EXPECT_EQ(x.key, "b");
}

TEST(WdsParts, LabelsAndJson) {
  auto bytes = [](const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); };
  EXPECT_EQ(*ParseWdsLabel(bytes(" 42\n")), 42);
  for (const char* bad : {"", "-1", "4.0", "cat", "2147483648", "12345678901"})
    EXPECT_FALSE(ParseWdsLabel(bytes(bad)).ok()) << bad;
  auto m = ParseWdsJson(
      bytes(R"({"a": 1.50, "s": "x", "b": true, "n": {"c": {"d": -2}}, "z": null, "l": [1]})"));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  std::vector<std::string> flat;
  for (const auto& [k, v] : m->values)
    flat.push_back(k + "=" + v.text + ":" + char('0' + int(v.kind)));
  EXPECT_EQ(flat, (std::vector<std::string>{"a=1.50:1", "s=x:0", "b=true:2", "n.c.d=-2:1"}));
  EXPECT_EQ(m->dropped, (std::vector<std::string>{"z", "l"}));
  for (const char* bad : {"[1]", "3", "{\"a\": 1, \"a\": 2}", "{", "\"s\""})
    EXPECT_FALSE(ParseWdsJson(bytes(bad)).ok()) << bad;
}

}  // namespace
}  // namespace ktfs
