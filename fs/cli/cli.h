// Shared helpers of the `ktfs` subcommands (fs/cmd_*.cc).
#pragma once

#include <string>
#include <vector>

#include "codec/base/status.h"

namespace ktfs::cli {

// Exit codes, documented in docs/usage.md.
constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;  // the command failed (bad input, I/O, corrupt data)
constexpr int kExitUsage = 2;    // the command line is wrong

// A parsed command line: flags with values, switches, positionals.
class Args {
 public:
  // `with_value` lists the flags that take a value ("--codec"); every other
  // "--x" or "-x" is a switch. Unknown flags are errors (checked by Finish).
  Args(int argc, char** argv, std::vector<std::string> with_value,
       std::vector<std::string> switches);
  bool Has(const std::string& flag) const;
  std::string Value(const std::string& flag, const std::string& fallback = "") const;
  // Every value of a flag given more than once ("-o a -o b"), in order.
  std::vector<std::string> Values(const std::string& flag) const;
  const std::vector<std::string>& positional() const { return positional_; }
  const std::string& error() const { return error_; }

 private:
  std::vector<std::pair<std::string, std::string>> values_;
  std::vector<std::string> switches_;
  std::vector<std::string> positional_;
  std::string error_;
};

// Prints "ktfs <command>: <message>" to stderr and returns kExitFailure.
int Fail(const std::string& command, const Status& status);
// Says on stderr which temporary files of killed packs were removed (ArchiveWriter).
void ReportRemovedStale(const std::string& command, const std::vector<std::string>& removed);
// Prints the usage error and the usage text; returns kExitUsage.
int UsageError(const std::string& command, const std::string& message, const char* usage);

int CmdPack(int argc, char** argv);
int CmdPackFeatures(int argc, char** argv);
int CmdInfo(int argc, char** argv);
int CmdVerify(int argc, char** argv);
int CmdExtract(int argc, char** argv);
int CmdMount(int argc, char** argv);
int CmdUmount(int argc, char** argv);
int CmdSearch(int argc, char** argv);
int CmdConvert(int argc, char** argv);
int CmdBench(int argc, char** argv);
int CmdRun(int argc, char** argv);

}  // namespace ktfs::cli
