//===- ReportDataTest.cpp - Numbers behind the HTML report ----------------===//
//
// Group membership follows the plan's rank numbering; the stage memory the
// report draws peaks where the estimate says; traffic lands on the level a
// group crosses; the page is self-contained and carries every view.
//
//===----------------------------------------------------------------------===//

#include "compiler/planner/ReportData.h"
#include "compiler/planner/HtmlReport.h"
#include "compiler/planner/Search.h"
#include "tests/unit/planner/PlannerTestUtils.h"

#include <algorithm>
#include <gtest/gtest.h>

using namespace strata::planner;
using namespace strata::planner::test;

static Plan plan(int64_t dp, int64_t tp, int64_t pp, int64_t nmb) {
  Plan p;
  p.dp = dp, p.tp = tp, p.pp = pp, p.numMicrobatches = nmb;
  p.stageLayers.assign(pp, 8 / pp);
  return p;
}

TEST(ReportData, GroupsFollowTheRankNumbering) {
  Plan p = plan(2, 4, 2, 4); // tp innermost, then dp, then pp
  EXPECT_EQ(groupRanks(p, Axis::TP, 0), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(groupRanks(p, Axis::TP, 3), (std::vector<int64_t>{12, 13, 14, 15}));
  EXPECT_EQ(groupRanks(p, Axis::DP, 1), (std::vector<int64_t>{1, 5}));
  EXPECT_EQ(groupRanks(p, Axis::PP, 5), (std::vector<int64_t>{5, 13}));
  p.axisOrder = {Axis::DP, Axis::TP, Axis::PP};
  EXPECT_EQ(groupRanks(p, Axis::TP, 0), (std::vector<int64_t>{0, 2, 4, 6}));
  // Every rank is in exactly one group of each kind.
  for (Axis a : {Axis::TP, Axis::DP, Axis::PP}) {
    std::vector<int> seen(p.devices(), 0);
    for (int64_t g = 0; g < p.devices() / p.size(a); ++g)
      for (int64_t r : groupRanks(p, a, g))
        ++seen[r];
    EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int n) {
      return n == 1;
    })) << axisName(a);
  }
}

TEST(ReportData, StageMemoryPeaksAtTheEstimate) {
  AnalyticalCostModel cm(gpt(2048, 16, 8), preset("dgx-a100:2"));
  Plan p = plan(2, 4, 2, 8);
  ReportData r = buildReportData(cm, p);
  ASSERT_EQ(r.stages.size(), 2u);
  double peak = 0;
  for (const StageMemory &s : r.stages)
    peak = std::max(peak, s.memory.total());
  EXPECT_NEAR(peak / cm.estimate(p).memory.total(), 1.0, 1e-12);
  // 1F1B: the first stage holds more micro-batches' activations.
  EXPECT_GT(r.stages[0].memory.activations, r.stages[1].memory.activations);
}

TEST(ReportData, TrafficLandsOnTheLevelTheGroupCrosses) {
  AnalyticalCostModel cm(gpt(2048, 16, 8), preset("dgx-a100:2"));
  Plan p = plan(2, 4, 2, 8); // tp and dp inside a node, pp across nodes
  ReportData r = buildReportData(cm, p);
  ASSERT_EQ(r.groups.size(), 3u);
  EXPECT_EQ(r.groups[0].level, 0u); // tp: 4 ranks in one node
  EXPECT_EQ(r.groups[1].level, 0u); // dp: stride 4, 2 members, one node
  EXPECT_EQ(r.groups[2].level, 1u); // pp: stride 8 crosses nodes
  for (const GroupTraffic &g : r.groups)
    EXPECT_GT(g.bytesPerStep, 0) << axisName(g.axis);
  EXPECT_DOUBLE_EQ(r.levelBytesPerDevice[0],
                   r.groups[0].bytesPerStep + r.groups[1].bytesPerStep);
  EXPECT_DOUBLE_EQ(r.levelBytesPerDevice[1], r.groups[2].bytesPerStep);
  // A pipeline device sends one activation and one gradient per
  // micro-batch, 1/tp of each per rank.
  double act = 2048.0 * 2048 * 2;
  EXPECT_DOUBLE_EQ(r.groups[2].bytesPerStep, 2 * 8 * act / 4);
}

TEST(HtmlReport, SelfContainedWithEveryView) {
  ModelDesc m = gpt(1024, 16, 8);
  ClusterSpec c = preset("dgx-a100:1");
  SearchOptions o;
  o.globalBatch = 64;
  o.topK = 3;
  PlanResult r = searchPlans(m, c, o);
  ASSERT_TRUE(r.ok) << r.error;
  AnalyticalCostModel cm(m, c);
  std::string error;
  std::string html = renderHtmlReport(r, cm, "model.yaml", "", error);
  EXPECT_EQ(error, "");
  EXPECT_EQ(html.find("<script src"), std::string::npos);
  EXPECT_EQ(html.find("<link"), std::string::npos);
  for (const char *key : {"\"stages\"", "\"groups\"", "\"level_bytes\"",
                          "\"timeline\"", "\"runners_up\"", "\"search\""})
    EXPECT_NE(html.find(key), std::string::npos) << key;
  // The data block cannot close its <script> early.
  size_t data = html.find("id=\"plan-data\"");
  size_t end = html.find("</script>", data);
  EXPECT_EQ(html.find("</", data + 20), end);
  EXPECT_EQ(html.find("\"measured\""), std::string::npos);

  // A measured trace rides along; anything else is refused with a reason.
  std::string trace = R"({"traceEvents": [{"ph": "X", "name": "matmul",
      "cat": "compute", "pid": 1, "tid": 0, "ts": 5, "dur": 2,
      "args": {"step": 3}}]})";
  html = renderHtmlReport(r, cm, "model.yaml", trace, error);
  EXPECT_EQ(error, "");
  EXPECT_NE(html.find("\"measured\":{"), std::string::npos);
  EXPECT_EQ(renderHtmlReport(r, cm, "model.yaml", "[1, 2]", error), "");
  EXPECT_NE(error.find("not a Chrome trace"), std::string::npos);
}
