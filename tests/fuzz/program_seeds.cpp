//===- program_seeds.cpp - Seed inputs for the runtime harnesses ----------===//
//
// `fuzz_program_seeds DIR` writes seed inputs built by the runtime tests'
// program builders (tests/unit/runtime/TestPrograms.cpp) and the safetensors
// writer: DIR/program/* (payloads of the test programs, without the header
// fuzz_program adds), DIR/safetensors/* and DIR/checkpoint/* (both
// checkpoint layouts in fuzz_checkpoint's one-blob form).
//
//===----------------------------------------------------------------------===//

#include "TestPrograms.h"

#include "runtime/format/Program.h"
#include "runtime/io/SafeTensors.h"

#include <cstdio>
#include <string>
#include <sys/stat.h>
#include <vector>

using namespace strata::rt;

static void write(const std::string &path, const std::vector<uint8_t> &bytes) {
  FILE *f = std::fopen(path.c_str(), "wb");
  if (!f || std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) {
    std::perror(path.c_str());
    std::exit(1);
  }
  std::fclose(f);
}

static void program(const std::string &dir, const std::string &name,
                    const Program &p) {
  std::vector<uint8_t> bytes = serializeProgram(p);
  write(dir + "/program/" + name,
        std::vector<uint8_t>(bytes.begin() + kProgramHeaderBytes, bytes.end()));
}

static std::vector<uint8_t> blob(uint8_t layout, const std::string &state,
                                 const std::vector<uint8_t> &tensors) {
  std::vector<uint8_t> out{layout};
  out.insert(out.end(), state.begin(), state.end());
  out.push_back(0);
  out.insert(out.end(), tensors.begin(), tensors.end());
  return out;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuzz_program_seeds DIR\n");
    return 2;
  }
  std::string dir = argv[1];
  for (const char *sub : {"", "/program", "/safetensors", "/checkpoint"})
    ::mkdir((dir + sub).c_str(), 0755);
  using namespace strata::rt::testprograms;
  program(dir, "mlp", buildMlpProgram());
  MlpConfig sgd;
  sgd.optimizer = OptimizerKind::Sgd;
  program(dir, "mlp-sgd", buildMlpProgram(sgd));
  program(dir, "mlp-dp", buildDataParallelMlp({}, {}));
  program(dir, "mlp-zero3", buildDataParallelMlp({}, {2, true, true, true}));
  program(dir, "value-sharded", buildValueShardedProgram(3));

  std::vector<float> w = {1, 2, 3, 4, 5, 6};
  std::vector<float> b = {0.5f, -0.5f};
  std::vector<int32_t> ids = {1, 2, 3};
  std::vector<uint8_t> whole = encodeSafeTensors(
      {{"fc.weight", "F32", {2, 3}, w.data(), w.size() * 4},
       {"fc.bias", "F32", {2}, b.data(), b.size() * 4},
       {"fc.weight.exp_avg", "F32", {2, 3}, w.data(), w.size() * 4},
       {"ids", "I32", {3}, ids.data(), ids.size() * 4}},
      {{"format", "pt"}});
  write(dir + "/safetensors/whole", whole);
  write(dir + "/safetensors/empty", encodeSafeTensors({}, {}));
  write(dir + "/checkpoint/trainer",
        blob(1, R"({"step": 3, "seed": 1234, "tokens_seen": 96})", whole));
  std::vector<uint8_t> piece =
      encodeSafeTensors({{"fc.weight", "F32", {1, 3}, w.data(), 3 * 4},
                         {"fc.weight.exp_avg", "F32", {3}, w.data(), 3 * 4}},
                        {});
  write(dir + "/checkpoint/index",
        blob(0,
             R"({"step": 3, "tensors": {"fc.weight": {"global_shape": [1, 3],
  "pieces": [{"file": "rank0.safetensors", "start": [0, 0], "shape": [1, 3]}]}},
  "optimizer_state": {"fc.weight.exp_avg": {"pieces": [{"file":
  "rank0.safetensors", "box_start": [0, 0], "box_shape": [1, 3],
  "offset": 0, "count": 3}]}}})",
             piece));
  return 0;
}
