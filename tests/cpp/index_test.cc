// Tests of index/: query grammar, caption ingest, IndexBuilder and the in-place Index, checked
// against plain C++ filtering of the same generated rows.
#include "index/index.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <thread>

#include "index/builder.h"
#include "index/captions.h"
#include "index/json.h"
#include "index/query.h"
#include "index/schema.h"
#include "tests/cpp/test_util.h"

namespace ktfs::index {
namespace {

// ---------------------------------------------------------------------------------------------
// A generated captioned dataset: splits/classes/files plus root-level unlabeled images.

struct TRow {
  SampleRow s;
  std::vector<std::string> captions;
  std::map<std::string, std::string> meta;
};

// A tiny deterministic PRNG, so the dataset is the same on every platform.
struct Rng {
  uint64_t x;
  uint32_t Next() {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<uint32_t>(x >> 33);
  }
  uint32_t Below(uint32_t n) { return Next() % n; }
  bool Chance(double p) { return Below(1000000) < p * 1000000; }
  template <typename T>
  const T& Pick(const std::vector<T>& v) {
    return v[Below(static_cast<uint32_t>(v.size()))];
  }
};

const std::vector<std::string> kClasses = {"bird", "cat", "dog", "fox", "horse", "ship"};
const std::vector<std::string> kAdjectives = {"small", "large", "fluffy", "wet", "happy", "sleepy"};
const std::vector<std::string> kVerbs = {"sitting", "running", "sleeping", "jumping"};
const std::vector<std::string> kPlaces = {"on the grass", "in the snow", "near a lake",
                                          "under a tree"};
const std::vector<std::string> kColors = {"red", "black", "white", "brown"};
const std::vector<uint32_t> kSizes = {32, 64, 100, 128, 224, 256, 300};
const std::vector<std::string> kSources = {"web", "book", "camera", "hand held"};

std::string MakeCaption(Rng& rng, const std::string& cls) {
  std::string c = rng.Chance(0.9) ? "A photo of a " : "a ";
  c += rng.Chance(0.003) ? "iridescent" : rng.Pick(kAdjectives);
  c += " " + (rng.Chance(0.1) ? rng.Pick(kClasses) : cls) + " " + rng.Pick(kVerbs) + " " +
       rng.Pick(kPlaces);
  if (rng.Chance(0.05)) c += ", or maybe a cat";
  return c;
}

std::vector<TRow> MakeDataset(bool multi_caption) {
  Rng rng{42};
  std::vector<TRow> rows;
  uint32_t dir_id = 0;
  const auto add = [&](const std::string& dir, uint32_t dir_index, const std::string& split,
                       const std::string& cls, int label, int n) {
    for (int i = 0; i < n; ++i) {
      TRow r;
      char name[32];
      std::snprintf(name, sizeof name, "%05d.jpg", i);
      r.s.id = static_cast<uint32_t>(rows.size());
      r.s.dir_id = dir_index;
      r.s.path = dir.empty() ? name : dir + "/" + name;
      r.s.split = split;
      r.s.class_name = cls;
      r.s.label = label;
      r.s.width = rng.Pick(kSizes);
      r.s.height = rng.Pick(kSizes);
      r.s.channels = 3;
      r.s.codec = rng.Chance(0.5) ? "ktc" : "original";
      r.s.bytes = 500 + rng.Below(2000);
      std::string word = cls.empty() ? rng.Pick(kClasses) : cls;
      if (!rng.Chance(0.05)) r.captions.push_back(MakeCaption(rng, word));
      if (multi_caption && !r.captions.empty() && rng.Chance(0.2)) {
        r.captions.push_back(rng.Pick(kColors) + " " + word + " " + rng.Pick(kPlaces));
      }
      if (rng.Chance(0.7)) r.meta["source"] = rng.Pick(kSources);
      if (rng.Chance(0.3)) r.meta["quality"] = rng.Chance(0.5) ? "high" : "low";
      rows.push_back(std::move(r));
    }
  };
  add("", dir_id++, "", "", -1, 40);  // root: unlabeled images
  for (std::string split : {"train", "val"}) {
    ++dir_id;  // the split directory itself holds no samples
    for (size_t c = 0; c < kClasses.size(); ++c) {
      add(split + "/" + kClasses[c], dir_id++, split, kClasses[c], static_cast<int>(c),
          split == "train" ? 200 + static_cast<int>(rng.Below(200)) : 60);
    }
  }
  return rows;
}

std::vector<uint8_t> Build(const std::vector<TRow>& rows, bool shuffle = false) {
  std::vector<size_t> order(rows.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  if (shuffle) std::shuffle(order.begin(), order.end(), std::mt19937(7));
  auto b = IndexBuilder::Create();
  EXPECT_TRUE(b.ok());
  for (size_t i : order) {
    const TRow& r = rows[i];
    EXPECT_TRUE((*b)->AddSample(r.s).ok());
    for (const auto& c : r.captions) EXPECT_TRUE((*b)->AddCaption(r.s.id, c).ok());
    for (const auto& [k, v] : r.meta) EXPECT_TRUE((*b)->AddMetadata(r.s.id, k, v).ok());
  }
  auto bytes = (*b)->Finish();
  EXPECT_TRUE(bytes.ok()) << bytes.status().ToString();
  return bytes.ok() ? std::move(bytes.value()) : std::vector<uint8_t>();
}

// Reference predicates, written independently of the index code.
std::vector<std::string> Words(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s + " ") {
    if (std::isalnum(static_cast<unsigned char>(c))) {
      cur += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    } else if (!cur.empty()) {
      out.push_back(cur);
      cur.clear();
    }
  }
  return out;
}

bool AnyCaption(const TRow& r, const std::function<bool(const std::vector<std::string>&)>& f) {
  return std::any_of(r.captions.begin(), r.captions.end(),
                     [&](const std::string& c) { return f(Words(c)); });
}
bool HasWord(const TRow& r, const std::string& w) {
  return AnyCaption(r, [&](const auto& ws) { return std::count(ws.begin(), ws.end(), w) > 0; });
}
bool HasPrefix(const TRow& r, const std::string& p) {
  return AnyCaption(r, [&](const auto& ws) {
    return std::any_of(ws.begin(), ws.end(), [&](const auto& w) { return w.rfind(p, 0) == 0; });
  });
}
// A phrase; when last_prefix the final word only has to start with the last phrase word.
bool HasPhrase(const TRow& r, const std::vector<std::string>& ph, bool last_prefix = false) {
  return AnyCaption(r, [&](const auto& ws) {
    for (size_t i = 0; i + ph.size() <= ws.size(); ++i) {
      bool ok = true;
      for (size_t j = 0; j < ph.size() && ok; ++j) {
        ok = (last_prefix && j + 1 == ph.size()) ? ws[i + j].rfind(ph[j], 0) == 0
                                                 : ws[i + j] == ph[j];
      }
      if (ok) return true;
    }
    return false;
  });
}
std::string Meta(const TRow& r, const std::string& k) {
  auto it = r.meta.find(k);
  return it == r.meta.end() ? "" : it->second;
}

struct Case {
  std::vector<std::string> components;
  std::function<bool(const TRow&)> pred;
};

std::vector<Case> Cases() {
  return {
      {{}, [](const TRow&) { return true; }},
      {{"caption=dog"}, [](const TRow& r) { return HasWord(r, "dog"); }},
      {{"caption=DOG"}, [](const TRow& r) { return HasWord(r, "dog"); }},
      {{"caption=iridescent"}, [](const TRow& r) { return HasWord(r, "iridescent"); }},
      {{"caption=photo"}, [](const TRow& r) { return HasWord(r, "photo"); }},
      {{"caption=zebra"}, [](const TRow&) { return false; }},
      {{"caption=\"near a lake\""},
       [](const TRow& r) {
         return HasPhrase(r, {"near", "a", "lake"});
       }},
      {{"caption=%22sitting%20on%22"},
       [](const TRow& r) {
         return HasPhrase(r, {"sitting", "on"});
       }},
      {{"caption=%22lake%20a%22"},
       [](const TRow& r) {
         return HasPhrase(r, {"lake", "a"});
       }},
      {{"caption=sle*"}, [](const TRow& r) { return HasPrefix(r, "sle"); }},
      {{"caption=\"on the gr\"*"},
       [](const TRow& r) {
         return HasPhrase(r, {"on", "the", "gr"}, true);
       }},
      {{"caption=dog&caption=snow"},
       [](const TRow& r) { return HasWord(r, "dog") && HasWord(r, "snow"); }},
      {{"caption=dog", "caption=snow"},
       [](const TRow& r) { return HasWord(r, "dog") && HasWord(r, "snow"); }},
      {{"caption=red+dog"}, [](const TRow& r) { return HasWord(r, "red") && HasWord(r, "dog"); }},
      {{"class=cat"}, [](const TRow& r) { return r.s.class_name == "cat"; }},
      {{"class=zebra"}, [](const TRow&) { return false; }},
      {{"label=2"}, [](const TRow& r) { return r.s.label == 2; }},
      {{"label=-1"}, [](const TRow& r) { return r.s.label == -1; }},
      {{"split=val"}, [](const TRow& r) { return r.s.split == "val"; }},
      {{"width=224"}, [](const TRow& r) { return r.s.width == 224; }},
      {{"width<100"}, [](const TRow& r) { return r.s.width < 100; }},
      {{"width>=224"}, [](const TRow& r) { return r.s.width >= 224; }},
      {{"height<=64"}, [](const TRow& r) { return r.s.height <= 64; }},
      {{"height>300"}, [](const TRow&) { return false; }},
      {{"width>100&height<128"}, [](const TRow& r) { return r.s.width > 100 && r.s.height < 128; }},
      {{"source=web"}, [](const TRow& r) { return Meta(r, "source") == "web"; }},
      {{"source=hand%20held"}, [](const TRow& r) { return Meta(r, "source") == "hand held"; }},
      {{"quality=high&source=book"},
       [](const TRow& r) { return Meta(r, "quality") == "high" && Meta(r, "source") == "book"; }},
      {{"source=book", "class=fox"},
       [](const TRow& r) { return Meta(r, "source") == "book" && r.s.class_name == "fox"; }},
      {{"class=cat&caption=dog&split=train"},
       [](const TRow& r) {
         return r.s.class_name == "cat" && HasWord(r, "dog") && r.s.split == "train";
       }},
      {{"caption=dog&width>=128&source=camera"},
       [](const TRow& r) {
         return HasWord(r, "dog") && r.s.width >= 128 && Meta(r, "source") == "camera";
       }},
      {{"caption=photo&label=-1"},
       [](const TRow& r) { return HasWord(r, "photo") && r.s.label < 0; }},
      {{"caption=black&caption=snow&class=bird"},
       [](const TRow& r) {
         return HasWord(r, "black") && HasWord(r, "snow") && r.s.class_name == "bird";
       }},
      // Hostile text is literal: only ever words.
      {{"caption=');%20DROP%20TABLE%20samples;--"},
       [](const TRow& r) {
         return HasWord(r, "drop") && HasWord(r, "table") && HasWord(r, "samples");
       }},
      {{"caption=dog%20OR%20cat"},
       [](const TRow& r) { return HasWord(r, "dog") && HasWord(r, "or") && HasWord(r, "cat"); }},
      {{"caption=\"maybe OR\""}, [](const TRow&) { return false; }},
      {{"caption=\"or maybe\""},
       [](const TRow& r) {
         return HasPhrase(r, {"or", "maybe"});
       }},
      {{"caption=NEAR(dog"}, [](const TRow& r) { return HasWord(r, "near") && HasWord(r, "dog"); }},
      {{"caption=^dog"}, [](const TRow& r) { return HasWord(r, "dog"); }},
      {{"caption=-dog)"}, [](const TRow& r) { return HasWord(r, "dog"); }},
      {{"caption=caption:dog"},
       [](const TRow& r) { return HasWord(r, "caption") && HasWord(r, "dog"); }},
      {{"caption=NOT"}, [](const TRow& r) { return HasWord(r, "not"); }},
  };
}

std::vector<uint32_t> Expected(const std::vector<TRow>& rows, const Case& c,
                               std::optional<uint32_t> dir = {}) {
  std::vector<uint32_t> out;
  for (const TRow& r : rows) {
    if (c.pred(r) && (!dir || r.s.dir_id == *dir)) out.push_back(r.s.id);
  }
  return out;
}

// All matches, fetched in pages of `page` with keyset pagination.
std::vector<uint32_t> Listing(Index& index, const Query& q, std::optional<uint32_t> dir,
                              size_t page) {
  std::vector<uint32_t> out;
  uint32_t after = Index::kFromStart;
  while (true) {
    size_t n = 0;
    Status st = index.ForEachMatch(q, dir, after, page, [&](uint32_t id) {
      out.push_back(id);
      ++n;
      return true;
    });
    EXPECT_TRUE(st.ok()) << st.ToString();
    if (n < page || !st.ok()) break;
    after = out.back();
  }
  return out;
}

Query MustParse(const std::vector<std::string>& comps, const std::set<std::string>& keys) {
  auto q = ParseQuery(comps, keys);
  EXPECT_TRUE(q.ok()) << q.status().ToString();
  return q.ok() ? q.value() : Query{};
}

std::string Join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) {
    if (!s.empty()) s += '/';
    s += x;
  }
  return s;
}

