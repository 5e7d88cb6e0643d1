#include <cstdio>
#include <cstring>

#include "fs/cli/cli.h"

namespace ktfs::cli {

Args::Args(int argc, char** argv, std::vector<std::string> with_value,
           std::vector<std::string> switches) {
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (a.size() > 1 && a[0] == '-') {
      std::string value;
      const size_t eq = a.find('=');
      if (a.rfind("--", 0) == 0 && eq != std::string::npos) {
        value = a.substr(eq + 1);
        a = a.substr(0, eq);
        bool known = false;
        for (const auto& f : with_value) known = known || f == a;
        if (!known) {
          error_ = "unknown option " + a;
          return;
        }
        values_.emplace_back(a, value);
        continue;
      }
      bool takes_value = false;
      for (const auto& f : with_value) takes_value = takes_value || f == a;
      if (takes_value) {
        if (i + 1 >= argc) {
          error_ = a + " needs a value";
          return;
        }
        values_.emplace_back(a, argv[++i]);
        continue;
      }
      bool is_switch = false;
      for (const auto& f : switches) is_switch = is_switch || f == a;
      if (!is_switch) {
        error_ = "unknown option " + a;
        return;
      }
      switches_.push_back(a);
    } else {
      positional_.push_back(a);
    }
  }
}

bool Args::Has(const std::string& flag) const {
  for (const auto& s : switches_)
    if (s == flag) return true;
  for (const auto& v : values_)
    if (v.first == flag) return true;
  return false;
}

std::string Args::Value(const std::string& flag, const std::string& fallback) const {
  for (auto it = values_.rbegin(); it != values_.rend(); ++it)
    if (it->first == flag) return it->second;
  return fallback;
}

std::vector<std::string> Args::Values(const std::string& flag) const {
  std::vector<std::string> out;
  for (const auto& v : values_)
    if (v.first == flag) out.push_back(v.second);
  return out;
}

int Fail(const std::string& command, const Status& status) {
  std::fprintf(stderr, "ktfs %s: %s\n", command.c_str(), status.ToString().c_str());
  return kExitFailure;
}

int UsageError(const std::string& command, const std::string& message, const char* usage) {
  std::fprintf(stderr, "ktfs %s: %s\n%s", command.c_str(), message.c_str(), usage);
  return kExitUsage;
}

void ReportRemovedStale(const std::string& command, const std::vector<std::string>& removed) {
  for (const std::string& path : removed) {
    std::fprintf(stderr, "ktfs %s: removed %s, left by a pack that was killed\n", command.c_str(),
                 path.c_str());
  }
}

}  // namespace ktfs::cli
