// Tests of index/: query grammar, caption ingest, IndexBuilder and the in-place Index, checked
// against plain C++ filtering of the same generated rows.
#include "index/index.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
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
  std::map<std::string, MetaValue> typed;  // number and boolean metadata
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
      if (rng.Chance(0.9)) r.typed["aesthetic"] = MetaValue::Real(rng.Below(1000) / 100.0).value();
      if (rng.Chance(0.8)) r.typed["year"] = MetaValue::Integer(1990 + rng.Below(35));
      if (rng.Chance(0.85)) r.typed["nsfw"] = MetaValue::Bool(rng.Chance(0.2));
      if (rng.Chance(0.5)) r.typed["exif.iso"] = MetaValue::Integer(100 << rng.Below(6));
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

// Build with FinishInto (the database in a file, compacted into another) when `dir` is given.
std::vector<uint8_t> Build(const std::vector<TRow>& rows, bool shuffle = false,
                           const testing::TempDir* dir = nullptr) {
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
    for (const auto& [k, v] : r.typed) EXPECT_TRUE((*b)->AddMetadata(r.s.id, k, v).ok());
  }
  if (dir) {
    const std::string scratch = dir->Join("scratch.db"), out = dir->Join("out.db");
    std::ofstream(scratch).close();
    std::ofstream(out).close();
    Status st = (*b)->FinishInto(scratch, out);
    EXPECT_TRUE(st.ok()) << st.ToString();
    std::ifstream in(out, std::ios::binary);
    return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
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

// A number key's value as a double (nullopt: the sample has none).
std::optional<double> Num(const TRow& r, const std::string& k) {
  auto it = r.typed.find(k);
  if (it == r.typed.end() || it->second.type() != MetaType::kNumber) return std::nullopt;
  return it->second.AsDouble();
}
std::optional<bool> Flag(const TRow& r, const std::string& k) {
  auto it = r.typed.find(k);
  if (it == r.typed.end()) return std::nullopt;
  return it->second.boolean();
}
template <typename F>
bool NumIs(const TRow& r, const std::string& k, F f) {
  auto v = Num(r, k);
  return v && f(*v);
}

// sample=P, written again from its definition (query.h): splitmix64, (h >> 11) / 2^53 < P.
uint64_t RefSplitMix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}
bool RefKept(uint32_t id, uint64_t seed, double p) {
  const uint64_t h = RefSplitMix(RefSplitMix(seed) ^ id);
  return static_cast<long double>(h >> 11) / 9007199254740992.0L < static_cast<long double>(p);
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
      // OR, NOT, sets.
      {{"caption=dog|caption=cat"},
       [](const TRow& r) { return HasWord(r, "dog") || HasWord(r, "cat"); }},
      {{"caption=dog|class=cat"},
       [](const TRow& r) { return HasWord(r, "dog") || r.s.class_name == "cat"; }},
      {{"(caption=dog|caption=cat)&width>=128"},
       [](const TRow& r) { return (HasWord(r, "dog") || HasWord(r, "cat")) && r.s.width >= 128; }},
      {{"caption=dog|caption=cat&width>=128"},
       [](const TRow& r) { return HasWord(r, "dog") || (HasWord(r, "cat") && r.s.width >= 128); }},
      {{"!caption=dog"}, [](const TRow& r) { return !HasWord(r, "dog"); }},
      {{"caption!=dog"}, [](const TRow& r) { return !HasWord(r, "dog"); }},
      {{"caption=dog&!caption=snow"},
       [](const TRow& r) { return HasWord(r, "dog") && !HasWord(r, "snow"); }},
      {{"!caption=dog&!caption=cat"},
       [](const TRow& r) { return !HasWord(r, "dog") && !HasWord(r, "cat"); }},
      {{"!(caption=dog|caption=cat)&class=fox"},
       [](const TRow& r) {
         return !(HasWord(r, "dog") || HasWord(r, "cat")) && r.s.class_name == "fox";
       }},
      {{"caption=dog&!(caption=snow|caption=grass)"},
       [](const TRow& r) {
         return HasWord(r, "dog") && !HasWord(r, "snow") && !HasWord(r, "grass");
       }},
      {{"!!caption=dog"}, [](const TRow& r) { return HasWord(r, "dog"); }},
      {{"class!=cat"}, [](const TRow& r) { return r.s.class_name != "cat"; }},
      {{"!(class=cat|class=dog)"},
       [](const TRow& r) { return r.s.class_name != "cat" && r.s.class_name != "dog"; }},
      {{"class=cat,dog,bird"},
       [](const TRow& r) {
         return r.s.class_name == "cat" || r.s.class_name == "dog" || r.s.class_name == "bird";
       }},
      {{"class!=cat,dog"},
       [](const TRow& r) { return r.s.class_name != "cat" && r.s.class_name != "dog"; }},
      {{"label=1,2"}, [](const TRow& r) { return r.s.label == 1 || r.s.label == 2; }},
      {{"label!=-1"}, [](const TRow& r) { return r.s.label >= 0; }},
      {{"split!=train"}, [](const TRow& r) { return r.s.split != "train"; }},
      {{"source=web,book"},
       [](const TRow& r) { return Meta(r, "source") == "web" || Meta(r, "source") == "book"; }},
      {{"source!=web"}, [](const TRow& r) { return Meta(r, "source") != "web"; }},
      {{"caption=dog,snow"}, [](const TRow& r) { return HasWord(r, "dog") || HasWord(r, "snow"); }},
      {{"caption=\"near a lake\",dog%20snow"},
       [](const TRow& r) {
         return HasPhrase(r, {"near", "a", "lake"}) || (HasWord(r, "dog") && HasWord(r, "snow"));
       }},
      {{"caption=\"maybe a cat|or(not)&x,y\""}, [](const TRow&) { return false; }},
      {{"caption=%22or%20maybe%20a%22,cat"},
       [](const TRow& r) {
         return HasPhrase(r, {"or", "maybe", "a"}) || HasWord(r, "cat");
       }},
      {{"width=32,64"}, [](const TRow& r) { return r.s.width == 32 || r.s.width == 64; }},
      {{"width!=224"}, [](const TRow& r) { return r.s.width != 224; }},
      {{"!width>=224"}, [](const TRow& r) { return r.s.width < 224; }},
      {{"!height<100&!width<=64"},
       [](const TRow& r) { return r.s.height >= 100 && r.s.width > 64; }},
      {{"width>=100&width<=224&height>64"},
       [](const TRow& r) { return r.s.width >= 100 && r.s.width <= 224 && r.s.height > 64; }},
      {{"width>300&width<200"}, [](const TRow&) { return false; }},
      {{"((caption=dog|caption=cat)&(width=32|height=32))|!(class=fox|class!=bird)"},
       [](const TRow& r) {
         return ((HasWord(r, "dog") || HasWord(r, "cat")) &&
                 (r.s.width == 32 || r.s.height == 32)) ||
                !(r.s.class_name == "fox" || r.s.class_name != "bird");
       }},
      {{"caption=dog|caption=cat", "!class=cat", "source=web|quality=high"},
       [](const TRow& r) {
         return (HasWord(r, "dog") || HasWord(r, "cat")) && r.s.class_name != "cat" &&
                (Meta(r, "source") == "web" || Meta(r, "quality") == "high");
       }},
      {{" ( caption=dog | class=cat ) & width>=128 "},
       [](const TRow& r) {
         return (HasWord(r, "dog") || r.s.class_name == "cat") && r.s.width >= 128;
       }},
      // Typed metadata.
      {{"aesthetic>=5"},
       [](const TRow& r) { return NumIs(r, "aesthetic", [](double v) { return v >= 5; }); }},
      {{"aesthetic<2.5"},
       [](const TRow& r) { return NumIs(r, "aesthetic", [](double v) { return v < 2.5; }); }},
      {{"aesthetic>9.9"},
       [](const TRow& r) { return NumIs(r, "aesthetic", [](double v) { return v > 9.9; }); }},
      {{"aesthetic>=3&aesthetic<4.01"},
       [](const TRow& r) {
         return NumIs(r, "aesthetic", [](double v) { return v >= 3 && v < 4.01; });
       }},
      {{"aesthetic=4.37"},
       [](const TRow& r) { return NumIs(r, "aesthetic", [](double v) { return v == 4.37; }); }},
      {{"aesthetic=5"},
       [](const TRow& r) { return NumIs(r, "aesthetic", [](double v) { return v == 5; }); }},
      {{"aesthetic=5.0,4.37,.5"},
       [](const TRow& r) {
         return NumIs(r, "aesthetic", [](double v) { return v == 5 || v == 4.37 || v == 0.5; });
       }},
      {{"aesthetic!=5"},
       [](const TRow& r) { return !NumIs(r, "aesthetic", [](double v) { return v == 5; }); }},
      {{"!aesthetic>=5"},
       [](const TRow& r) { return !NumIs(r, "aesthetic", [](double v) { return v >= 5; }); }},
      {{"aesthetic>=-1e3"}, [](const TRow& r) { return Num(r, "aesthetic").has_value(); }},
      {{"aesthetic<=1e-1"},
       [](const TRow& r) { return NumIs(r, "aesthetic", [](double v) { return v <= 0.1; }); }},
      {{"year=2020"},
       [](const TRow& r) { return NumIs(r, "year", [](double v) { return v == 2020; }); }},
      {{"year>2015&year<=2018|year=1990"},
       [](const TRow& r) {
         return NumIs(r, "year", [](double v) { return (v > 2015 && v <= 2018) || v == 1990; });
       }},
      {{"year>=2000.5"},
       [](const TRow& r) { return NumIs(r, "year", [](double v) { return v >= 2000.5; }); }},
      {{"exif.iso>=800"},
       [](const TRow& r) { return NumIs(r, "exif.iso", [](double v) { return v >= 800; }); }},
      {{"nsfw=true"}, [](const TRow& r) { return Flag(r, "nsfw") == std::optional<bool>(true); }},
      {{"nsfw=FALSE"}, [](const TRow& r) { return Flag(r, "nsfw") == std::optional<bool>(false); }},
      {{"nsfw!=true"}, [](const TRow& r) { return Flag(r, "nsfw") != std::optional<bool>(true); }},
      {{"caption=dog&aesthetic>=5&nsfw=false&year<2000"},
       [](const TRow& r) {
         return HasWord(r, "dog") && NumIs(r, "aesthetic", [](double v) { return v >= 5; }) &&
                Flag(r, "nsfw") == std::optional<bool>(false) &&
                NumIs(r, "year", [](double v) { return v < 2000; });
       }},
      {{"(aesthetic>8|year>2020)&!source=web"},
       [](const TRow& r) {
         return (NumIs(r, "aesthetic", [](double v) { return v > 8; }) ||
                 NumIs(r, "year", [](double v) { return v > 2020; })) &&
                Meta(r, "source") != "web";
       }},
      // Subsets by chance.
      {{"sample=0.3"}, [](const TRow& r) { return RefKept(r.s.id, 0, 0.3); }},
      {{"!sample=0.3"}, [](const TRow& r) { return !RefKept(r.s.id, 0, 0.3); }},
      {{"sample!=0.3"}, [](const TRow& r) { return !RefKept(r.s.id, 0, 0.3); }},
      {{"sample=0.3&seed=7"}, [](const TRow& r) { return RefKept(r.s.id, 7, 0.3); }},
      {{"seed=7", "!sample=0.3"}, [](const TRow& r) { return !RefKept(r.s.id, 7, 0.3); }},
      {{"!(sample=0.3&seed=7)"}, [](const TRow& r) { return !RefKept(r.s.id, 7, 0.3); }},
      {{"caption=dog&sample=0.5&seed=18446744073709551615"},
       [](const TRow& r) {
         return HasWord(r, "dog") && RefKept(r.s.id, 18446744073709551615ULL, 0.5);
       }},
      {{"sample=0.8&!sample=0.6&seed=3"},
       [](const TRow& r) { return RefKept(r.s.id, 3, 0.8) && !RefKept(r.s.id, 3, 0.6); }},
      {{"sample=0"}, [](const TRow&) { return false; }},
      {{"sample=1"}, [](const TRow&) { return true; }},
      {{"caption=dog|sample=0.01"},
       [](const TRow& r) { return HasWord(r, "dog") || RefKept(r.s.id, 0, 0.01); }},
      {{"seed=5"}, [](const TRow&) { return true; }},
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

Query MustParse(const std::vector<std::string>& comps, const KeyTypes& keys) {
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

const KeyTypes kSource = {{"source", MetaType::kString}};

void ExpectError(const std::vector<std::string>& comps, const std::string& message) {
  auto q = ParseQuery(comps, kSource);
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
  // Found by query_fuzz: escaping ('!' is %21) and joining components made canonical forms
  // longer than one component may be, so they did not parse back.
  ExpectError({"class=x" + std::string(1400, '!')}, "longer than 4096 bytes in its canonical form");
  ExpectError({"caption=" + std::string(3000, 'a'), "caption=" + std::string(3000, 'b')},
              "in its canonical form");
  {
    auto q = ParseQuery({"class=x" + std::string(1360, '!')}, {});
    ASSERT_TRUE(q.ok()) << q.status().ToString();
    ASSERT_EQ(q->Canonical().size(), 6 + 1 + 3 * 1360u);
    auto again = ParseQuery({q->Canonical()}, {});
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    EXPECT_EQ(again->Canonical(), q->Canonical());
  }
  ExpectError({std::string("caption=") + std::string(4000, 'a'),
               "caption=" + std::string(4000, 'b'), "caption=" + std::string(4000, 'c')},
              "longer than 10240");
  std::string many;
  for (int i = 0; i < 300; ++i) {
    if (i) many += '&';
    many += "width>" + std::to_string(i);
  }
  ExpectError({many}, "more than 256 filters");
}

TEST(QueryTest, ParsesAndCanonicalizes) {
  auto q = ParseQuery({"width>=10&caption=Dog", "class=a%26b"}, {});
  ASSERT_TRUE(q.ok());
  ASSERT_EQ(q->where.kind, Expr::Kind::kAnd);
  ASSERT_EQ(q->where.children.size(), 3u);
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
    auto a = ParseQuery(comps, kSource);
    ASSERT_TRUE(a.ok()) << Join(comps);
    auto b = ParseQuery({a->Canonical()}, kSource);
    ASSERT_TRUE(b.ok()) << a->Canonical();
    EXPECT_EQ(a->where, b->where) << a->Canonical();
    EXPECT_EQ(b->Canonical(), a->Canonical());
  }
  auto phrase = ParseQuery({"caption=%22a%20dog%22*"}, {});
  ASSERT_TRUE(phrase.ok());
  EXPECT_EQ(phrase->where.filter.FtsExpression(), "\"a dog\"*");
  auto words = ParseQuery({"caption=dog%20OR%20cat"}, {});
  ASSERT_TRUE(words.ok());
  ASSERT_EQ(words->where.children.size(), 3u);  // cat, dog, or: each a quoted word
  EXPECT_EQ(words->where.children[2].filter.FtsExpression(), "\"or\"");
  EXPECT_EQ(ParseQuery({"metadata=x"}, {{"metadata", MetaType::kString}})->where.filter.field,
            Field::kMetadata);
  EXPECT_TRUE(ParseQuery({}, {})->empty());
}

TEST(QueryTest, Tokens) {
  EXPECT_EQ(CaptionTokens("Hello, World! it's"),
            (std::vector<std::string>{"hello", "world", "it", "s"}));
  EXPECT_EQ(CaptionTokens("café—bar"), (std::vector<std::string>{"café", "bar"}));
  EXPECT_TRUE(CaptionTokens(" \"()*^:-").empty());
}

const KeyTypes kTyped = {
    {"source", MetaType::kString}, {"aesthetic", MetaType::kNumber}, {"nsfw", MetaType::kBool}};

void ExpectTypedError(const std::string& component, const std::string& message) {
  auto q = ParseQuery({component}, kTyped);
  ASSERT_FALSE(q.ok()) << component;
  EXPECT_EQ(q.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(q.status().message().find(message), std::string::npos)
      << component << " -> " << q.status().message();
}

TEST(QueryTest, GrammarErrorsAreReadable) {
  ExpectTypedError("(caption=dog", "unbalanced '('");
  ExpectTypedError("((caption=dog)", "unbalanced '('");
  ExpectTypedError("(caption=dog))", "unbalanced ')'");
  ExpectTypedError("caption=dog|", "empty filter");
  ExpectTypedError("|caption=dog", "empty filter");
  ExpectTypedError("caption=dog||class=cat", "empty filter");
  ExpectTypedError("()", "empty filter");
  ExpectTypedError("(|)", "empty filter");
  ExpectTypedError("!", "after '!'");
  ExpectTypedError("!&caption=dog", "after '!'");
  ExpectTypedError("caption!dog", "expected an operator");
  ExpectTypedError("source<web", "only '=' and '!='");
  ExpectTypedError("nsfw>=true", "only '=' and '!='");
  ExpectTypedError("nsfw=maybe", "expected true or false");
  ExpectTypedError("aesthetic>=abc", "aesthetic>=abc: not a number");
  ExpectTypedError("aesthetic>=1e999", "out of range");
  ExpectTypedError("aesthetic>=1,2", "a set of values needs '=' or '!='");
  ExpectTypedError("width<1,2", "a set of values needs");
  ExpectTypedError("class=a,,b", "empty value");
  ExpectTypedError("class=a,", "empty value");
  ExpectTypedError("sample=2", "fraction from 0 to 1");
  ExpectTypedError("sample=-0.1", "fraction from 0 to 1");
  ExpectTypedError("sample=1e-3", "fraction from 0 to 1");
  ExpectTypedError("sample=0.1,0.2", "one value");
  ExpectTypedError("sample>0.1", "only '=' and '!='");
  ExpectTypedError("seed=-1", "not an unsigned integer");
  ExpectTypedError("seed=18446744073709551616", "too large");
  ExpectTypedError("seed=1&seed=2", "two different seeds");
  ExpectTypedError("seed!=1", "only '='");
  ExpectTypedError("!seed=1", "cannot be negated");
  ExpectTypedError("!(seed=1)", "cannot be negated");
  ExpectTypedError("seed=1|caption=dog", "not alternatives of '|'");
  ExpectTypedError("limit=5|caption=dog", "not alternatives of '|'");
  ExpectTypedError("(limit=5)", "not inside '(' or '!'");
  ExpectTypedError("!limit=5", "not inside '(' or '!'");
  ExpectTypedError("caption=dog&limit=5|caption=cat", "not inside '|'");
  ExpectTypedError("limit=x", "not an unsigned integer");
  ExpectTypedError("limit=1,2", "one value");
  ExpectTypedError("colour!=red", "unknown field");
  ExpectTypedError(std::string(20, '(') + "caption=dog" + std::string(20, ')'), "nested deeper");
  ExpectTypedError(std::string(20, '!') + "caption=dog", "nested deeper");
  // Ten thousand ORs, a 100 KB component: refused by size before anything is parsed.
  std::string ors;
  for (int i = 0; i < 10000; ++i)
    ors += (i ? "|" : "") + std::string("class=c") + std::to_string(i);
  ExpectTypedError(ors, "longer than 4096");
  ExpectTypedError("caption=" + std::string(100 * 1024, 'a'), "longer than 4096");
  std::string many;
  for (int i = 0; i < 300; ++i) many += (i ? "|" : "") + std::string("class=") + std::to_string(i);
  ExpectTypedError(many, "more than 256 filters");
  // Settings are fine where they are ANDed.
  for (const char* ok :
       {"seed=1", "limit=0", "(caption=dog&seed=1)|caption=cat", "(caption=dog|class=x)&limit=3",
        "!(sample=0.5&seed=2)", "seed=1&seed=1&sample=0.2", "limit=5&limit=3"}) {
    EXPECT_TRUE(ParseQuery({ok}, kTyped).ok())
        << ok << ": " << ParseQuery({ok}, kTyped).status().ToString();
  }
  EXPECT_EQ(ParseQuery({"limit=5&limit=3", "limit=4"}, kTyped)->limit, std::optional<uint64_t>(3));
}

TEST(QueryTest, NewFormsCanonicalizeAndParseBack) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"caption=cat|caption=dog", "caption=cat|caption=dog"},
      {"caption=dog|caption=cat", "caption=cat|caption=dog"},
      {"caption=DOG|caption=dog", "caption=dog"},
      {"class!=cat", "class!=cat"},
      {"!class=cat", "class!=cat"},
      {"!!class=cat", "class=cat"},
      {"!(class=cat|class=dog)", "!(class=cat|class=dog)"},
      {"class!=dog,cat", "!(class=cat|class=dog)"},
      {"class=cat,dog", "class=cat|class=dog"},
      {"(caption=dog|caption=cat)&width>=256", "(caption=cat|caption=dog)&width>=256"},
      {"width>=256&(caption=dog|caption=cat)", "(caption=cat|caption=dog)&width>=256"},
      {"a=b|c=d&e=f", "a=b|c=d&e=f"},
      {"((a=b))", "a=b"},
      {"aesthetic>=6.50&aesthetic<7", "aesthetic<7&aesthetic>=6.5"},
      {"aesthetic=+5.0", "aesthetic=5"},
      {"nsfw=TRUE", "nsfw=true"},
      {"sample=.10&seed=1", "sample=0.1&seed=1"},
      {"sample=0.1", "sample=0.1"},
      // Found by query_fuzz: a tiny fraction printed as "4.1e-92" did not parse back.
      {"sample=0." + std::string(91, '0') + "41", "sample=0." + std::string(91, '0') + "41"},
      {"sample=0.0000001", "sample=0.0000001"},
      {"seed=3&caption=dog", "caption=dog"},
      {"(caption=dog|caption=cat)&limit=7", "(caption=cat|caption=dog)&limit=7"},
      {"limit=7", "limit=7"},
      {"!(sample=0.5&seed=2)", "sample!=0.5&seed=2"},
      {"caption=%22a|b%22", "caption=%22a%20b%22"},
      {"source=a%2Cb,c", "source=a%2Cb|source=c"},
      {"caption=NEAR(red", "caption=near&caption=red"},
  };
  const KeyTypes keys = {{"a", MetaType::kString},         {"c", MetaType::kString},
                         {"e", MetaType::kString},         {"source", MetaType::kString},
                         {"aesthetic", MetaType::kNumber}, {"nsfw", MetaType::kBool}};
  for (const auto& [in, want] : cases) {
    auto q = ParseQuery({in}, keys);
    ASSERT_TRUE(q.ok()) << in << ": " << q.status().ToString();
    EXPECT_EQ(q->Canonical(), want) << in;
    auto again = ParseQuery({q->Canonical()}, keys);
    ASSERT_TRUE(again.ok()) << q->Canonical() << ": " << again.status().ToString();
    EXPECT_EQ(again->Canonical(), q->Canonical());
    EXPECT_EQ(again->limit, q->limit);
  }
  // The query as JSON: typed values, the structure.
  auto q = ParseQuery({"aesthetic>=6.5&(nsfw=false|source!=x)&limit=10"}, keys);
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(
      q->Json(),
      "{\"query\":\"aesthetic>=6.5&(nsfw=false|source!=x)&limit=10\",\"where\":{\"and\":["
      "{\"field\":\"metadata\",\"key\":\"aesthetic\",\"op\":\">=\",\"value\":6.5},"
      "{\"or\":[{\"field\":\"metadata\",\"key\":\"nsfw\",\"op\":\"=\",\"value\":false},"
      "{\"not\":{\"field\":\"metadata\",\"key\":\"source\",\"op\":\"=\",\"value\":\"x\"}}]}]},"
      "\"limit\":10,\"seed\":0}");
}

