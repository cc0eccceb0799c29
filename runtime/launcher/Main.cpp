//===- Main.cpp - strata-launcher: runs the program appended to itself ----===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// `strata compile` copies this executable and appends a program (Bundle.h);
// running the copy trains. `--program FILE` runs a program file instead.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/Trainer.h"
#include "runtime/format/Bundle.h"
#include "runtime/support/Error.h"

#include <CLI/CLI.hpp>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <unistd.h>

using namespace strata::rt;

namespace {

struct Options {
  std::string program;
  int64_t steps = -1;
  std::string data;
  std::string dataDType = "uint16";
  std::string init;
  std::string log;
  std::string save;
  int64_t saveEvery = 0;
  std::string resume;
  int64_t seed = -1;
  int threads = 1;
  int64_t printEvery = 0;
  bool info = false;
};

std::string formatDuration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0)
    return "?";
  long s = long(seconds + 0.5);
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%ldh%02ldm", s / 3600, (s / 60) % 60);
  else if (s >= 60)
    std::snprintf(buf, sizeof buf, "%ldm%02lds", s / 60, s % 60);
  else
    std::snprintf(buf, sizeof buf, "%lds", s);
  return buf;
}

/// One JSON object per step, written to a temporary sibling and renamed
/// into place when the run ends, so a failed run leaves an old log intact.
class StepLog {
public:
  explicit StepLog(const std::string &path) : path_(path) {
    if (path.empty())
      return;
    tmp_ = path + ".tmp-" + std::to_string(::getpid());
    file_ = std::fopen(tmp_.c_str(), "w");
    if (!file_)
      fail("--log ", path, ": cannot create ", tmp_, ": ",
           std::strerror(errno));
  }
  /// Reached without finish() only when the run failed: an existing log is
  /// kept, and the partial one stays beside it.
  ~StepLog() {
    if (!file_)
      return;
    std::fclose(file_);
    file_ = nullptr;
    if (std::filesystem::exists(path_)) {
      std::fprintf(stderr,
                   "strata: --log %s kept; this run's partial log is %s\n",
                   path_.c_str(), tmp_.c_str());
      return;
    }
    std::rename(tmp_.c_str(), path_.c_str());
  }
  void write(const StepStats &s, int64_t globalBatch) {
    if (!file_)
      return;
    std::fprintf(file_,
                 "{\"step\": %lld, \"loss\": %.9g, \"lr\": %.9g, "
                 "\"grad_norm\": ",
                 (long long)s.step, s.loss, s.lr);
    if (s.gradNorm)
      std::fprintf(file_, "%.9g", *s.gradNorm);
    else
      std::fprintf(file_, "null");
    std::fprintf(file_,
                 ", \"step_time_s\": %.6f, \"tokens_per_s\": %.1f, "
                 "\"tokens\": %lld, \"samples_seen\": %lld}\n",
                 s.seconds, s.seconds > 0 ? s.tokens / s.seconds : 0.0,
                 (long long)s.tokens, (long long)((s.step + 1) * globalBatch));
    std::fflush(file_);
  }
  void finish() {
    if (!file_)
      return;
    std::fclose(file_);
    file_ = nullptr;
    if (std::rename(tmp_.c_str(), path_.c_str()) != 0)
      std::fprintf(stderr, "strata: --log %s: cannot rename %s into place\n",
                   path_.c_str(), tmp_.c_str());
  }

private:
  std::string path_, tmp_;
  FILE *file_ = nullptr;
};

void printInfo(const Program &p, const std::string &source) {
  const ModelMeta &m = p.meta;
  std::printf("program: %s\n", source.c_str());
  std::printf("model: %s, vocab %lld, seq_len %lld\n", m.family.c_str(),
              (long long)m.vocab, (long long)m.seqLen);
  std::printf("batch: global %lld = %lld micro-batches x %lld rows\n",
              (long long)m.globalBatch, (long long)m.numMicrobatches,
              (long long)m.microBatch);
  std::printf("world size: %u, seed %llu\n", m.worldSize,
              (unsigned long long)m.seed);
  std::printf("plan: %s\n", m.planDescription.c_str());
  for (const RankProgram &r : p.ranks) {
    int64_t params = 0;
    for (const ParamDesc &pd : r.params)
      params += r.buffers[pd.value].numElements();
    std::printf("rank %u: arena %llu bytes, %zu buffers, %zu parameters "
                "(%lld values), instructions %zu/%zu/%zu\n",
                r.rank, (unsigned long long)r.arenaBytes, r.buffers.size(),
                r.params.size(), (long long)params,
                r.sequence(SequenceKind::StepBegin).size(),
                r.sequence(SequenceKind::Microbatch).size(),
                r.sequence(SequenceKind::Update).size());
  }
}

