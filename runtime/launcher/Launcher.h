//===- Launcher.h - What the launcher's files share ------------*- C++ -*-===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_RUNTIME_LAUNCHER_LAUNCHER_H
#define STRATA_RUNTIME_LAUNCHER_LAUNCHER_H

#include "runtime/format/Program.h"

#include <cstdint>
#include <optional>
#include <string>

namespace strata::rt {

/// Every flag of the training binary (main parses them).
struct Options {
  std::string program;
  int64_t steps = -1;
  std::string data;
  std::string dataDType = "uint16";
  std::string dataOrder; ///< empty: the checkpoint's, else random
  std::string evalData;
  int64_t evalEvery = 0;
  int64_t evalBatches = 8;
  std::string init;
  std::string log;
  std::string save;
  int64_t saveEvery = 0;
  int64_t keepLast = 0;
  bool saveBest = false;
  std::string resume;
  std::optional<uint64_t> seed; ///< --seed: any 64-bit unsigned value
  std::string seedText;
  int threads = 1;
  int64_t printEvery = 0;
  bool info = false;
  bool cudaPlan = false; ///< --cuda-plan: print the CUDA binding and exit.
  std::string trace;      ///< measured Chrome trace (docs/report.md)
  std::string traceSteps; ///< "A..B", 1-based
  // Run-time overrides of the program's training settings.
  std::optional<double> lr, minLr;
  std::string lrSchedule;
  std::optional<int64_t> warmupSteps, lrDecaySteps;
  // Generation.
  int64_t generate = 0;
  std::string prompt, promptIds, tokenizer;
  double temperature = 1.0;
  int64_t topK = 0;
  bool printIds = false;
};

/// `BIN --generate N`: samples N tokens with the program's inference
/// program and prints them; returns the exit status.
int runGenerate(const Program &program, const Options &opt);

} // namespace strata::rt

#endif // STRATA_RUNTIME_LAUNCHER_LAUNCHER_H