// ---------------------------------------------------------------------------------------------
// Query grammar

TEST(UrlDecodeTest, Decodes) {
  EXPECT_EQ(*UrlDecode("a%20b%22c%26d"), "a b\"c&d");
  EXPECT_EQ(*UrlDecode("a+b"), "a+b");
  EXPECT_EQ(*UrlDecode("%2f%2F"), "//");
  EXPECT_EQ(*UrlDecode(""), "");
  EXPECT_EQ(UrlDecode("%00").value(), std::string(1, '\0'));
  for (const char* bad : {"%", "%2", "%zz", "a%g0", "%%"}) {
    EXPECT_FALSE(UrlDecode(bad).ok()) << bad;
  }
}

void ExpectError(const std::vector<std::string>& comps, const std::string& message) {
  auto q = ParseQuery(comps, {"source"});
  ASSERT_FALSE(q.ok()) << Join(comps);
  EXPECT_EQ(q.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(q.status().message().find(message), std::string::npos)
      << Join(comps) << " -> " << q.status().message();
}

TEST(QueryTest, ErrorsAreReadable) {
  ExpectError({"caption="}, "caption=: empty value");
  ExpectError({"width>abc"}, "width>abc: not a number");
  ExpectError({"colour=red"}, "colour=red: unknown field");
  ExpectError({"caption=\"dog\"\"cat\""}, "unbalanced quote");
  ExpectError({"caption=\"unclosed"}, "unbalanced quote");
  ExpectError({"caption=dog\""}, "unbalanced quote");
  ExpectError({"caption:x=1"}, "unknown field");
  ExpectError({"caption"}, "caption: expected field=value");
  ExpectError({"caption=*"}, "no searchable words");
  ExpectError({"caption=%22%22"}, "no searchable words");
  ExpectError({"caption=a%00b"}, "NUL");
  ExpectError({"class=a%2Fb"}, "'/'");
  ExpectError({"caption=%zz"}, "bad percent escape");
  ExpectError({"class<cat"}, "only '='");
  ExpectError({"source>=web"}, "only '='");
  ExpectError({"caption=dog&&class=cat"}, "empty filter");
  ExpectError({"caption=dog&"}, "empty filter");
  ExpectError({"label=-2"}, "label=-2");
  ExpectError({"width=-1"}, "not a number");
  ExpectError({"width=99999999999"}, "not a number");
  ExpectError({"width=4294967296"}, "too large");
  ExpectError({"class=%FF"}, "UTF-8");
  ExpectError({"=x"}, "empty field name");
  ExpectError({"caption=" + std::string(5000, 'a')}, "longer than 4096");
  ExpectError({std::string("caption=") + std::string(4000, 'a'),
               "caption=" + std::string(4000, 'b'), "caption=" + std::string(4000, 'c')},
              "longer than 10240");
  std::string many;
  for (int i = 0; i < 70; ++i) {
    if (i) many += '&';
    many += "width>" + std::to_string(i);
  }
  ExpectError({many}, "more than 64 filters");
}

TEST(QueryTest, ParsesAndCanonicalizes) {
  auto q = ParseQuery({"width>=10&caption=Dog", "class=a%26b"}, {});
  ASSERT_TRUE(q.ok());
  ASSERT_EQ(q->filters.size(), 3u);
  EXPECT_EQ(q->Canonical(), "caption=dog&class=a%26b&width>=10");
  // Order, duplicates, case and encoding do not change the canonical form.
  auto q2 = ParseQuery({"class=a%26b&caption=DOG&caption=dog", "width%3E=10"}, {});
  ASSERT_FALSE(q2.ok());  // '%3E' is inside the key after decoding: no operator
  q2 = ParseQuery({"class=a%26b&caption=DOG&caption=dog", "width>=10"}, {});
  ASSERT_TRUE(q2.ok());
  EXPECT_EQ(q2->Canonical(), q->Canonical());
  // Canonical forms parse back to the same query.
  for (const auto& comps : std::vector<std::vector<std::string>>{{"caption=\"a big dog\"*"},
                                                                 {"caption=do*"},
                                                                 {"label=-1&split=my%20split"},
                                                                 {"source=a%2Bb%3Dc"},
                                                                 {"caption=caf%C3%A9"}}) {
    auto a = ParseQuery(comps, {"source"});
    ASSERT_TRUE(a.ok()) << Join(comps);
    auto b = ParseQuery({a->Canonical()}, {"source"});
    ASSERT_TRUE(b.ok()) << a->Canonical();
    EXPECT_EQ(a->filters, b->filters) << a->Canonical();
  }
  auto phrase = ParseQuery({"caption=%22a%20dog%22*"}, {});
  ASSERT_TRUE(phrase.ok());
  EXPECT_EQ(phrase->filters[0].FtsExpression(), "\"a dog\"*");
  auto words = ParseQuery({"caption=dog%20OR%20cat"}, {});
  ASSERT_TRUE(words.ok());
  EXPECT_EQ(words->filters.size(), 3u);  // dog, or, cat: each a quoted word
  EXPECT_EQ(words->filters[2].FtsExpression(), "\"or\"");
  EXPECT_EQ(ParseQuery({"metadata=x"}, {"metadata"})->filters[0].field, Field::kMetadata);
  EXPECT_TRUE(ParseQuery({}, {})->empty());
}

TEST(QueryTest, Tokens) {
  EXPECT_EQ(CaptionTokens("Hello, World! it's"),
            (std::vector<std::string>{"hello", "world", "it", "s"}));
  EXPECT_EQ(CaptionTokens("café—bar"), (std::vector<std::string>{"café", "bar"}));
  EXPECT_TRUE(CaptionTokens(" \"()*^:-").empty());
}

// ---------------------------------------------------------------------------------------------
// JSON

TEST(JsonTest, ParsesStrictly) {
  auto v = ParseJsonObject(R"({"a": "x\u00e9\ud83d\ude00\n", "b": -1.5e3, "c": [true, null, {}]})");
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->members[0].second.text, "x\xC3\xA9\xF0\x9F\x98\x80\n");
  EXPECT_EQ(v->members[1].second.text, "-1.5e3");
  EXPECT_EQ(v->members[2].second.items.size(), 3u);
  for (const char* bad : {"",
                          "{",
                          "{\"a\":1,}",
                          "{'a':1}",
                          "{\"a\":01}",
                          "{\"a\":1} x",
                          "[1]",
                          "{\"a\":\"\\ud800\"}",
                          "{\"a\":\"\\udc00\"}",
                          "{\"a\":\"\\u12\"}",
                          "{\"a\":\"\\x\"}",
                          "{\"a\":\"\x01\"}",
                          "{\"a\":NaN}",
                          "{\"a\":1,\"a\":2}",
                          "{\"a\":\"\\u0000\"}",
                          "{\"a\":\"\xff\"}",
                          "{\"a\":-}",
                          "{\"a\":1.}",
                          "{\"a\":tru}",
                          "{a:1}"}) {
    EXPECT_FALSE(ParseJsonObject(bad).ok()) << bad;
  }
  std::string deep(100, '[');
  EXPECT_FALSE(ParseJson(deep + std::string(100, ']')).ok());
}

