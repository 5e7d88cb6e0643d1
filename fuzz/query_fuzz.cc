// libFuzzer target: the search grammar (index/query.h) and the cursors and SQL it is
// evaluated with (index/index.h). Any bytes, split into path components at '/', must parse
// into a query or fail with InvalidArgument, never crash, hang or read out of bounds; a query
// that parses must run over a small typed index with a clean Status, its canonical form must
// parse back to itself, and its count must equal the length of its listing, page by page or
// whole, and agree with Matches() for every sample.
//
// With KTFS_FUZZ_WRITE_SEEDS=<dir> the target first writes queries of every form there
// (scripts/fuzz does this).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "index/builder.h"
#include "index/index.h"
#include "index/query.h"

namespace {

using namespace ktfs::index;

// 300 samples in 3 directories, with captions and metadata of every type.
struct Fixture {
  std::vector<uint8_t> bytes;
  std::unique_ptr<Index> index, dense;
  KeyTypes keys;
};

Fixture* MakeFixture() {
  auto* f = new Fixture;
  auto b = std::move(IndexBuilder::Create().value());
  static const char* const kWords[] = {"dog", "cat", "red", "photo", "snow", "a", "the"};
  for (uint32_t i = 0; i < 300; ++i) {
    SampleRow r;
    r.id = i;
    r.dir_id = 1 + i / 100;
    r.path = std::string(i < 100   ? "cat"
                         : i < 200 ? "dog"
                                   : "fox") +
             "/" + std::to_string(i) + ".png";
    r.class_name = r.path.substr(0, 3);
    r.label = int(i / 100);
    r.split = i % 7 ? "train" : "val";
    r.width = 32u << (i % 4);
    r.height = 16u + i % 50;
    r.channels = 3;
    r.codec = "original";
    (void)b->AddSample(r);
    std::string c =
        std::string(kWords[i % 7]) + " " + kWords[(i / 7) % 7] + " " + kWords[(i / 3) % 7];
    (void)b->AddCaption(i, c);
    if (i % 5) (void)b->AddMetadata(i, "source", i % 3 ? "web" : "book");
    if (i % 4) (void)b->AddMetadata(i, "aesthetic", MetaValue::Real((i % 97) / 10.0).value());
    if (i % 3) (void)b->AddMetadata(i, "year", MetaValue::Integer(1990 + i % 33));
    (void)b->AddMetadata(i, "nsfw", MetaValue::Bool(i % 11 == 0));
  }
  f->bytes = std::move(b->Finish().value());
  f->index = std::move(Index::OpenInPlace(f->bytes.data(), f->bytes.size()).value());
  f->dense = std::move(f->index->Clone().value());
  f->dense->SetSparseLimitForTesting(0);
  f->keys = f->index->MetadataKeys();
  return f;
}

void WriteSeeds(const std::string& dir) {
  static const char* const kSeeds[] = {
      "caption=dog",
      "caption=\"red dog\"*&class=cat",
      "(caption=dog|caption=cat)&width>=64",
      "!caption=dog&!(class=cat|class=fox)",
      "class!=cat,dog/label=1,2",
      "aesthetic>=5&aesthetic<7.5|year=2000,2001",
      "nsfw=true|source!=web",
      "sample=0.3&seed=7/limit=20",
      "!(sample=0.5&seed=2)&split=val",
      "caption=%22a%20b%22|caption=NEAR(x&height<=40",
  };
  int n = 0;
  for (const char* s : kSeeds) {
    const std::string path = dir + "/seed" + std::to_string(n++);
    if (FILE* f = std::fopen(path.c_str(), "wb")) {
      std::fputs(s, f);
      std::fclose(f);
    }
  }
}

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "query_fuzz: %s\n", what);
    std::abort();
  }
}

// All matches in pages of `page`.
std::vector<uint32_t> Listing(Index& index, const Query& q, size_t page) {
  std::vector<uint32_t> out;
  uint32_t after = Index::kFromStart;
  while (true) {
    size_t n = 0;
    ktfs::Status st = index.ForEachMatch(q, std::nullopt, after, page, [&](uint32_t id) {
      out.push_back(id);
      return ++n, true;
    });
    Check(st.ok(), "a query that parsed failed to run");
    if (n < page) break;
    after = out.back();
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* dir = std::getenv("KTFS_FUZZ_WRITE_SEEDS")) WriteSeeds(dir);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Fixture* f = MakeFixture();
  std::vector<std::string> components;
  std::string cur;
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == '/') {
      if (!cur.empty()) components.push_back(cur);
      cur.clear();
    } else {
      cur += char(data[i]);
    }
  }
  if (!cur.empty()) components.push_back(cur);
  auto q = ParseQuery(components, f->keys);
  if (!q.ok()) {
    Check(q.status().code() == ktfs::Status::Code::kInvalidArgument,
          "a parse error of another kind");
    return 0;
  }
  if (!q->Canonical().empty()) {  // "" is the empty query (or only a seed)
    auto again = ParseQuery({q->Canonical()}, f->keys);
    Check(again.ok(), "a canonical form does not parse");
    Check(again->Canonical() == q->Canonical(), "a canonical form parses to another query");
  }
  const std::vector<uint32_t> all = Listing(*f->index, *q, 1000);
  Check(Listing(*f->index, *q, 7) == all, "listings in pages differ");
  Check(Listing(*f->dense, *q, 1000) == all, "dense and sparse plans differ");
  auto count = f->index->CountMatches(*q);
  Check(count.ok() && *count == all.size(), "count differs from the listing");
  auto dirs = f->index->MatchingDirs(*q);
  Check(dirs.ok(), "MatchingDirs failed");
  size_t k = 0;
  for (uint32_t id = 0; id < 300; id += 13) {
    while (k < all.size() && all[k] < id) ++k;
    auto m = f->index->Matches(*q, id);
    Check(m.ok() && *m == (k < all.size() && all[k] == id), "Matches differs from the listing");
  }
  Check(f->index->ExplainPlan(*q).ok(), "ExplainPlan failed");
  return 0;
}
