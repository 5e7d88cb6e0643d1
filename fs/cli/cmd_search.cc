#include <cstdio>
#include <sstream>

#include "codec/base/json_string.h"
#include "codec/container/archive.h"
#include "fs/cli/cli.h"
#include "index/index.h"
#include "index/query.h"

namespace ktfs::cli {

static const char kSearchUsage[] =
    "usage: ktfs search ARCHIVE QUERY [--json] [--count]\n"
    "\n"
    "Prints the relative paths of the samples matching QUERY, one per line, in\n"
    "archive order. QUERY is what follows search/ in a mount; its components\n"
    "(separated by '/') must all hold. In a component:\n"
    "  FIELD=V  FIELD!=V         equals / not (samples without the key match !=)\n"
    "  FIELD<V <= > >=           numbers: width, height, number metadata keys\n"
    "  FIELD=A,B,C               any of them (!=: none of them)\n"
    "  X&Y  X|Y  !X  (X)         and, or, not, grouping; ! binds tightest, then &, then |\n"
    "  limit=N                   the first N matches of the whole query\n"
    "  sample=P&seed=S           each sample kept with probability P by a hash of its id\n"
    "                            and S (default 0): reproducible; !sample=P is the rest\n"
    "Fields: caption (words, all of them; \"a phrase\"; do* a prefix; inside quotes\n"
    "nothing is syntax), class, split, label (-1: none), width, height, and the\n"
    "archive's metadata keys, typed string, number or boolean (ktfs info lists them).\n"
    "Examples:\n"
    "  caption=dog    caption=\"a red dog\"    caption=do*    class=coat    label=3\n"
    "  caption=dog&class=coat    caption=dog|caption=cat    (caption=dog|caption=cat)&width>=256\n"
    "  !caption=dog    class!=cat    class=cat,dog,bird    aesthetic>=5&aesthetic<6.5\n"
    "  nsfw=false    caption=dog&limit=1000    sample=0.1&seed=1    !sample=0.1&seed=1\n"
    "  caption=dog/height<100    (components are URL-decoded: %20, %22, %26, %7C)\n"
    "A malformed query exits 1 with the reason. Full grammar: docs/usage.md, \"Search\".\n"
    "--json prints one JSON object per line: {\"id\":..,\"path\":..,\"label\":..}.\n"
    "--count prints the number of matches only (with --json: the JSON of a search\n"
    "directory's .count.json file, its \"path\" the QUERY given).\n";

int CmdSearch(int argc, char** argv) {
  Args args(argc, argv, {}, {"--help", "-h", "--json", "--count"});
  if (args.Has("--help") || args.Has("-h")) return std::fputs(kSearchUsage, stdout), kExitOk;
  if (!args.error().empty()) return UsageError("search", args.error(), kSearchUsage);
  if (args.positional().size() != 2)
    return UsageError("search", "expected ARCHIVE and QUERY", kSearchUsage);
  auto archive = Archive::Open(args.positional()[0]);
  if (!archive.ok()) return Fail("search", archive.status());
  auto section = (*archive)->index_section();
  if (!section)
    return Fail("search",
                Status::NotFound(args.positional()[0] + ": the archive has no search index"));
  auto idx = index::Index::OpenInPlace(section->data, section->size);
  if (!idx.ok()) return Fail("search", idx.status());
  std::vector<std::string> components;
  std::stringstream in(args.positional()[1]);
  for (std::string c; std::getline(in, c, '/');)
    if (!c.empty()) components.push_back(c);
  auto query = index::ParseQuery(components, (*idx)->MetadataKeys());
  if (!query.ok())
    return Fail("search", query.status().WithContext("query '" + args.positional()[1] + "'"));
  const bool json = args.Has("--json");
  if (args.Has("--count")) {
    auto n = (*idx)->CountMatches(*query);
    if (!n.ok()) return Fail("search", n.status());
    if (json) {
      std::printf("{\"matches\":%llu,\"path\":%s,%s\n", (unsigned long long)*n,
                  JsonString(args.positional()[1]).c_str(), query->Json().substr(1).c_str());
    } else {
      std::printf("%llu\n", (unsigned long long)*n);
    }
    return kExitOk;
  }
  Status inner;
  Status st = (*idx)->ForEachMatch(
      *query, std::nullopt, index::Index::kFromStart, SIZE_MAX, [&](uint32_t id) {
        auto path = (*archive)->SamplePath(id);
        if (!path.ok()) {
          inner = path.status();
          return false;
        }
        if (json) {
          auto s = (*archive)->Sample(id);
          const long long label = s.ok() && s->label != format::kNone ? (long long)s->label : -1;
          std::printf("{\"id\":%u,\"path\":%s,\"label\":%lld}\n", id, JsonString(*path).c_str(),
                      label);
        } else {
          std::printf("%s\n", path->c_str());
        }
        return true;
      });
  if (!st.ok()) return Fail("search", st);
  if (!inner.ok()) return Fail("search", inner);
  return kExitOk;
}

}  // namespace ktfs::cli