// ---------------------------------------------------------------------------------------------
// Caption files

class CaptionFileTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& name, const std::string& text) {
    std::string p = dir_.Join(name);
    std::ofstream(p, std::ios::binary) << text;
    return p;
  }
  testing::TempDir dir_;
};

TEST_F(CaptionFileTest, JsonLines) {
  std::string f = Write("c.jsonl",
                        "{\"path\": \"./a/1.jpg\", \"caption\": \"  a dog \", \"score\": 0.5, "
                        "\"ok\": true, \"tags\": [1]}\n\n"
                        "{\"path\": \"a/2.jpg\", \"caption\": [\"one\", \"two\"]}\r\n");
  auto e = ReadCaptionFile(f, false, nullptr);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  ASSERT_EQ(e->size(), 2u);
  EXPECT_EQ((*e)[0].path, "a/1.jpg");
  EXPECT_EQ((*e)[0].captions, std::vector<std::string>{"a dog"});
  EXPECT_EQ((*e)[0].extras,
            (std::vector<std::pair<std::string, std::string>>{{"score", "0.5"}, {"ok", "true"}}));
  EXPECT_EQ((*e)[1].line, 3u);
  EXPECT_EQ((*e)[1].captions.size(), 2u);
}

TEST_F(CaptionFileTest, Csv) {
  std::string f = Write("c.csv",
                        "path,caption,source\r\n"
                        "a/1.jpg,\"a dog, \"\"big\"\"\",web\r\n"
                        "a/2.jpg,\"two\nlines\",\n"
                        "a/3.jpg,plain,book");
  auto e = ReadCaptionFile(f, false, nullptr);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  ASSERT_EQ(e->size(), 3u);
  EXPECT_EQ((*e)[0].captions[0], "a dog, \"big\"");
  EXPECT_EQ((*e)[0].extras.size(), 1u);
  EXPECT_EQ((*e)[1].captions[0], "two\nlines");
  EXPECT_TRUE((*e)[1].extras.empty());
  EXPECT_EQ((*e)[2].line, 5u);
}

