//===- CollectivesTest.cpp - NCCL's algorithm and protocol choice ----------===//
//
// Each expected time is computed by hand from NCCL's tuning constants
// (docs/cost-model.md, "Communication"): latency = base + per-step hardware
// latencies, bandwidth = the bus bandwidth of the GPU's links and NIC times
// the protocol's factor over the algorithm's bus factor.
//
//===----------------------------------------------------------------------===//

#include "compiler/planner/Collectives.h"
#include "tests/unit/planner/PlannerTestUtils.h"

#include <gtest/gtest.h>

#include <string>

using namespace strata::planner;
using namespace strata::planner::test;

static CollectiveCost cost(const std::string &cluster, Collective k,
                           double bytes, int64_t stride, int64_t size) {
  ClusterSpec c = preset(cluster);
  return collectiveCost(c, k, bytes, spanOf(c, stride, size));
}

TEST(Collectives, LargeAllReduceInsideADgxA100IsRingSimple) {
  // 14 steps of 3.4 us on NVLink plus 8.4 us; 300 GB/s x 0.8 bus bandwidth.
  CollectiveCost r = cost("dgx-a100:1", Collective::AllReduce, 1e9, 1, 8);
  EXPECT_STREQ(r.algorithm, "ring");
  EXPECT_STREQ(r.protocol, "Simple");
  EXPECT_NEAR(r.timeS, (8.4 + 14 * 3.4) * 1e-6 + 1e9 * 2 * 7 / 8 / 240e9,
              1e-9);
  // nccl-tests on 8 A100 SXM: 230-250 GB/s bus bandwidth at large sizes.
  EXPECT_GT(r.busBandwidth, 230e9);
  EXPECT_LT(r.busBandwidth, 250e9);
}

TEST(Collectives, SmallAllReduceUsesLowLatencyProtocol) {
  // 1 KB: ring LL, 6.6 + 14 x 0.6 us, at a quarter of the bus bandwidth.
  CollectiveCost r = cost("dgx-a100:1", Collective::AllReduce, 1e3, 1, 8);
  EXPECT_STREQ(r.algorithm, "ring");
  EXPECT_STREQ(r.protocol, "LL");
  EXPECT_NEAR(r.timeS, 15e-6 + 1e3 * 2 * 7 / 8 / (240e9 / 4), 1e-12);
}

TEST(Collectives, ManyNodesPreferTheTreesLogLatency) {
  // 64 KB over 64 DGX A100 nodes (512 ranks): the ring pays 1022 steps
  // (126 of them on the network); the tree 2 (7 NVLink + log2 64 network)
  // hops. Bus bandwidth: 8 NICs x 25 GB/s x 0.9 per node.
  CollectiveCost r = cost("dgx-a100:64", Collective::AllReduce, 65536, 1, 512);
  EXPECT_STREQ(r.algorithm, "tree");
  EXPECT_STREQ(r.protocol, "LL");
  double lat = (6.8 + 2 * (7 * 0.6 + 6 * 5.0)) * 1e-6;
  EXPECT_NEAR(r.timeS, lat + 65536 / (180e9 * 0.9 / 3.8 * 0.5), 1e-10);
  double ring = (6.6 + (1022 - 126) * 0.6 + 126 * 2.7) * 1e-6;
  EXPECT_LT(r.timeS, ring);
}

TEST(Collectives, NvlsInsideAnH100Node) {
  // NVLS: 25 us and the switch-reduced 480 GB/s bus bandwidth, against the
  // ring's 450 GB/s x 0.8 = 360 GB/s.
  CollectiveCost r = cost("dgx-h100:1", Collective::AllReduce, 1e9, 1, 8);
  EXPECT_STREQ(r.algorithm, "nvls");
  EXPECT_NEAR(r.timeS, 25e-6 + 1e9 * 2 * 7 / 8 / 480e9, 1e-9);
  // Across nodes NVLS does not apply: the NIC-bound ring.
  CollectiveCost m = cost("dgx-h100:2", Collective::AllReduce, 1e9, 1, 16);
  EXPECT_STRNE(m.algorithm, "nvls");
}

TEST(Collectives, AllGatherAcrossNodesIsNicBound) {
  // 16 ranks on 2 nodes: 15 steps, one of them on the network; each GPU's
  // ring traffic leaves through its own 25 GB/s NIC (x 0.9) = 180 GB/s per
  // node, below NVLink's 240.
  CollectiveCost r = cost("dgx-a100:2", Collective::AllGather, 1e9, 1, 16);
  EXPECT_STREQ(r.algorithm, "ring");
  EXPECT_STREQ(r.protocol, "Simple");
  EXPECT_NEAR(r.timeS, (8.4 + 14 * 3.4 + 14.0) * 1e-6 + 1e9 * 15 / 16 / 180e9,
              1e-9);
  // One member per node (stride 8): a single NIC carries the ring.
  CollectiveCost one = cost("dgx-a100:2", Collective::AllGather, 1e9, 8, 2);
  EXPECT_NEAR(one.timeS, (8.4 + 14.0) * 1e-6 + 1e9 * 0.5 / 22.5e9, 1e-9);
}

TEST(Collectives, CpuRanksKeepAlphaBeta) {
  ClusterSpec c = preset("local:2");
  CollectiveCost r =
      collectiveCost(c, Collective::AllReduce, 1e6, spanOf(c, 1, 2));
  // Ring: 2 (n-1)/n bytes over 5 GB/s x 0.8 plus 2 (n-1) x 1 us.
  EXPECT_NEAR(r.timeS, 1e6 / 4e9 + 2e-6, 1e-12);
}