int run(const Options &opt) {
  std::string source;
  Program program;
  if (!opt.program.empty()) {
    source = opt.program;
    program = loadProgramFile(opt.program);
  } else {
    source = "/proc/self/exe";
    std::optional<std::vector<uint8_t>> bytes =
        readEmbeddedProgram("/proc/self/exe");
    if (!bytes)
      fail("this strata-launcher carries no program; build a training "
           "binary with `strata compile MODEL.yaml -o BIN`, or pass "
           "--program FILE");
    program = parseProgram(bytes->data(), bytes->size(), "embedded program");
  }
  if (opt.info) {
    printInfo(program, source);
    return 0;
  }
  if (program.meta.worldSize != 1)
    fail("the program is for ", program.meta.worldSize,
         " ranks; this runtime build runs single-rank programs");

  const ModelMeta meta = program.meta;
  uint64_t seed = opt.seed >= 0 ? uint64_t(opt.seed) : meta.seed;
  int64_t totalSteps = opt.steps >= 0 ? opt.steps : program.train.defaultSteps;

  // Check every input before the first step, so a bad flag fails fast.
  if (!opt.save.empty()) {
    namespace fs = std::filesystem;
    std::error_code ec;
    fs::path target(opt.save);
    if (fs::exists(target, ec) &&
        (!fs::is_directory(target, ec) ||
         (!fs::is_empty(target, ec) && !fs::exists(target / "trainer.json"))))
      fail("--save ", opt.save,
           ": exists and is not a Strata checkpoint; "
           "choose another directory");
    fs::path parent = fs::absolute(target, ec).parent_path();
    if (!fs::is_directory(parent, ec))
      fail("--save ", opt.save, ": the parent directory ", parent.string(),
           " does not exist");
  }
  std::optional<TokenData> data;
  if (!opt.data.empty()) {
    TokenFileDType dtype =
        opt.dataDType == "uint32" ? TokenFileDType::U32 : TokenFileDType::U16;
    data.emplace(TokenData::loadFile(opt.data, dtype, meta.vocab, meta.seqLen));
  } else {
    data.emplace(TokenData::synthetic(seed, meta.vocab, meta.seqLen));
  }

  std::unique_ptr<Device> device = createCpuDevice();
  device->setThreads(opt.threads);
  Trainer trainer(std::move(program), 0, std::move(device), seed);
  trainer.initParameters();
  if (!opt.init.empty())
    trainer.loadInitialWeights(opt.init);
  if (!opt.resume.empty()) {
    trainer.loadCheckpoint(opt.resume);
    if (opt.seed >= 0 && uint64_t(opt.seed) != trainer.seed())
      fail("--seed ", opt.seed, " differs from the checkpoint's seed ",
           trainer.seed(), "; drop --seed to resume exactly");
  }
  StepLog log(opt.log);
  bool tty = ::isatty(2);
  int64_t first = trainer.step();
  int64_t toRun = std::max<int64_t>(0, totalSteps - first);
  int64_t printEvery =
      opt.printEvery > 0 ? opt.printEvery : (toRun <= 100 ? 1 : 10);
  std::fprintf(
      stderr, "strata: %s, %lld params tensors, data: %s, steps %lld..%lld\n",
      trainer.program().meta.family.c_str(),
      (long long)trainer.rankProgram().params.size(),
      data->description().c_str(), (long long)first, (long long)totalSteps - 1);
  double elapsed = 0.0;
  for (int64_t i = 0; i < toRun; ++i) {
    StepStats s = trainer.runStep(*data);
    if (!std::isfinite(s.loss))
      fail("step ", s.step, ": the loss is ", s.loss,
           "; training diverged (lower the learning rate or enable "
           "gradient clipping)");
    elapsed += s.seconds;
    log.write(s, meta.globalBatch);
    double tokPerS = s.seconds > 0 ? s.tokens / s.seconds : 0.0;
    double eta = elapsed / double(i + 1) * double(toRun - i - 1);
    if (tty) {
      std::fprintf(stderr,
                   "\rstep %lld/%lld | loss %.4f | lr %.3g | %.0f tok/s | "
                   "ETA %s   ",
                   (long long)s.step + 1, (long long)totalSteps, s.loss, s.lr,
                   tokPerS, formatDuration(eta).c_str());
      if (i + 1 == toRun)
        std::fprintf(stderr, "\n");
    } else if ((i + 1) % printEvery == 0 || i + 1 == toRun) {
      std::fprintf(stderr,
                   "step %lld/%lld loss %.6f lr %.6g grad_norm %.4g "
                   "tok/s %.0f eta %s\n",
                   (long long)s.step + 1, (long long)totalSteps, s.loss, s.lr,
                   s.gradNorm.value_or(NAN), tokPerS,
                   formatDuration(eta).c_str());
    }
    if (!opt.save.empty() && opt.saveEvery > 0 &&
        (s.step + 1) % opt.saveEvery == 0 && i + 1 != toRun)
      trainer.saveCheckpoint(opt.save);
  }
  if (!opt.save.empty())
    trainer.saveCheckpoint(opt.save);
  log.finish();
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  Options opt;
  CLI::Validator nonNegative(
      [](std::string &value) -> std::string {
        if (!value.empty() && value[0] == '-')
          return "must be a non-negative integer, got " + value;
        return {};
      },
      "N>=0");
  CLI::App app{"Strata training binary: runs the compiled training program "
               "embedded in this executable (or --program FILE)."};
  app.footer(
      "Data: raw little-endian tokens (nanoGPT train.bin); sample k is "
      "tokens[k*S .. k*S+S-1] -> tokens[k*S+1 .. k*S+S], step i uses samples "
      "(i*B + j) mod n. Without --data a synthetic Markov stream from the "
      "seed is used. See docs/runtime.md.");
  app.add_option("--program", opt.program,
                 "Run this program file instead of the embedded one")
      ->check(CLI::ExistingFile);
  app.add_option("--steps", opt.steps,
                 "Train until N steps are done in total (a resumed run "
                 "continues from its step); default from the program")
      ->check(nonNegative);
  app.add_option("--data", opt.data,
                 "Token file: raw little-endian uint16 (or --data-dtype)");
  app.add_option("--data-dtype", opt.dataDType, "Token width of --data")
      ->check(CLI::IsMember({"uint16", "uint32"}));
  app.add_option("--init", opt.init,
                 "Initial weights (safetensors, by parameter name)");
  app.add_option("--log", opt.log,
                 "Write one JSON object per step (step, loss, lr, grad_norm, "
                 "step_time_s, tokens_per_s, ...)");
  app.add_option("--save", opt.save,
                 "Save a checkpoint directory at the end (and every "
                 "--save-every steps)");
  app.add_option("--save-every", opt.saveEvery, "Checkpoint period in steps")
      ->check(nonNegative);
  app.add_option("--resume", opt.resume,
                 "Continue from a checkpoint directory written by --save");
  app.add_option("--seed", opt.seed,
                 "Seed for initialisation and synthetic data (default: the "
                 "program's)")
      ->check(nonNegative);
  app.add_option("--threads", opt.threads, "CPU threads (default 1)")
      ->check(CLI::Range(1, 1024));
  app.add_option("--print-every", opt.printEvery,
                 "Progress line period when stderr is not a terminal")
      ->check(nonNegative);
  app.add_flag("--info", opt.info, "Describe the program and exit");
  CLI11_PARSE(app, argc, argv);

  try {
    return run(opt);
  } catch (const RuntimeError &e) {
    std::fprintf(stderr, "strata: error: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc &) {
    std::fprintf(stderr, "strata: error: out of memory\n");
    return 1;
  } catch (const std::exception &e) {
    std::fprintf(stderr, "strata: error: %s\n", e.what());
    return 1;
  }
}