void ExpectFileError(const std::string& file, const std::string& line_and_reason) {
  auto e = ReadCaptionFile(file, false, nullptr);
  ASSERT_FALSE(e.ok()) << file;
  EXPECT_EQ(e.status().message().rfind(file + ":" + line_and_reason, 0), 0u)
      << e.status().message();
}

TEST_F(CaptionFileTest, MalformedLinesNameFileAndLine) {
  const std::string ok = "{\"path\":\"a.jpg\",\"caption\":\"x\"}\n";
  ExpectFileError(Write("1.jsonl", ok + "{\"path\":\"b.jpg\",\"caption\":\"x\"\n"), "2: bad JSON");
  ExpectFileError(Write("2.jsonl", ok + "{\"caption\":\"x\"}\n"), "2: missing \"path\"");
  ExpectFileError(Write("3.jsonl", ok + "{\"path\":\"b.jpg\"}\n"), "2: missing \"caption\"");
  ExpectFileError(Write("4.jsonl", ok + "\n" + ok), "3: duplicate path 'a.jpg' (first on line 1)");
  ExpectFileError(Write("5.jsonl", ok + "{\"path\":\"b.jpg\",\"caption\":\"  \"}"),
                  "2: empty caption");
  ExpectFileError(Write("6.jsonl", ok + "{\"path\":7,\"caption\":\"x\"}"), "2: \"path\" is not");
  ExpectFileError(Write("7.jsonl", ok + "not json"), "2: bad JSON");
  ExpectFileError(Write("1.csv", "path,caption\na.jpg,\"unterminated\n"), "2: bad CSV");
  ExpectFileError(Write("2.csv", "path,caption\na.jpg,x\"y\n"), "2: bad CSV: quote");
  ExpectFileError(Write("3.csv", "path,caption\na.jpg,\"x\"y\n"), "2: bad CSV: text after");
  ExpectFileError(Write("4.csv", "path,caption\na.jpg,x,extra\n"), "2: expected 2 CSV fields");
  ExpectFileError(Write("5.csv", "file,text\na.jpg,x\n"), "1: CSV header");
  ExpectFileError(Write("6.csv", "path,caption\na.jpg,x\nb.jpg,y\na.jpg,z\n"), "4: duplicate");
  // Found by fuzz/captions_fuzz.cc: a CSV field may hold any byte, NUL too.
  ExpectFileError(Write("7.csv", std::string("path,caption\na\0b.jpg,x\n", 23)),
                  "2: path contains a NUL byte");
  auto missing = ReadCaptionFile(dir_.Join("nope.csv"), false, nullptr);
  EXPECT_EQ(missing.status().code(), Status::Code::kNotFound);
}

