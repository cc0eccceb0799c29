//===- PlanAttrTest.cpp - Plan <-> strata.plan attribute ------------------===//

#include "compiler/planner/PlanAttr.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/MLIRContext.h"
#include <gtest/gtest.h>

using namespace strata::planner;

TEST(PlanAttr, RoundTripsEveryField) {
  mlir::MLIRContext ctx;
  Plan plan;
  plan.dp = 4;
  plan.tp = 2;
  plan.pp = 3;
  plan.vpp = 2;
  plan.microBatch = 2;
  plan.numMicrobatches = 12;
  plan.schedule = Schedule::Interleaved;
  plan.zero = 2;
  plan.recompute = Recompute::Selective;
  plan.sp = true;
  plan.axisOrder = {Axis::DP, Axis::TP, Axis::PP};
  plan.stageLayers = {2, 2, 1, 2, 2, 1};
  std::string error;
  std::optional<Plan> back = planFromAttr(planToAttr(plan, &ctx), error);
  ASSERT_TRUE(back) << error;
  EXPECT_EQ(*back, plan);
  EXPECT_EQ(back->stageLayers, plan.stageLayers);
  EXPECT_EQ(back->axisOrder, plan.axisOrder);
}

TEST(PlanAttr, NamesTheBadKey) {
  mlir::MLIRContext ctx;
  mlir::Builder b(&ctx);
  mlir::DictionaryAttr attr = planToAttr(Plan(), &ctx);
  mlir::NamedAttrList list(attr);
  list.set("schedule", b.getStringAttr("zigzag"));
  std::string error;
  EXPECT_FALSE(planFromAttr(list.getDictionary(&ctx), error));
  EXPECT_NE(error.find("schedule"), std::string::npos) << error;
  list.erase("dp");
  EXPECT_FALSE(planFromAttr(list.getDictionary(&ctx), error));
  EXPECT_NE(error.find("'dp'"), std::string::npos) << error;
}
