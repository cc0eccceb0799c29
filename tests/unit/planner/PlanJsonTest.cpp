//===- PlanJsonTest.cpp - The plan JSON schema (docs/plan-json.md) --------===//

#include "compiler/planner/Search.h"
#include "tests/unit/planner/PlannerTestUtils.h"

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

using namespace strata::planner;
using namespace strata::planner::test;

TEST(PlanJson, RoundTrips) {
  Plan p;
  p.dp = 4, p.tp = 8, p.pp = 2, p.vpp = 3, p.microBatch = 2;
  p.numMicrobatches = 12, p.schedule = Schedule::Interleaved, p.zero = 1;
  p.recompute = Recompute::Selective, p.sp = true;
  p.axisOrder = {Axis::TP, Axis::PP, Axis::DP};
  p.stageLayers = {4, 4, 4, 4, 4, 4};
  std::string err;
  auto back = Plan::fromJson(p.toJson(), err);
  ASSERT_TRUE(back) << err;
  EXPECT_EQ(*back, p);
  // A whole `strata plan --json` document is accepted too.
  auto wrapped = Plan::fromJson("{\"plan\": " + p.toJson() + "}", err);
  ASSERT_TRUE(wrapped) << err;
  EXPECT_EQ(*wrapped, p);
}

TEST(PlanJson, RejectsBadFields) {
  std::string err;
  EXPECT_FALSE(Plan::fromJson("{", err));
  EXPECT_NE(err.find("does not parse"), std::string::npos);
  EXPECT_FALSE(Plan::fromJson("{\"tp\": 0}", err));
  EXPECT_NE(err.find("'tp'"), std::string::npos);
  EXPECT_FALSE(Plan::fromJson("{\"schedule\": \"zigzag\"}", err));
  EXPECT_NE(err.find("gpipe, 1f1b, interleaved"), std::string::npos);
  EXPECT_FALSE(Plan::fromJson("{\"zero\": 5}", err));
  EXPECT_FALSE(
      Plan::fromJson("{\"placement\": [\"tp\", \"tp\", \"dp\"]}", err));
  EXPECT_FALSE(Plan::fromJson("{\"pp\": 2, \"stage_layers\": [1, 2, 3]}", err));
  EXPECT_NE(err.find("pp*vpp"), std::string::npos);
  EXPECT_FALSE(Plan::fromJson("{\"sp\": \"yes\"}", err));
}

TEST(PlanJson, ResultDocumentHasTheDocumentedFields) {
  ModelDesc m = gpt(1024, 16, 8, 1024, 32000);
  ClusterSpec c = preset("dgx-a100:1");
  SearchOptions o;
  o.globalBatch = 32;
  PlanResult r = searchPlans(m, c, o);
  ASSERT_TRUE(r.ok) << r.error;
  auto doc = nlohmann::json::parse(planResultToJson(r, "m.yaml", c.name, 8));
  EXPECT_EQ(doc["schema"], "strata.plan/1");
  for (const char *k :
       {"dp", "tp", "pp", "vpp", "micro_batch", "num_microbatches", "schedule",
        "zero", "recompute", "sp", "placement", "stage_layers"})
    EXPECT_TRUE(doc["plan"].contains(k)) << k;
  for (const char *k : {"step_time_s", "tokens_per_s", "tflops_per_device",
                        "mfu", "peak_memory_bytes", "breakdown", "memory"})
    EXPECT_TRUE(doc["predicted"].contains(k)) << k;
  for (const char *k : {"compute_s", "tp_comm_s", "pp_comm_s", "dp_comm_s",
                        "zero_comm_s", "bubble_s", "optimizer_s"})
    EXPECT_TRUE(doc["predicted"]["breakdown"].contains(k)) << k;
  EXPECT_TRUE(doc["search"]["time_s"].is_number());
  double sum = 0;
  for (auto &[k, v] : doc["predicted"]["breakdown"].items())
    sum += v.get<double>();
  EXPECT_NEAR(sum, doc["predicted"]["step_time_s"].get<double>(), 1e-9);
  ASSERT_EQ(doc["runners_up"].size(), r.plans.size() - 1);
  if (!doc["runners_up"].empty())
    EXPECT_GE(doc["runners_up"][0]["slower_fraction"].get<double>(), 0.0);
  std::string err;
  auto back = Plan::fromJson(doc.dump(), err);
  ASSERT_TRUE(back) << err;
  EXPECT_EQ(*back, r.plans[0].plan);
}