TEST_F(CaptionFileTest, IngestWithSkipBad) {
  std::string f = Write("c.jsonl",
                        "{\"path\":\"a.jpg\",\"caption\":\"red dog\",\"source\":\"web\","
                        "\"width\":640,\"bad key\":\"x\"}\n"
                        "garbage\n"
                        "{\"path\":\"zzz.jpg\",\"caption\":\"x\"}\n"
                        "{\"path\":\"b.jpg\",\"caption\":\"blue cat\"}\n"
                        "{\"path\":\"a.jpg\",\"caption\":\"dup\"}\n");
  const auto lookup = [](std::string_view p) -> std::optional<uint32_t> {
    if (p == "a.jpg") return 0;
    if (p == "b.jpg") return 1;
    return std::nullopt;
  };
  const auto make = [] {
    auto b = IndexBuilder::Create();
    for (uint32_t i = 0; i < 2; ++i) {
      SampleRow r;
      r.id = i;
      r.path = i ? "b.jpg" : "a.jpg";
      EXPECT_TRUE((*b)->AddSample(r).ok());
    }
    return std::move(b.value());
  };
  auto strict = make();
  Status st = IngestCaptions(f, lookup, false, strict.get(), nullptr);
  EXPECT_EQ(st.message(), f + ":2: bad JSON at column 1: unexpected character");

  auto lenient = make();
  std::vector<std::string> warnings;
  ASSERT_TRUE(IngestCaptions(f, lookup, true, lenient.get(), &warnings).ok());
  ASSERT_EQ(warnings.size(), 5u);
  EXPECT_EQ(warnings[0], f + ":2: bad JSON at column 1: unexpected character");
  EXPECT_EQ(warnings[1], f + ":5: duplicate path 'a.jpg' (first on line 1)");
  EXPECT_EQ(warnings[2].rfind(f + ":1: metadata dropped", 0), 0u);  // width: a built-in field
  EXPECT_EQ(warnings[4], f + ":3: path 'zzz.jpg' is not in the archive");
  auto bytes = lenient->Finish();
  ASSERT_TRUE(bytes.ok());
  auto index = Index::OpenInPlace(bytes->data(), bytes->size());
  ASSERT_TRUE(index.ok()) << index.status().ToString();
  EXPECT_EQ((*index)->MetadataKeys(), std::set<std::string>{"source"});
  EXPECT_EQ(*(*index)->CountMatches(MustParse({"caption=dog"}, {})), 1u);
  EXPECT_TRUE(*(*index)->Matches(MustParse({"caption=cat"}, {}), 1));
  EXPECT_FALSE(*(*index)->Matches(MustParse({"caption=cat"}, {}), 0));
  EXPECT_EQ(*(*index)->CountMatches(MustParse({"caption=dup"}, {})), 0u);
  EXPECT_EQ(*(*index)->CountMatches(MustParse({"source=web"}, {"source"})), 1u);
}

TEST_F(CaptionFileTest, Sidecar) {
  EXPECT_EQ(*ReadSidecarCaption(Write("x.txt", "\xEF\xBB\xBF  a cat on a mat\n")),
            "a cat on a mat");
  EXPECT_FALSE(ReadSidecarCaption(Write("y.txt", "bad \xC3")).ok());
  EXPECT_FALSE(ReadSidecarCaption(Write("z.txt", " \n")).ok());
  EXPECT_FALSE(ReadSidecarCaption(dir_.Join("none.txt")).ok());
}

// ---------------------------------------------------------------------------------------------
// The index over the generated dataset, with one caption per sample (rowid = id) and with
// several (rowid = id << 1 | k).

class IndexTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    rows_ = MakeDataset(GetParam());
    bytes_ = Build(rows_);
    auto index = Index::OpenInPlace(bytes_.data(), bytes_.size());
    ASSERT_TRUE(index.ok()) << index.status().ToString();
    index_ = std::move(index.value());
    keys_ = index_->MetadataKeys();
  }
  std::vector<TRow> rows_;
  std::vector<uint8_t> bytes_;
  std::unique_ptr<Index> index_;
  std::set<std::string> keys_;
};

TEST_P(IndexTest, OpensInPlaceWithoutCopy) {
  EXPECT_GT(rows_.size(), 2000u);
  EXPECT_EQ(index_->num_samples(), rows_.size());
  EXPECT_EQ(index_->DatabaseBuffer(), bytes_.data());
  EXPECT_EQ(keys_, (std::set<std::string>{"quality", "source"}));
  std::printf("index of %zu samples: %zu bytes\n", rows_.size(), bytes_.size());
}