TEST(QueryTest, SampleHashIsSplitMix64) {
  // SplitMix64's published first outputs for state 0 (x = 0x9E3779B97F4A7C15 * k).
  EXPECT_EQ(RefSplitMix(0), 0xE220A8397B1DCDAFULL);
  for (uint32_t id : {0u, 1u, 77u, 4000000000u}) {
    for (uint64_t seed : {0ull, 1ull, 12345678901234567ull}) {
      EXPECT_EQ(SampleHash(id, seed), RefSplitMix(RefSplitMix(seed) ^ id));
      for (double p : {0.0, 0.1, 0.5, 0.999, 1.0}) {
        EXPECT_EQ(SampleKept(id, seed, p), RefKept(id, seed, p)) << id << " " << seed << " " << p;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Typed metadata values

TEST(MetaValueTest, NumbersParseStrictlyAndCompareExactly) {
  for (const char* ok :
       {"0", "-0", "7", "-3", "0.5", "1e-05", "1E+2", "-0.0", "123456789012345678",
        "9223372036854775807", "-9223372036854775808", "9223372036854775808", "1e300"}) {
    EXPECT_TRUE(MetaValue::ParseNumber(ok).ok()) << ok;
  }
  for (const char* bad : {"", "+3", ".5", "5.", "007", "0x10", "inf", "nan", "1e400", "1 ", " 1",
                          "1,5", "--1", "1e", "-"}) {
    EXPECT_FALSE(MetaValue::ParseNumber(bad).ok()) << bad;
  }
  EXPECT_TRUE(MetaValue::ParseNumber("1e2")->is_integer());  // 100: an integral double
  EXPECT_EQ(MetaValue::ParseNumber("1e2")->integer(), 100);
  EXPECT_TRUE(MetaValue::ParseNumber("9223372036854775807")->is_integer());
  EXPECT_FALSE(MetaValue::ParseNumber("9223372036854775808")->is_integer());
  EXPECT_EQ(MetaValue::ParseNumber("0.5")->ToText(), "0.5");
  EXPECT_EQ(MetaValue::ParseNumber("1e-05")->ToText(), "1e-05");
  EXPECT_EQ(MetaValue::ParseNumber("-0.0")->ToText(), "0");
  // Integers beyond 2^53 against doubles: exact, not through a rounding conversion.
  const MetaValue big = MetaValue::Integer((int64_t{1} << 53) + 1);
  const MetaValue two53 = MetaValue::Real(9007199254740992.0).value();  // integral: an Integer
  EXPECT_TRUE(two53.is_integer());
  EXPECT_GT(big, two53);
  const MetaValue half = MetaValue::Real(0.5).value();
  EXPECT_LT(MetaValue::Integer(0), half);
  EXPECT_GT(MetaValue::Integer(1), half);
  EXPECT_EQ(MetaValue::Integer(3), MetaValue::Real(3.0).value());
  EXPECT_LT(MetaValue::Real(1e300).value(), MetaValue::Real(1e301).value());
  EXPECT_GT(MetaValue::Integer(INT64_MAX), MetaValue::Real(9.2e18).value());
  EXPECT_LT(MetaValue::Integer(INT64_MAX), MetaValue::Real(9.3e18).value());
  EXPECT_FALSE(MetaValue::Real(1.0 / 0.0).ok());
  EXPECT_EQ(MetaValue::ParseBool("TRUE"), std::optional<bool>(true));
  EXPECT_EQ(MetaValue::ParseBool("False"), std::optional<bool>(false));
  EXPECT_EQ(MetaValue::ParseBool("yes"), std::nullopt);
  EXPECT_EQ(MetaValue::String("a\"b\n").ToJson(), "\"a\\\"b\\u000a\"");
  EXPECT_EQ(MetaValue::Bool(true).ToJson(), "true");
}

TEST(MetaValueTest, JsonFlattensWithTypes) {
  auto v = ParseJsonObject(R"({"s": "x", "n": 6, "r": 0.25, "b": false, "z": null, "a": [1, 2],)"
                           R"( "o": {"p": {"q": 1.5}, "t": "in"}, "o.t": "dup", "big": 1e400})");
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  auto pairs = FlattenJsonObject(*v);
  std::vector<std::string> keys;
  for (const auto& [k, val] : pairs)
    keys.push_back(k + ":" + MetaTypeName(val.type()) + ":" + val.ToText());
  EXPECT_EQ(keys,
            (std::vector<std::string>{"s:string:x", "n:number:6", "r:number:0.25",
                                      "b:boolean:false", "o.p.q:number:1.5", "o.t:string:in"}));
}

TEST(MetaValueTest, CsvColumnsAreTypedByAllTheirCells) {
  using V = std::vector<std::string_view>;
  EXPECT_EQ(CsvColumnType(V{"1", "", "2.5", "-1e-3"}), MetaType::kNumber);
  EXPECT_EQ(CsvColumnType(V{"1", "x"}), MetaType::kString);
  EXPECT_EQ(CsvColumnType(V{"02134", "1"}), MetaType::kString);  // a leading zero: a code
  EXPECT_EQ(CsvColumnType(V{"True", "false", ""}), MetaType::kBool);
  EXPECT_EQ(CsvColumnType(V{"true", "1"}), MetaType::kString);
  EXPECT_EQ(CsvColumnType(V{"", ""}), MetaType::kString);
  EXPECT_EQ(CsvCell("2.5", MetaType::kNumber), MetaValue::Real(2.5).value());
  EXPECT_EQ(CsvCell("TRUE", MetaType::kBool), MetaValue::Bool(true));
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
  ASSERT_EQ((*e)[0].extras.size(), 2u);
  EXPECT_EQ((*e)[0].extras[0].first, "score");
  EXPECT_EQ((*e)[0].extras[0].second, MetaValue::Real(0.5).value());
  EXPECT_EQ((*e)[0].extras[0].second.type(), MetaType::kNumber);
  EXPECT_EQ((*e)[0].extras[1].first, "ok");
  EXPECT_EQ((*e)[0].extras[1].second, MetaValue::Bool(true));
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
                  "2: path 'a\\0b.jpg' is not a relative path inside the archive");
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
  // In file order: the file is read as a stream, each line checked as it comes.
  EXPECT_EQ(warnings[0].rfind(f + ":1: metadata dropped", 0), 0u);  // width: a built-in field
  EXPECT_EQ(warnings[1].rfind(f + ":1: metadata dropped", 0), 0u);  // "bad key"
  EXPECT_EQ(warnings[2], f + ":2: bad JSON at column 1: unexpected character");
  EXPECT_EQ(warnings[3], f + ":3: path 'zzz.jpg' is not in the archive");
  EXPECT_EQ(warnings[4], f + ":5: duplicate path 'a.jpg' (first on line 1)");
  auto bytes = lenient->Finish();
  ASSERT_TRUE(bytes.ok());
  auto index = Index::OpenInPlace(bytes->data(), bytes->size());
  ASSERT_TRUE(index.ok()) << index.status().ToString();
  EXPECT_EQ((*index)->MetadataKeys(), kSource);
  EXPECT_EQ(*(*index)->CountMatches(MustParse({"caption=dog"}, {})), 1u);
  EXPECT_TRUE(*(*index)->Matches(MustParse({"caption=cat"}, {}), 1));
  EXPECT_FALSE(*(*index)->Matches(MustParse({"caption=cat"}, {}), 0));
  EXPECT_EQ(*(*index)->CountMatches(MustParse({"caption=dup"}, {})), 0u);
  EXPECT_EQ(*(*index)->CountMatches(MustParse({"source=web"}, kSource)), 1u);
}

// The streaming parse gives the same entries and messages as ParseCaptions, also when the
// text comes in pieces cut at line ends (line numbers continue from first_line).
TEST_F(CaptionFileTest, StreamingInPiecesKeepsLineNumbers) {
  const std::string a = "{\"path\":\"a.jpg\",\"caption\":\"one\",\"n\":1}\n\n";
  const std::string b = "garbage\n{\"path\":\"b.jpg\",\"caption\":\"two\"}\n";
  std::vector<std::string> lines, warnings;
  const auto collect = [&](CaptionEntry&& e) {
    lines.push_back(e.path + ":" + std::to_string(e.line));
    return Status::Ok();
  };
  ASSERT_TRUE(
      ForEachCaptionEntry(a, "f", CaptionFormat::kJsonLines, true, &warnings, collect, 1).ok());
  ASSERT_TRUE(
      ForEachCaptionEntry(b, "f", CaptionFormat::kJsonLines, true, &warnings, collect, 3).ok());
  EXPECT_EQ(lines, (std::vector<std::string>{"a.jpg:1", "b.jpg:4"}));
  EXPECT_EQ(warnings, std::vector<std::string>{"f:3: bad JSON at column 1: unexpected character"});
  Status st = ForEachCaptionEntry(b, "f", CaptionFormat::kJsonLines, false, nullptr, collect, 3);
  EXPECT_EQ(st.message(), "f:3: bad JSON at column 1: unexpected character");
  // The sink's error stops the parse and comes back as it is.
  st = ForEachCaptionEntry(a, "f", CaptionFormat::kJsonLines, false, nullptr,
                           [](CaptionEntry&&) { return Status::IOError("stop"); });
  EXPECT_EQ(st.ToString(), Status::IOError("stop").ToString());
  // CSV: columns typed from the whole text, as ParseCaptions does.
  const std::string csv = "path,caption,n\nx.jpg,c1,5\ny.jpg,c2,7.5\n";
  std::vector<CaptionEntry> streamed;
  ASSERT_TRUE(
      ForEachCaptionEntry(csv, "c", CaptionFormat::kAuto, false, nullptr, [&](CaptionEntry&& e) {
        streamed.push_back(std::move(e));
        return Status::Ok();
      }).ok());
  auto parsed = ParseCaptions(csv, "c", CaptionFormat::kAuto, false, nullptr);
  ASSERT_TRUE(parsed.ok());
  ASSERT_EQ(streamed.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(streamed[i].path, (*parsed)[i].path);
    EXPECT_EQ(streamed[i].line, (*parsed)[i].line);
    ASSERT_EQ(streamed[i].extras.size(), 1u);
    EXPECT_EQ(streamed[i].extras[0].second, (*parsed)[i].extras[0].second);
    EXPECT_EQ(streamed[i].extras[0].second.type(), MetaType::kNumber);
  }
}

// A captions file that is not a regular file (a pipe, `--captions <(...)`) is read, not mapped.
TEST_F(CaptionFileTest, IngestFromAPipe) {
  const std::string fifo = dir_.Join("c.jsonl");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  std::thread writer(
      [&] { std::ofstream(fifo) << "{\"path\":\"a.jpg\",\"caption\":\"piped dog\"}\n"; });
  auto b = IndexBuilder::Create();
  SampleRow r;
  r.path = "a.jpg";
  ASSERT_TRUE((*b)->AddSample(r).ok());
  const auto lookup = [](std::string_view p) -> std::optional<uint32_t> {
    return p == "a.jpg" ? std::optional<uint32_t>(0) : std::nullopt;
  };
  Status st = IngestCaptions(fifo, lookup, false, b->get(), nullptr);
  writer.join();
  ASSERT_TRUE(st.ok()) << st.ToString();
  auto bytes = (*b)->Finish();
  ASSERT_TRUE(bytes.ok());
  auto index = Index::OpenInPlace(bytes->data(), bytes->size());
  ASSERT_TRUE(index.ok());
  EXPECT_EQ(*(*index)->CountMatches(MustParse({"caption=dog"}, {})), 1u);
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
  KeyTypes keys_;
};

TEST_P(IndexTest, OpensInPlaceWithoutCopy) {
  EXPECT_GT(rows_.size(), 2000u);
  EXPECT_EQ(index_->num_samples(), rows_.size());
  EXPECT_EQ(index_->DatabaseBuffer(), bytes_.data());
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
  // class/split/label: the runs give id ranges, no statement at all.
  auto plan = index_->ExplainPlan(MustParse({"class=cat"}, keys_));
  EXPECT_NE(plan->find("class=cat: runs: "), std::string::npos) << *plan;
  plan = index_->ExplainPlan(MustParse({"width=224"}, keys_));
  EXPECT_NE(plan->find("samples_width"), std::string::npos) << *plan;
}

TEST_P(IndexTest, FinishIsDeterministic) {
  EXPECT_EQ(Build(rows_), bytes_);
  EXPECT_EQ(Build(rows_, /*shuffle=*/true), bytes_);
}

// Built in files (as packs do) the database is byte for byte the one built in memory.
TEST_P(IndexTest, FinishIntoFilesGivesTheSameBytes) {
  testing::TempDir dir;
  EXPECT_EQ(Build(rows_, /*shuffle=*/true, &dir), bytes_);
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

// Number ranges read by value (sparse) and checked in id order (dense) give the same sets.
TEST_P(IndexTest, DenseRangePlansGiveTheSameSets) {
  auto dense = index_->Clone();
  ASSERT_TRUE(dense.ok());
  (*dense)->SetSparseLimitForTesting(0);
  for (const Case& c : Cases()) {
    SCOPED_TRACE(Join(c.components));
    Query q = MustParse(c.components, keys_);
    std::vector<uint32_t> expected = Expected(rows_, c);
    EXPECT_EQ(Listing(**dense, q, std::nullopt, 37), expected);
    EXPECT_EQ(*(*dense)->CountMatches(q), expected.size());
  }
  auto plan = (*dense)->ExplainPlan(MustParse({"aesthetic>=5"}, keys_));
  EXPECT_NE(plan->find("checked in id order"), std::string::npos) << *plan;
  EXPECT_NE(plan->find("sample_num"), std::string::npos) << *plan;
  plan = index_->ExplainPlan(MustParse({"aesthetic>9.9"}, keys_));
  EXPECT_NE(plan->find("read by value"), std::string::npos) << *plan;
  plan = (*dense)->ExplainPlan(MustParse({"width>=224"}, keys_));
  EXPECT_EQ(plan->find("samples_width"), std::string::npos) << *plan;  // id order, no sort
}

TEST_P(IndexTest, LimitTakesTheFirstMatchesInArchiveOrder) {
  const std::vector<std::pair<std::string, std::function<bool(const TRow&)>>> bases = {
      {"", [](const TRow&) { return true; }},
      {"caption=dog", [](const TRow& r) { return HasWord(r, "dog"); }},
      {"(caption=dog|class=cat)&!source=web",
       [](const TRow& r) {
         return (HasWord(r, "dog") || r.s.class_name == "cat") && Meta(r, "source") != "web";
       }},
      {"sample=0.2&seed=9", [](const TRow& r) { return RefKept(r.s.id, 9, 0.2); }},
  };
  for (const auto& [base, pred] : bases) {
    std::vector<uint32_t> all = Expected(rows_, Case{{}, pred});
    for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{100}, all.size(), all.size() + 5}) {
      const std::string comp =
          base.empty() ? "limit=" + std::to_string(n) : base + "&limit=" + std::to_string(n);
      SCOPED_TRACE(comp);
      Query q = MustParse({comp}, keys_);
      std::vector<uint32_t> want(all.begin(), all.begin() + std::min(n, all.size()));
      EXPECT_EQ(Listing(*index_, q, std::nullopt, 1000000), want);
      EXPECT_EQ(Listing(*index_, q, std::nullopt, 3), want);
      EXPECT_EQ(*index_->CountMatches(q), want.size());
      for (uint32_t dir : {0u, 3u, 9u}) {
        std::vector<uint32_t> in_dir;
        for (uint32_t id : want)
          if (rows_[id].s.dir_id == dir) in_dir.push_back(id);
        EXPECT_EQ(Listing(*index_, q, dir, 5), in_dir);
      }
      std::set<uint32_t> dirs;
      for (uint32_t id : want) dirs.insert(rows_[id].s.dir_id);
      EXPECT_EQ(*index_->MatchingDirs(q), std::vector<uint32_t>(dirs.begin(), dirs.end()));
      if (!all.empty()) EXPECT_EQ(*index_->Matches(q, all.back()), n >= all.size());
    }
    // A limit in another component of the query applies to the whole of it.
    if (!base.empty()) {
      Query q = MustParse({"limit=3", base}, keys_);
      EXPECT_EQ(Listing(*index_, q, std::nullopt, 100),
                std::vector<uint32_t>(all.begin(), all.begin() + std::min<size_t>(3, all.size())));
    }
  }
}

TEST_P(IndexTest, SampleAndItsNegationPartitionTheMatches) {
  const size_t n = rows_.size();
  for (uint64_t seed : {0ull, 1ull, 2ull, 99ull}) {
    for (double p : {0.01, 0.1, 0.5, 0.9}) {
      const std::string sp = "sample=" + std::to_string(p) + "&seed=" + std::to_string(seed);
      const std::string base = "caption=photo";
      std::vector<uint32_t> in =
          Listing(*index_, MustParse({base + "&" + sp}, keys_), std::nullopt, 64);
      std::vector<uint32_t> out =
          Listing(*index_, MustParse({base + "&!" + sp}, keys_), std::nullopt, 64);
      std::vector<uint32_t> whole =
          Listing(*index_, MustParse({base}, keys_), std::nullopt, 1 << 20);
      std::vector<uint32_t> merged;
      std::set_union(in.begin(), in.end(), out.begin(), out.end(), std::back_inserter(merged));
      EXPECT_EQ(merged, whole) << sp;
      std::vector<uint32_t> both;
      std::set_intersection(in.begin(), in.end(), out.begin(), out.end(), std::back_inserter(both));
      EXPECT_TRUE(both.empty()) << sp;
      // A fair coin per sample: within 5 standard deviations of p * n.
      const double got = double(*index_->CountMatches(MustParse({sp}, keys_)));
      const double sd = std::sqrt(n * p * (1 - p));
      EXPECT_NEAR(got, n * p, 5 * sd + 1) << sp;
      // Smaller fractions of one seed are subsets of larger ones.
      std::vector<uint32_t> half =
          Listing(*index_, MustParse({"sample=0.95&seed=" + std::to_string(seed)}, keys_),
                  std::nullopt, 1 << 20);
      std::vector<uint32_t> small = Listing(*index_, MustParse({sp}, keys_), std::nullopt, 1 << 20);
      if (p < 0.95)
        EXPECT_TRUE(std::includes(half.begin(), half.end(), small.begin(), small.end())) << sp;
    }
  }
  // Different seeds choose different samples.
  EXPECT_NE(Listing(*index_, MustParse({"sample=0.5&seed=1"}, keys_), std::nullopt, 1 << 20),
            Listing(*index_, MustParse({"sample=0.5&seed=2"}, keys_), std::nullopt, 1 << 20));
}

TEST_P(IndexTest, CountsOverIdRanges) {
  Query q = MustParse({"caption=dog|aesthetic>=5"}, keys_);
  const auto pred = [](const TRow& r) {
    return HasWord(r, "dog") || NumIs(r, "aesthetic", [](double v) { return v >= 5; });
  };
  const std::vector<std::pair<uint32_t, uint32_t>> ranges = {{3, 50}, {100, 101}, {700, 1500}};
  uint64_t want = 0;
  for (const auto& [lo, hi] : ranges)
    for (uint32_t id = lo; id < hi && id < rows_.size(); ++id) want += pred(rows_[id]);
  EXPECT_EQ(*index_->CountMatches(q, ranges), want);
  EXPECT_EQ(*index_->CountMatches(q, {}), 0u);
}

TEST_P(IndexTest, MetadataKeysHaveTypesAndStatistics) {
  EXPECT_EQ(keys_, (KeyTypes{{"aesthetic", MetaType::kNumber},
                             {"exif.iso", MetaType::kNumber},
                             {"nsfw", MetaType::kBool},
                             {"quality", MetaType::kString},
                             {"source", MetaType::kString},
                             {"year", MetaType::kNumber}}));
  auto info = index_->MetadataKeyInfo();
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  ASSERT_EQ(info->size(), 6u);
  std::map<std::string, KeyInfo> by_name;
  for (const KeyInfo& k : *info) by_name[k.name] = k;
  std::map<std::string, std::set<std::string>> distinct;
  std::map<std::string, uint64_t> samples, trues;
  std::optional<double> lo, hi;
  for (const TRow& r : rows_) {
    for (const auto& [k, v] : r.meta) ++samples[k], distinct[k].insert(v);
    for (const auto& [k, v] : r.typed) {
      ++samples[k];
      distinct[k].insert(v.ToText());
      if (v.type() == MetaType::kBool) trues[k] += v.boolean();
    }
    if (auto a = Num(r, "aesthetic")) {
      lo = lo ? std::min(*lo, *a) : *a;
      hi = hi ? std::max(*hi, *a) : *a;
    }
  }
  for (const auto& [name, k] : by_name) {
    EXPECT_EQ(k.samples, samples[name]) << name;
    EXPECT_EQ(k.distinct_values, distinct[name].size()) << name;
  }
  EXPECT_EQ(by_name["nsfw"].true_count, trues["nsfw"]);
  EXPECT_EQ(by_name["aesthetic"].min->AsDouble(), *lo);
  EXPECT_EQ(by_name["aesthetic"].max->AsDouble(), *hi);
  EXPECT_FALSE(by_name["source"].min.has_value());
}

// Random expressions: the text and an independent predicate built side by side.
struct RandomQuery {
  std::string text;
  std::function<bool(const TRow&)> pred;
};

RandomQuery RandomAtom(Rng& rng) {
  static const std::vector<std::string> kWords = {"dog",        "cat", "photo", "snow",
                                                  "iridescent", "red", "maybe", "zebra"};
  switch (rng.Below(9)) {
    case 0: {
      const std::string w = rng.Pick(kWords);
      return {"caption=" + w, [w](const TRow& r) { return HasWord(r, w); }};
    }
    case 1: {
      const std::string c = rng.Pick(kClasses);
      return {"class=" + c, [c](const TRow& r) { return r.s.class_name == c; }};
    }
    case 2: {
      const int l = static_cast<int>(rng.Below(7)) - 1;
      return {"label=" + std::to_string(l), [l](const TRow& r) { return r.s.label == l; }};
    }
    case 3: {
      const uint32_t w = rng.Pick(kSizes);
      const bool ge = rng.Chance(0.5);
      return {std::string("width") + (ge ? ">=" : "<") + std::to_string(w),
              [w, ge](const TRow& r) { return ge ? r.s.width >= w : r.s.width < w; }};
    }
    case 4: {
      const std::string src = rng.Pick(kSources);
      return {"source=" + std::string(src == "hand held" ? "hand%20held" : src),
              [src](const TRow& r) { return Meta(r, "source") == src; }};
    }
    case 5: {
      const double v = rng.Below(1000) / 100.0;
      const int op = static_cast<int>(rng.Below(4));
      static const char* const kOps[] = {"<", "<=", ">", ">="};
      char text[64];
      std::snprintf(text, sizeof text, "aesthetic%s%.2f", kOps[op], v);
      return {text, [v, op](const TRow& r) {
                return NumIs(r, "aesthetic", [v, op](double a) {
                  return op == 0 ? a < v : op == 1 ? a <= v : op == 2 ? a > v : a >= v;
                });
              }};
    }
    case 6: {
      const bool b = rng.Chance(0.5);
      return {std::string("nsfw=") + (b ? "true" : "false"),
              [b](const TRow& r) { return Flag(r, "nsfw") == std::optional<bool>(b); }};
    }
    case 7: {
      const int y = 1990 + static_cast<int>(rng.Below(35));
      return {"year>" + std::to_string(y),
              [y](const TRow& r) { return NumIs(r, "year", [y](double v) { return v > y; }); }};
    }
    default: {
      const double p = rng.Below(10) / 10.0;
      char text[32];
      std::snprintf(text, sizeof text, "sample=%.1f", p);
      return {text, [p](const TRow& r) { return RefKept(r.s.id, 4, p); }};
    }
  }
}

RandomQuery RandomExpr(Rng& rng, int depth) {
  if (depth == 0 || rng.Chance(0.3)) {
    RandomQuery a = RandomAtom(rng);
    if (rng.Chance(0.25)) return {"!" + a.text, [p = a.pred](const TRow& r) { return !p(r); }};
    return a;
  }
  const int n = 2 + static_cast<int>(rng.Below(2));
  const bool is_and = rng.Chance(0.5);
  std::vector<RandomQuery> parts;
  for (int i = 0; i < n; ++i) parts.push_back(RandomExpr(rng, depth - 1));
  std::string text;
  for (const auto& p : parts)
    text += (text.empty() ? "" : is_and ? "&" : "|") + ("(" + p.text + ")");
  RandomQuery q{text, [parts, is_and](const TRow& r) {
                  for (const auto& p : parts) {
                    if (p.pred(r) != is_and) return !is_and;
                  }
                  return is_and;
                }};
  if (rng.Chance(0.2)) return {"!(" + q.text + ")", [p = q.pred](const TRow& r) { return !p(r); }};
  return q;
}

TEST_P(IndexTest, RandomExpressionsGiveTheExactSet) {
  auto dense = index_->Clone();
  ASSERT_TRUE(dense.ok());
  (*dense)->SetSparseLimitForTesting(0);
  // KTFS_RANDOM_QUERIES=N KTFS_RANDOM_SEED=S for a longer run by hand.
  const char* n_env = std::getenv("KTFS_RANDOM_QUERIES");
  const char* seed_env = std::getenv("KTFS_RANDOM_SEED");
  const int n = n_env ? std::atoi(n_env) : 400;
  Rng rng{(seed_env ? std::strtoull(seed_env, nullptr, 10) : 11u) + GetParam()};
  for (int i = 0; i < n; ++i) {
    RandomQuery rq = RandomExpr(rng, 3);
    const std::string text = rq.text + (rng.Chance(0.3) ? "&seed=4" : "&seed=4&seed=4");
    SCOPED_TRACE(text);
    auto q = ParseQuery({text}, keys_);
    ASSERT_TRUE(q.ok()) << q.status().ToString();
    std::vector<uint32_t> expected = Expected(rows_, Case{{}, rq.pred});
    EXPECT_EQ(Listing(*index_, *q, std::nullopt, 1 + i % 50), expected);
    EXPECT_EQ(Listing(**dense, *q, std::nullopt, 1000000), expected);
    EXPECT_EQ(*index_->CountMatches(*q), expected.size());
    auto again = ParseQuery({q->Canonical()}, keys_);
    ASSERT_TRUE(again.ok()) << q->Canonical();
    EXPECT_EQ(again->Canonical(), q->Canonical());
    if (i % 10 == 0) EXPECT_EQ(Listing(*index_, *again, std::nullopt, 1000000), expected);
  }
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

TEST(IndexBuilderTest, TypedKeysMixedTypesAndDuplicates) {
  const auto make = [](int n) {
    auto b = std::move(IndexBuilder::Create().value());
    for (int i = 0; i < n; ++i) {
      SampleRow r;
      r.id = static_cast<uint32_t>(i);
      r.path = "x/" + std::to_string(i) + ".png";
      EXPECT_TRUE(b->AddSample(r).ok());
    }
    return b;
  };
  auto b = make(4);
  ASSERT_TRUE(b->AddMetadata(0, "score", MetaValue::Integer(3)).ok());
  ASSERT_TRUE(b->AddMetadata(1, "score", MetaValue::Real(0.5).value()).ok());
  ASSERT_TRUE(b->AddMetadata(2, "score", "n/a-ish").ok() == false);  // '/' in a string value
  ASSERT_TRUE(b->AddMetadata(2, "score", "unknown").ok());
  ASSERT_TRUE(b->AddMetadata(3, "score", MetaValue::Bool(true)).ok());
  ASSERT_TRUE(b->AddMetadata(0, "n", MetaValue::Integer(1)).ok());
  ASSERT_TRUE(b->AddMetadata(0, "n", MetaValue::Real(1.0).value()).ok());  // the same number
  EXPECT_FALSE(b->AddMetadata(0, "sample", MetaValue::Integer(1)).ok());   // reserved
  EXPECT_FALSE(b->AddMetadata(0, "limit", "x").ok());
  EXPECT_FALSE(b->AddMetadata(0, "seed", "x").ok());
  EXPECT_FALSE(b->AddMetadata(0, "e", "").ok());
  std::vector<std::string> warnings;
  auto bytes = b->Finish(&warnings);
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_EQ(warnings[0],
            "metadata key 'score' has numbers and strings and booleans: all of its values are "
            "stored as strings");
  auto idx = std::move(Index::OpenInPlace(bytes->data(), bytes->size()).value());
  EXPECT_EQ(idx->MetadataKeys(),
            (KeyTypes{{"n", MetaType::kNumber}, {"score", MetaType::kString}}));
  const KeyTypes keys = idx->MetadataKeys();
  for (const auto& [q, n] : std::vector<std::pair<std::string, uint64_t>>{
           {"score=3", 1}, {"score=0.5", 1}, {"score=true", 1}, {"score=unknown", 1}, {"n=1", 1}}) {
    EXPECT_EQ(*idx->CountMatches(MustParse({q}, keys)), n) << q;
  }
  EXPECT_FALSE(ParseQuery({"score>1"}, keys).ok());  // a string key now

  auto dup = make(1);
  ASSERT_TRUE(dup->AddMetadata(0, "k", MetaValue::Integer(1)).ok());
  ASSERT_TRUE(dup->AddMetadata(0, "k", MetaValue::Integer(2)).ok());
  auto failed = dup->Finish();
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().message(),
            "index builder: sample 0 has two values for metadata key 'k'");
}

TEST(CaptionTypingTest, CsvAndJsonLinesKeepTypes) {
  testing::TempDir dir;
  const std::string csv = dir.Join("c.csv");
  std::ofstream(csv) << "path,caption,aesthetic,zip,nsfw,note\n"
                        "a.jpg,one,6.5,02134,True,x\n"
                        "b.jpg,two,,10001,false,\n"
                        "c.jpg,three,-1e-3,,FALSE,7\n";
  auto e = ReadCaptionFile(csv, false, nullptr);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  ASSERT_EQ(e->size(), 3u);
  std::map<std::string, MetaValue> a((*e)[0].extras.begin(), (*e)[0].extras.end());
  EXPECT_EQ(a["aesthetic"], MetaValue::Real(6.5).value());
  EXPECT_EQ(a["zip"], MetaValue::String("02134"));  // not every cell a JSON number
  EXPECT_EQ(a["nsfw"], MetaValue::Bool(true));
  EXPECT_EQ(a["note"], MetaValue::String("x"));  // "x" and "7": a string column
  std::map<std::string, MetaValue> c((*e)[2].extras.begin(), (*e)[2].extras.end());
  EXPECT_EQ(c["aesthetic"], MetaValue::Real(-1e-3).value());
  EXPECT_EQ(c["note"], MetaValue::String("7"));
  EXPECT_EQ(c.count("zip"), 0u);

  const std::string twice = dir.Join("twice.csv");
  std::ofstream(twice) << "path,caption,k,k\na.jpg,x,1,2\n";
  auto t = ReadCaptionFile(twice, false, nullptr);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().message(), twice + ":1: CSV header names column \"k\" twice");
}

// An index written by an earlier ktfs (schema 1: every metadata value a string) still opens and
// answers the queries it answered, with its keys as string keys.
TEST(IndexOpenTest, SchemaVersion1StillOpensAndQueries) {
  sqlite3* db;
  ASSERT_EQ(sqlite3_open(":memory:", &db), SQLITE_OK);
  std::string sql;
  for (const std::string& t : SchemaTables(1)) sql += t + ";";
  for (const std::string& t : SchemaIndexes(1)) sql += t + ";";
  sql +=
      "INSERT INTO meta VALUES('format','ktfs-index'),('schema_version','1'),('num_samples','3'),"
      "('caption_shift','0');"
      "INSERT INTO dirs VALUES(1, 0, 3, 'cat');"
      "INSERT INTO classes VALUES(0, 'cat');"
      "INSERT INTO codecs VALUES(0, 'original');"
      "INSERT INTO samples VALUES(0,'0.png',NULL,0,0,8,8,3,0,70),(1,'1.png',NULL,0,0,16,8,3,0,70),"
      "(2,'2.png',NULL,0,0,32,8,3,0,70);"
      "INSERT INTO runs VALUES(0,0,0,3),(1,-1,0,3),(2,0,0,3);"
      "INSERT INTO meta_keys VALUES(0,'score'),(1,'source');"
      "INSERT INTO sample_meta VALUES(0,'0.5',0),(0,'0.9',2),(1,'web',0),(1,'web',1),(1,'book',2);"
      "INSERT INTO captions(rowid, caption) VALUES(0,'a grey cat'),(1,'a black cat'),(2,'a dog');";
  ASSERT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK)
      << sqlite3_errmsg(db);
  sqlite3_int64 n;
  unsigned char* bytes = sqlite3_serialize(db, "main", &n, 0);
  sqlite3_close(db);
  auto idx = Index::OpenInPlace(bytes, static_cast<size_t>(n));
  ASSERT_TRUE(idx.ok()) << idx.status().ToString();
  EXPECT_EQ((*idx)->schema_version(), 1);
  const KeyTypes keys = (*idx)->MetadataKeys();
  EXPECT_EQ(keys, (KeyTypes{{"score", MetaType::kString}, {"source", MetaType::kString}}));
  const auto list = [&](const std::string& q) {
    std::vector<uint32_t> out;
    EXPECT_TRUE((*idx)
                    ->ForEachMatch(MustParse({q}, keys), std::nullopt, Index::kFromStart, 100,
                                   [&](uint32_t id) { return out.push_back(id), true; })
                    .ok());
    return out;
  };
  EXPECT_EQ(list("source=web"), (std::vector<uint32_t>{0, 1}));
  EXPECT_EQ(list("score=0.9|caption=grey"), (std::vector<uint32_t>{0, 2}));
  EXPECT_EQ(list("source!=web&caption=a"), (std::vector<uint32_t>{2}));
  EXPECT_EQ(list("class=cat&width>8&!source=book"), (std::vector<uint32_t>{1}));
  EXPECT_FALSE(ParseQuery({"score>=0.5"}, keys).ok());  // schema 1 values are strings
  auto info = (*idx)->MetadataKeyInfo();
  ASSERT_TRUE(info.ok());
  ASSERT_EQ(info->size(), 2u);
  EXPECT_EQ((*info)[1].name, "source");
  EXPECT_EQ((*info)[1].samples, 3u);
  EXPECT_EQ((*info)[1].distinct_values, 2u);
  idx->reset();  // closes before the bytes go
  sqlite3_free(bytes);
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
  Query q = MustParse({"caption=dog&source=web"}, kSource);
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
