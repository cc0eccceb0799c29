//===- HtmlReport.h - `strata plan --html`: one self-contained page -*- C++
//-*-===//
//
// The page holds its data as one JSON block and draws it with inline
// JavaScript into SVG: the plan and its step breakdown, the pipeline timeline
// of one step, the device map, memory per stage, the runners-up and the
// search. No network access; docs/report.md describes each view.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_COMPILER_PLANNER_HTMLREPORT_H
#define STRATA_COMPILER_PLANNER_HTMLREPORT_H

#include "compiler/planner/PlanDetails.h"

#include <string>

namespace strata::planner {

/// The whole HTML document for `result` (best plan first) and the best
/// plan's `details` (describePlan, reviewPlan). With
/// `measuredTrace` (the text of a trace the compiled executable wrote with
/// --trace) the page also shows the run beside the prediction; if that text
/// is not such a trace, returns "" and says why in `error`.
std::string renderHtmlReport(const PlanResult &result, const CostModel &cm,
                             const PlanDetails &details,
                             const std::string &modelPath,
                             const std::string &measuredTrace,
                             std::string &error);

/// The page's stylesheet and script (HtmlReportScript.cpp).
extern const char *const kHtmlReportStyle;
extern const char *const kHtmlReportScript;

} // namespace strata::planner

#endif // STRATA_COMPILER_PLANNER_HTMLREPORT_H
