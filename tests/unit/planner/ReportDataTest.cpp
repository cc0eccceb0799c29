//===- ReportDataTest.cpp - Numbers behind the HTML report ----------------===//
//
// Group membership follows the plan's rank numbering; layers per device and
// the level each group is coloured by; the page is self-contained, carries
// every view and a measured trace when given one.
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

TEST(ReportData, LayersPerDeviceAndTheLevelEachGroupCrosses) {
  AnalyticalCostModel cm(gpt(2048, 16, 8), preset("dgx-a100:2"));
  Plan p = plan(2, 4, 2, 8); // tp and dp inside a node, pp across nodes
  p.vpp = 2;
  p.schedule = Schedule::Interleaved;
  p.stageLayers = {1, 2, 3, 2}; // virtual stage k runs on device k % pp
  Estimate e = cm.estimate(p);
  PlanDetails details = describePlan(cm, p, e);
  ReportData r = buildReportData(cm, p, details);
  EXPECT_EQ(r.deviceLayers, (std::vector<int64_t>{4, 4}));
  ASSERT_EQ(r.groupLevel.size(), details.groups.size());
  for (size_t i = 0; i < details.groups.size(); ++i) {
    const std::string &name = details.groups[i].name;
    EXPECT_EQ(r.groupLevel[i], name == "pp" ? 1u : 0u) << name;
  }
  EXPECT_TRUE(r.stepError.empty()) << r.stepError;
  EXPECT_GT(r.step.stepEndS, 0);
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
  PlanDetails details = describePlan(cm, r.plans[0].plan, r.plans[0].estimate);
  std::string error;
  std::string html = renderHtmlReport(r, cm, details, "model.yaml", "", error);
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
  html = renderHtmlReport(r, cm, details, "model.yaml", trace, error);
  EXPECT_EQ(error, "");
  EXPECT_NE(html.find("\"measured\":{"), std::string::npos);
  EXPECT_EQ(renderHtmlReport(r, cm, details, "model.yaml", "[1, 2]", error),
            "");
  EXPECT_NE(error.find("not a Chrome trace"), std::string::npos);
}
