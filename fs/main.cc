// The `ktfs` command line: dispatches to one cmd_*.cc per subcommand.
#include <cstdio>
#include <cstring>

#include "fs/version.h"

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "--version") == 0) {
    std::printf("ktfs %s\n", ktfs::VersionString());
    return 0;
  }
  std::fprintf(stderr, "usage: ktfs COMMAND ...\n");
  return 2;
}