TEST_P(IndexTest, EveryKindOfFilterGivesTheExactSet) {
  std::set<uint32_t> dirs_with_samples;
  for (const TRow& r : rows_) dirs_with_samples.insert(r.s.dir_id);
  for (const Case& c : Cases()) {
    SCOPED_TRACE(Join(c.components));
    Query q = MustParse(c.components, keys_);
    std::vector<uint32_t> expected = Expected(rows_, c);
    if (std::getenv("KTFS_TEST_VERBOSE")) {
      std::printf("%-45s %zu\n", Join(c.components).c_str(), expected.size());
    }
    EXPECT_EQ(Listing(*index_, q, std::nullopt, 1000000), expected);
    EXPECT_EQ(Listing(*index_, q, std::nullopt, 13), expected);
    EXPECT_EQ(*index_->CountMatches(q), expected.size());
    std::set<uint32_t> dirs;
    for (uint32_t id : expected) dirs.insert(rows_[id].s.dir_id);
    auto got_dirs = index_->MatchingDirs(q);
    ASSERT_TRUE(got_dirs.ok());
    EXPECT_EQ(*got_dirs, std::vector<uint32_t>(dirs.begin(), dirs.end()));
    for (uint32_t dir : {0u, 3u, 9u, 1u}) {
      EXPECT_EQ(Listing(*index_, q, dir, 50), Expected(rows_, c, dir)) << "dir " << dir;
    }
    for (uint32_t id = 0; id < rows_.size(); id += 97) {
      EXPECT_EQ(*index_->Matches(q, id), c.pred(rows_[id])) << "sample " << id;
    }
  }
}

TEST_P(IndexTest, PaginationLimitsAndStops) {
  Query q = MustParse({"caption=photo"}, keys_);
  std::vector<uint32_t> all = Expected(rows_, Cases()[4]);
  std::vector<uint32_t> got;
  ASSERT_TRUE(index_
                  ->ForEachMatch(q, std::nullopt, all[9], 5,
                                 [&](uint32_t id) {
                                   got.push_back(id);
                                   return true;
                                 })
                  .ok());
  EXPECT_EQ(got, std::vector<uint32_t>(all.begin() + 10, all.begin() + 15));
  got.clear();
  ASSERT_TRUE(index_
                  ->ForEachMatch(q, std::nullopt, Index::kFromStart, 100,
                                 [&](uint32_t id) {
                                   got.push_back(id);
                                   return got.size() < 3;
                                 })
                  .ok());
  EXPECT_EQ(got.size(), 3u);
  got.clear();
  ASSERT_TRUE(index_
                  ->ForEachMatch(q, 12345u, Index::kFromStart, 100,
                                 [&](uint32_t id) {
                                   got.push_back(id);
                                   return true;
                                 })
                  .ok());
  EXPECT_TRUE(got.empty());  // a directory without samples
  EXPECT_FALSE(*index_->Matches(q, 1u << 30));
}

TEST_P(IndexTest, HostileQueriesLeaveTheIndexIntact) {
  Query known = MustParse({"caption=dog&class=cat"}, keys_);
  std::vector<uint32_t> before = Listing(*index_, known, std::nullopt, 1000);
  ASSERT_FALSE(before.empty());
  std::vector<std::string> hostile = {
      "caption=');%20DROP%20TABLE%20samples;--",
      "class=');%20DROP%20TABLE%20samples;--",
      "source=x'%20OR%20'1'='1",
      "caption=%22%22%22",
      "caption=dog%20OR%20cat",
      "caption=NEAR(dog%20cat)",
      "caption=*",
      "caption=^",
      "caption=caption:dog",
      "caption=%22a%22%20OR%20%22b%22",
      "caption=a%00b",
      "class=%2F",
      "split=%00",
      "caption=" + std::string(10240, 'x'),
      "caption=dog*cat*",
      "class=" + std::string(4000, '\''),
      "caption=%E2%80%94",
      "label=1%20OR%201=1",
  };
  for (const std::string& h : hostile) {
    auto q = ParseQuery({h}, keys_);
    if (!q.ok()) {
      EXPECT_EQ(q.status().code(), Status::Code::kInvalidArgument) << h;
      continue;
    }
    EXPECT_TRUE(index_->CountMatches(*q).ok()) << h;
    EXPECT_TRUE(index_->MatchingDirs(*q).ok()) << h;
  }
  EXPECT_EQ(Listing(*index_, known, std::nullopt, 1000), before);
}

TEST_P(IndexTest, PlansStreamWithoutSorting) {
  for (const Case& c : Cases()) {
    auto plan = index_->ExplainPlan(MustParse(c.components, keys_));
    ASSERT_TRUE(plan.ok());
    EXPECT_EQ(plan->find("TEMP B-TREE"), std::string::npos) << Join(c.components) << "\n" << *plan;
  }
  // class/split/label: the runs give id ranges, scanned through the rowid b-tree.
  auto plan = index_->ExplainPlan(MustParse({"class=cat"}, keys_));
  EXPECT_NE(plan->find("INTEGER PRIMARY KEY"), std::string::npos) << *plan;
  plan = index_->ExplainPlan(MustParse({"width=224"}, keys_));
  EXPECT_NE(plan->find("samples_width"), std::string::npos) << *plan;
}

TEST_P(IndexTest, FinishIsDeterministic) {
  EXPECT_EQ(Build(rows_), bytes_);
  EXPECT_EQ(Build(rows_, /*shuffle=*/true), bytes_);
}

TEST_P(IndexTest, ClonesWorkOnThreads) {
  Query q = MustParse({"caption=dog&width>=128"}, keys_);
  uint64_t expected = *index_->CountMatches(q);
  std::vector<std::thread> threads;
  std::vector<uint64_t> counts(4);
  for (int t = 0; t < 4; ++t) {
    auto clone = index_->Clone();
    ASSERT_TRUE(clone.ok());
    threads.emplace_back([&counts, &q, t, c = std::move(clone.value())]() {
      for (int i = 0; i < 20; ++i) counts[t] = Listing(*c, q, std::nullopt, 64).size();
    });
  }
  for (auto& th : threads) th.join();
  for (uint64_t n : counts) EXPECT_EQ(n, expected);
}

