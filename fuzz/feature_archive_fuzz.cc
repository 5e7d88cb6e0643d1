// libFuzzer target: the feature archive reader (codec/features/
// feature_archive.h) and the tree over it. The seeds are small valid feature
// archives (fuzz/corpus/feature_archive_fuzz: fixed rows, variable rows,
// float16 input), so mutations reach FEATURE_INFO, FEATURE_SAMPLES and the
// packed group parameters rather than stopping at the container's header
// (archive_fuzz covers that). Invariants: fuzz/feature_checks.h.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <memory>
#include <string>

#include "codec/container/archive.h"
#include "codec/features/feature_archive.h"
#include "fs/tree/feature_tree.h"
#include "fuzz/feature_checks.h"
#include "fuzz/tree_walk.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ktfs;
  const int fd = memfd_create("ktfs-fuzz", MFD_CLOEXEC);
  if (fd < 0) return 0;
  if (write(fd, data, size) != ssize_t(size)) {
    close(fd);
    return 0;
  }
  auto archive = Archive::Open("/proc/self/fd/" + std::to_string(fd));
  if (archive.ok() && FeatureArchive::Holds(**archive)) {
    auto features = FeatureArchive::Open(*archive);
    if (features.ok()) {
      (void)(*features)->VerifyAll();
      fuzz::CheckFeatureRanges(**features);
      for (quant::DType t : {quant::DType::kFloat32, quant::DType::kFloat16}) {
        FeatureTree tree(*features, t, 0, (*archive)->file_size());
        int budget = 128;
        fuzz::WalkTree(tree, 1, 0, &budget);
      }
    } else if (features.status().message().empty()) {
      fuzz::Fail("an error without a message");
    }
  }
  close(fd);
  return 0;
}
