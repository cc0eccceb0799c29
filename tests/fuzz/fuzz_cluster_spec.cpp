//===- fuzz_cluster_spec.cpp - libFuzzer harness for the cluster loader ---===//
//
// Any input must end in a cluster or in diagnostics: no crash, no sanitizer
// report, no exception escaping loadClusterSpec. An accepted cluster's device
// count is within the documented bound.
//
//===----------------------------------------------------------------------===//

#include "compiler/planner/Cluster.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string text(reinterpret_cast<const char *>(data), size);
  std::vector<strata::planner::PlannerDiag> diags;
  auto cluster = strata::planner::loadClusterSpec("fuzz.yaml", diags, &text);
  if (!cluster && diags.empty())
    __builtin_trap(); // a rejection must say why
  if (cluster && (cluster->numDevices() < 1 ||
                  cluster->numDevices() > strata::planner::kMaxClusterDevices))
    __builtin_trap();
  return 0;
}