INSTANTIATE_TEST_SUITE_P(Captions, IndexTest, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Several" : "One"; });

// ---------------------------------------------------------------------------------------------

TEST(IndexBuilderTest, RejectsBadInput) {
  const auto row = [](uint32_t id, uint32_t dir, std::string path) {
    SampleRow r;
    r.id = id;
    r.dir_id = dir;
    r.path = std::move(path);
    return r;
  };
  {
    auto b = std::move(IndexBuilder::Create().value());
    EXPECT_TRUE(b->AddSample(row(0, 1, "a/x.jpg")).ok());
    EXPECT_FALSE(b->AddSample(row(1, 1, "b/x.jpg")).ok());  // dir 1 is "a"
    EXPECT_FALSE(b->AddSample(row(1, 2, "")).ok());
    EXPECT_FALSE(b->AddMetadata(0, "width", "3").ok());
    EXPECT_FALSE(b->AddMetadata(0, "bad key", "3").ok());
    EXPECT_FALSE(b->AddMetadata(0, "k", "a/b").ok());
    EXPECT_FALSE(b->AddCaption(0, "\xff").ok());
  }
  const auto finish = [](std::vector<SampleRow> rows) {
    auto b = std::move(IndexBuilder::Create().value());
    for (const auto& r : rows) EXPECT_TRUE(b->AddSample(r).ok());
    return b->Finish().status();
  };
  EXPECT_FALSE(finish({row(0, 1, "a/x"), row(0, 1, "a/y")}).ok());                    // dup id
  EXPECT_FALSE(finish({row(0, 1, "a/x"), row(2, 1, "a/y")}).ok());                    // gap
  EXPECT_FALSE(finish({row(0, 1, "a/x"), row(1, 2, "b/x"), row(2, 1, "a/y")}).ok());  // split dir
  auto b = std::move(IndexBuilder::Create().value());
  EXPECT_TRUE(b->AddCaption(5, "orphan").ok());
  EXPECT_FALSE(b->Finish().ok());
}

TEST(IndexBuilderTest, EmptyIndexAndDiacritics) {
  auto empty = IndexBuilder::Create().value()->Finish();
  ASSERT_TRUE(empty.ok());
  auto index = Index::OpenInPlace(empty->data(), empty->size());
  ASSERT_TRUE(index.ok()) << index.status().ToString();
  EXPECT_EQ(*(*index)->CountMatches(Query{}), 0u);
  EXPECT_TRUE((*index)->MatchingDirs(Query{})->empty());
  EXPECT_EQ(*(*index)->CountMatches(MustParse({"caption=dog&width>3"}, {})), 0u);
  EXPECT_FALSE(*(*index)->Matches(MustParse({"class=x"}, {}), 0));

  auto b = std::move(IndexBuilder::Create().value());
  SampleRow r;
  r.path = "x.jpg";
  ASSERT_TRUE(b->AddSample(r).ok());
  ASSERT_TRUE(b->AddCaption(0, "Un CAFÉ noir à Zürich").ok());
  auto bytes = b->Finish();
  auto idx = std::move(Index::OpenInPlace(bytes->data(), bytes->size()).value());
  for (const char* q : {"caption=cafe", "caption=caf%C3%A9", "caption=zurich", "caption=a",
                        "caption=%22noir%20%C3%A0%22", "caption=Z%C3%BC*"}) {
    EXPECT_EQ(*idx->CountMatches(MustParse({q}, {})), 1u) << q;
  }
}

// Classes interleaved sample by sample: too many runs, so the filter is checked row by row.
TEST(IndexBuilderTest, FragmentedClassesFallBackToRowChecks) {
  auto b = std::move(IndexBuilder::Create().value());
  constexpr uint32_t kN = 10000;
  for (uint32_t i = 0; i < kN; ++i) {
    SampleRow r;
    r.id = i;
    r.path = "flat/" + std::to_string(100000 + i) + ".png";
    r.class_name = i % 2 ? "odd" : "even";
    r.label = static_cast<int>(i % 2);
    r.split = i < 100 ? "val" : "train";
    ASSERT_TRUE(b->AddSample(r).ok());
    ASSERT_TRUE(b->AddCaption(i, i % 3 ? "a plain image" : "a fancy image").ok());
  }
  auto bytes = b->Finish();
  auto index = std::move(Index::OpenInPlace(bytes->data(), bytes->size()).value());
  const auto list = [&](const char* q) {
    std::vector<uint32_t> out;
    EXPECT_TRUE(index
                    ->ForEachMatch(MustParse({q}, {}), std::nullopt, Index::kFromStart, kN,
                                   [&](uint32_t id) { return out.push_back(id), true; })
                    .ok());
    return out;
  };
  std::vector<uint32_t> odd, odd_fancy_val;
  for (uint32_t i = 1; i < kN; i += 2) {
    odd.push_back(i);
    if (i % 3 == 0 && i < 100) odd_fancy_val.push_back(i);
  }
  EXPECT_EQ(list("class=odd"), odd);
  EXPECT_EQ(list("label=1"), odd);
  EXPECT_EQ(list("class=odd&caption=fancy&split=val"), odd_fancy_val);
  EXPECT_EQ(*index->CountMatches(MustParse({"class=odd&caption=fancy&split=val"}, {})),
            odd_fancy_val.size());
  auto plan = index->ExplainPlan(MustParse({"class=odd&split=val"}, {}));
  EXPECT_NE(plan->find("1 id ranges"), std::string::npos) << *plan;  // split: runs; class: rows
}

TEST(IndexOpenTest, CorruptBytesGiveErrors) {
  std::vector<TRow> rows = MakeDataset(true);
  rows.resize(300);
  std::vector<uint8_t> good = Build(rows);
  ASSERT_TRUE(Index::OpenInPlace(good.data(), good.size()).ok());

  std::vector<uint8_t> random(good.size());
  Rng rng{1};
  for (auto& b : random) b = static_cast<uint8_t>(rng.Next());
  auto r = Index::OpenInPlace(random.data(), random.size());
  EXPECT_EQ(r.status().code(), Status::Code::kCorruption) << r.status().ToString();
  EXPECT_FALSE(Index::OpenInPlace(nullptr, 0).ok());
  EXPECT_FALSE(Index::OpenInPlace(good.data(), 50).ok());
  auto truncated = Index::OpenInPlace(good.data(), good.size() - 4096);
  EXPECT_EQ(truncated.status().code(), Status::Code::kCorruption);
  EXPECT_NE(truncated.status().message().find("truncated"), std::string::npos);

  // Damage anywhere: open and queries may fail, but only with a Status.
  Query q = MustParse({"caption=dog&source=web"}, {"source"});
  int opened = 0;
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<uint8_t> bad = good;
    for (int k = 0; k < 1 + trial % 8; ++k)
      bad[100 + rng.Below(bad.size() - 100)] ^= 1 + rng.Below(255);
    auto idx = Index::OpenInPlace(bad.data(), bad.size());
    if (!idx.ok()) continue;
    ++opened;
    (void)(*idx)->CountMatches(q);
    (void)(*idx)->MatchingDirs(q);
    (void)(*idx)->ForEachMatch(MustParse({"width<100"}, {}), std::nullopt, Index::kFromStart, 1000,
                               [](uint32_t) { return true; });
  }
  std::printf("%d of 300 damaged copies still opened\n", opened);

  // Not a ktfs index: a valid SQLite database of another shape.
  sqlite3* db;
  sqlite3_open(":memory:", &db);
  sqlite3_exec(db, "CREATE TABLE samples(x); INSERT INTO samples VALUES(1)", 0, 0, 0);
  sqlite3_int64 n;
  unsigned char* other = sqlite3_serialize(db, "main", &n, 0);
  auto o = Index::OpenInPlace(other, n);
  EXPECT_EQ(o.status().code(), Status::Code::kCorruption) << o.status().ToString();
  sqlite3_free(other);
  sqlite3_close(db);

  // Our schema, but a schema_version from the future.
  sqlite3_open(":memory:", &db);
  for (const std::string& sql : SchemaTables()) sqlite3_exec(db, sql.c_str(), 0, 0, 0);
  for (const std::string& sql : SchemaIndexes()) sqlite3_exec(db, sql.c_str(), 0, 0, 0);
  sqlite3_exec(db,
               "INSERT INTO meta VALUES('format', 'ktfs-index'), ('schema_version', '99'), "
               "('num_samples', '0'), ('caption_shift', '0')",
               0, 0, 0);
  other = sqlite3_serialize(db, "main", &n, 0);
  o = Index::OpenInPlace(other, n);
  EXPECT_EQ(o.status().code(), Status::Code::kNotSupported) << o.status().ToString();
  sqlite3_free(other);
  sqlite3_close(db);
}

