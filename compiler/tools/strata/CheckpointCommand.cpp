//===- CheckpointCommand.cpp - `strata checkpoint` ------------------------===//
//
// `strata checkpoint consolidate DIR -o model.safetensors`: any checkpoint
// (one rank's whole tensors, or per-rank pieces of any plan) as one weights
// file with the model's Hugging Face names and shapes, plus the config.json
// saved with it. Needs nothing but the checkpoint: index.json says where
// every piece of every tensor lies.
//
//===----------------------------------------------------------------------===//

#include "compiler/tools/strata/Commands.h"

#include "runtime/format/Bundle.h"
#include "runtime/io/CheckpointReader.h"
#include "runtime/io/SafeTensors.h"
#include "runtime/support/Error.h"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>

using namespace strata;

namespace {

struct ConsolidateOptions {
  std::string checkpoint;
  std::string output;
};

int runConsolidate(const ConsolidateOptions &opts) {
  namespace fs = std::filesystem;
  try {
    std::string dir = rt::resolveCheckpointPath(opts.checkpoint, "checkpoint");
    rt::CheckpointReader reader = rt::CheckpointReader::open(dir);
    std::error_code ec;
    fs::path out(opts.output);
    if (fs::is_directory(out, ec))
      rt::fail("-o ", opts.output,
               ": is a directory; expected the path of the .safetensors file "
               "to write");
    fs::path parent = fs::absolute(out, ec).parent_path();
    if (!fs::is_directory(parent, ec))
      rt::fail("-o ", opts.output, ": the directory ", parent.string(),
               " does not exist");
    std::vector<std::string> names = reader.tensorNames();
    std::vector<std::vector<float>> values;
    std::vector<rt::SafeTensorToWrite> tensors;
    values.reserve(names.size());
    int64_t elements = 0;
    for (const std::string &name : names) {
      values.push_back(reader.readTensor(name));
      std::vector<int64_t> shape = reader.checkpointShape(name);
      tensors.push_back(
          {name, "F32", shape, values.back().data(), values.back().size() * 4});
      elements += int64_t(values.back().size());
    }
    rt::writeSafeTensors(opts.output, tensors, {{"format", "pt"}});
    std::string config = reader.configJson();
    std::string configPath;
    if (!config.empty()) {
      configPath = (parent / "config.json").string();
      rt::writeFileAtomically(
          configPath, std::vector<uint8_t>(config.begin(), config.end()),
          /*executable=*/false);
    }
    const nlohmann::json &state = reader.state();
    std::printf("consolidated %zu tensors (%lld values) of a %s checkpoint at "
                "step %lld (%s) -> %s%s\n",
                names.size(), (long long)elements,
                state.value("family", std::string("?")).c_str(),
                (long long)state.value("step", int64_t(0)),
                reader.perRank()
                    ? (std::to_string(state.value("world_size", 0)) +
                       " ranks, plan " + state.value("plan", std::string("?")))
                          .c_str()
                    : "1 rank",
                opts.output.c_str(),
                configPath.empty() ? "" : (" and " + configPath).c_str());
    return 0;
  } catch (const rt::RuntimeError &e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}

} // namespace

void strata::addCheckpointSubcommand(CLI::App &app) {
  CLI::App *cmd = app.add_subcommand(
      "checkpoint", "Work with checkpoints written by a training binary");
  cmd->require_subcommand(1);
  auto opts = std::make_shared<ConsolidateOptions>();
  CLI::App *consolidate = cmd->add_subcommand(
      "consolidate",
      "Write a checkpoint (any plan or rank count) as one safetensors file "
      "with the model's Hugging Face names and shapes, and its config.json "
      "beside it");
  consolidate
      ->add_option("checkpoint", opts->checkpoint,
                   "A checkpoint directory, or a run directory written by "
                   "--save (its latest checkpoint)")
      ->required();
  consolidate
      ->add_option("-o,--output", opts->output,
                   "The .safetensors file to write")
      ->required();
  consolidate->callback(
      [opts] { throw CLI::RuntimeError(runConsolidate(*opts)); });
}