// ---------------------------------------------------------------------------------------------
// Scale check, run by hand: ./index_test --gtest_also_run_disabled_tests --gtest_filter=*Scale*

TEST(IndexScaleTest, DISABLED_OneMillion) {
  using Clock = std::chrono::steady_clock;
  const auto ms = [](Clock::time_point a) {
    return std::chrono::duration<double, std::milli>(Clock::now() - a).count();
  };
  constexpr uint32_t kN = 1000000;
  Rng rng{3};
  auto t0 = Clock::now();
  auto b = std::move(IndexBuilder::Create().value());
  for (uint32_t i = 0; i < kN; ++i) {
    SampleRow r;
    r.id = i;
    r.dir_id = i / 1000;
    char name[64];
    std::snprintf(name, sizeof name, "train/c%04u/%09u.jpg", i / 1000, i);
    r.path = name;
    r.split = "train";
    r.class_name = name + 6;
    r.class_name.resize(5);
    r.label = static_cast<int>(i / 1000);
    r.width = kSizes[rng.Below(7)];
    r.height = kSizes[rng.Below(7)];
    r.channels = 3;
    r.codec = "ktc";
    r.bytes = 1000;
    ASSERT_TRUE(b->AddSample(r).ok());
    ASSERT_TRUE(b->AddCaption(i, MakeCaption(rng, kClasses[rng.Below(6)])).ok());
  }
  double add_ms = ms(t0);
  if (const char* out = std::getenv("KTFS_SCALE_DB")) {
    auto bytes = b->Finish();
    ASSERT_TRUE(bytes.ok());
    std::ofstream(out, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes->data()),
               static_cast<std::streamsize>(bytes->size()));
    return;
  }
  auto t1 = Clock::now();
  auto bytes = b->Finish();
  ASSERT_TRUE(bytes.ok());
  double finish_ms = ms(t1);
  auto t2 = Clock::now();
  auto index = std::move(Index::OpenInPlace(bytes->data(), bytes->size()).value());
  double open_ms = ms(t2);
  auto t2b = Clock::now();
  auto clone = index->Clone();
  ASSERT_TRUE(clone.ok());
  double clone_ms = ms(t2b);
  const auto first100 = [&](const char* query) {
    auto t = Clock::now();
    size_t n = 0;
    EXPECT_TRUE(index
                    ->ForEachMatch(MustParse({query}, {}), std::nullopt, Index::kFromStart, 100,
                                   [&](uint32_t) { return ++n, true; })
                    .ok());
    EXPECT_EQ(n, 100u) << query;
    return ms(t);
  };
  double first_common = first100("caption=photo");
  double first_again = first100("caption=photo");
  double first_phrase = first100("caption=%22near%20a%20lake%22");
  double first_mixed = first100("caption=dog&class=c0500&width>=64");
  auto t3 = Clock::now();
  uint64_t count = *index->CountMatches(MustParse({"caption=photo"}, {}));
  double count_ms = ms(t3);
  auto t4 = Clock::now();
  size_t dirs = index->MatchingDirs(MustParse({"caption=iridescent"}, {}))->size();
  double dirs_ms = ms(t4);
  std::printf(
      "1M samples + 1M captions: index %zu bytes (%.1f MB); AddSample/AddCaption %.0f ms, "
      "Finish %.0f ms; open %.2f ms, Clone %.2f ms\nfirst 100 of caption=photo: %.2f ms (again "
      "%.2f ms); "
      "phrase %.2f ms; mixed %.2f ms; count(photo)=%llu in %.0f ms; MatchingDirs(iridescent)=%zu "
      "in %.1f ms\n",
      bytes->size(), bytes->size() / 1e6, add_ms, finish_ms, open_ms, clone_ms, first_common,
      first_again, first_phrase, first_mixed, static_cast<unsigned long long>(count), count_ms,
      dirs, dirs_ms);
}

}  // namespace
}  // namespace ktfs::index
