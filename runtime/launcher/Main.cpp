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
#include "runtime/launcher/StepLog.h"
#include "runtime/mpi/MpiBackend.h"
#include "runtime/support/Error.h"
#include "runtime/support/Format.h"

#include <CLI/CLI.hpp>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <unistd.h>

using namespace strata::rt;
using strata::formatCount;
using strata::formatGrouped;

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

/// The model's parameter count: every checkpoint tensor once, whole, however
/// the plan splits it over ranks.
int64_t modelParameterCount(const Program &p) {
  std::map<std::string, int64_t> sizes;
  for (const RankProgram &r : p.ranks)
    for (const ParamDesc &pd : r.params) {
      const std::vector<int64_t> &shape =
          !pd.checkpointShape.empty() ? pd.checkpointShape
          : !pd.globalShape.empty()   ? pd.globalShape
          : !pd.boxShape.empty()      ? pd.boxShape
                                      : r.buffers[pd.value].shape;
      int64_t n = 1;
      for (int64_t d : shape)
        n *= d;
      sizes[pd.name] = n;
    }
  int64_t total = 0;
  for (const auto &[name, n] : sizes)
    total += n;
  return total;
}

void printInfo(const Program &p, const std::string &source) {
  const ModelMeta &m = p.meta;
  std::printf("program: %s\n", source.c_str());
  std::printf("model: %s, vocab %lld, seq_len %lld\n", m.family.c_str(),
              (long long)m.vocab, (long long)m.seqLen);
  std::printf("batch: global %lld = %lld micro-batches x %lld rows per "
              "replica\n",
              (long long)m.globalBatch, (long long)m.numMicrobatches,
              (long long)m.microBatch);
  std::printf("world size: %u, seed %llu\n", m.worldSize,
              (unsigned long long)m.seed);
  std::printf("plan: %s\n", m.planDescription.c_str());
  for (const ProcessGroup &g : p.groups) {
    std::printf("group %s:", g.name.c_str());
    for (uint32_t r : g.ranks)
      std::printf(" %u", r);
    std::printf("\n");
  }
  std::printf("loss ranks:");
  for (uint32_t r : p.effectiveLossRanks())
    std::printf(" %u", r);
  std::printf("\n");
  for (const RankProgram &r : p.ranks) {
    int64_t params = 0;
    for (const ParamDesc &pd : r.params)
      params += r.buffers[pd.value].numElements();
    std::printf("rank %u: arena %llu bytes, %zu buffers, %zu parameters "
                "(%lld values), data rows from %lld, instructions "
                "%zu/%zu/%zu/%zu/%zu (step_begin/microbatch/"
                "last_microbatch/schedule/update)\n",
                r.rank, (unsigned long long)r.arenaBytes, r.buffers.size(),
                r.params.size(), (long long)params, (long long)r.dataRowStart,
                r.sequence(SequenceKind::StepBegin).size(),
                r.sequence(SequenceKind::Microbatch).size(),
                r.sequence(SequenceKind::LastMicrobatch).size(),
                r.sequence(SequenceKind::Schedule).size(),
                r.sequence(SequenceKind::Update).size());
  }
}

/// Runs `body`, making sure an error from it names `flag`: the readers below
/// name the file they read, but the user typed the flag.
template <typename Fn>
void namingFlag(const std::string &flag, const std::string &value, Fn body) {
  try {
    body();
  } catch (const CollectiveError &) {
    throw;
  } catch (const RuntimeError &e) {
    std::string message = e.what();
    if (message.rfind(flag + " ", 0) == 0)
      throw;
    // "VALUE: ..." or "VALUE/file: ...": the flag goes in front.
    if (message.rfind(value, 0) == 0 && message.size() > value.size() &&
        (message[value.size()] == ':' || message[value.size()] == '/'))
      throw RuntimeError(flag + " " + message);
    throw RuntimeError(flag + " " + value + ": " + message);
  } catch (const std::bad_alloc &) {
    throw;
  } catch (const std::exception &e) {
    // A library's own exception (e.g. a stream read error): at least say
    // which flag's files it came from.
    throw RuntimeError(flag + " " + value + ": " + e.what());
  }
}

/// This executable's own path, for messages ("/proc/self/exe" says nothing).
std::string ownExecutablePath() {
  std::error_code ec;
  std::filesystem::path self =
      std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("/proc/self/exe") : self.string();
}

/// Thrown once every rank knows the run failed and the error has been
/// printed; every rank then exits non-zero together.
struct AlreadyReported {};

/// Runs `body` on every rank, then agrees over the world whether any rank
/// failed. A failure is printed once: by rank 0 if it failed itself (naming
/// the other failed ranks), otherwise by each failed rank.
template <typename Fn> void agree(CommBackend &comms, Fn body) {
  std::string error;
  try {
    body();
  } catch (const std::exception &e) {
    error = e.what();
  }
  int world = comms.worldSize(), rank = comms.worldRank();
  std::vector<double> failed(world, 0.0);
  failed[rank] = error.empty() ? 0.0 : 1.0;
  comms.world().allReduce(failed.data(), world, DType::F64, ReduceOp::Sum);
  std::string others;
  bool any = false;
  for (int r = 0; r < world; ++r) {
    any = any || failed[r] > 0;
    if (r > 0 && failed[r] > 0)
      others += (others.empty() ? "" : ", ") + std::to_string(r);
  }
  if (!any)
    return;
  if (rank == 0 && !error.empty())
    std::fprintf(
        stderr, "strata: error: %s%s\n", error.c_str(),
        others.empty() ? "" : (" (ranks " + others + " failed too)").c_str());
  else if (!error.empty() && failed[0] == 0)
    std::fprintf(stderr, "strata: rank %d: error: %s\n", rank, error.c_str());
  throw AlreadyReported{};
}

/// STRATA_TEST_FAIL="rank:step": that rank dies at the start of that step,
/// counted from 1 like every step number users see (tests of the dead-rank
/// behaviour).
struct TestFailure {
  int64_t rank = -1, step = -1;
};

TestFailure parseTestFailure() {
  TestFailure f;
  const char *env = std::getenv("STRATA_TEST_FAIL");
  if (!env || !*env)
    return f;
  long long r, st;
  char tail;
  if (std::sscanf(env, "%lld:%lld%c", &r, &st, &tail) != 2 || r < 0 || st < 1)
    throw CollectiveError(std::string("STRATA_TEST_FAIL=") + env +
                          " must be RANK:STEP (RANK >= 0, STEP >= 1)");
  f.rank = r;
  f.step = st;
  return f;
}

int run(const Options &opt, std::shared_ptr<CommBackend> comms) {
  const int rank = comms ? comms->worldRank() : 0;
  const int world = comms ? comms->worldSize() : 1;
  std::string source;
  Program program;
  // Every rank reads the same program and fails the same way.
  try {
    if (!opt.program.empty()) {
      source = opt.program;
      program = loadProgramFile(opt.program);
    } else {
      source = ownExecutablePath();
      std::optional<std::vector<uint8_t>> bytes =
          readEmbeddedProgram("/proc/self/exe");
      // A truncated binary has lost its trailer, so it looks bare.
      if (!bytes)
        fail("no embedded program found: ", ownExecutablePath(),
             " is a bare launcher or a truncated training binary; build a "
             "training binary with `strata compile MODEL.yaml -o BIN`, or "
             "pass --program FILE");
      program = parseProgram(bytes->data(), bytes->size(), "embedded program");
    }
  } catch (const CollectiveError &) {
    throw;
  } catch (const RuntimeError &e) {
    throw CollectiveError(e.what());
  }
  if (opt.info) {
    if (rank == 0)
      printInfo(program, source);
    return 0;
  }
  const ModelMeta meta = program.meta;
  if (int64_t(meta.worldSize) != world)
    throw CollectiveError(
        "this program was compiled for " + std::to_string(meta.worldSize) +
        " ranks (plan: " + meta.planDescription +
        "); launch it with mpirun -np " + std::to_string(meta.worldSize) +
        (world > 1 ? " (it was started on " + std::to_string(world) + " ranks)"
                   : ""));
  TestFailure testFailure = parseTestFailure();
  if (!comms)
    comms = createSingleRankBackend();

  uint64_t seed = opt.seed >= 0 ? uint64_t(opt.seed) : meta.seed;
  int64_t totalSteps = opt.steps >= 0 ? opt.steps : program.train.defaultSteps;
  if (totalSteps < 1)
    throw CollectiveError(
        opt.steps >= 0
            ? "--steps must be >= 1, got " + std::to_string(opt.steps)
            : "the program's default step count is " +
                  std::to_string(totalSteps) + "; pass --steps N (N >= 1)");

  // Check every input before the first step, so a bad flag fails fast, and
  // on every rank before any collective, so a failure cannot strand a rank.
  std::optional<TokenData> data;
  agree(*comms, [&] {
    if (rank == 0 && !opt.log.empty())
      checkLogPath(opt.log);
    if (!opt.save.empty()) {
      namespace fs = std::filesystem;
      std::error_code ec;
      fs::path target(opt.save);
      if (fs::exists(target, ec) && !isCheckpointDirectory(opt.save))
        fail("--save ", opt.save,
             ": exists and is not a Strata checkpoint; "
             "choose another directory");
      fs::path parent = fs::absolute(target, ec).parent_path();
      if (!fs::is_directory(parent, ec))
        fail("--save ", opt.save, ": the parent directory ", parent.string(),
             " does not exist");
    }
    if (!opt.data.empty()) {
      TokenFileDType dtype =
          opt.dataDType == "uint32" ? TokenFileDType::U32 : TokenFileDType::U16;
      data.emplace(
          TokenData::loadFile(opt.data, dtype, meta.vocab, meta.seqLen));
    } else {
      data.emplace(TokenData::synthetic(seed, meta.vocab, meta.seqLen));
    }
  });

  std::unique_ptr<Device> device = createCpuDevice();
  device->setThreads(opt.threads);
  Trainer trainer(std::move(program), uint32_t(rank), std::move(device), seed,
                  comms);
  agree(*comms, [&] {
    trainer.initParameters();
    if (!opt.init.empty())
      namingFlag("--init", opt.init,
                 [&] { trainer.loadInitialWeights(opt.init); });
    if (!opt.resume.empty()) {
      namingFlag("--resume", opt.resume,
                 [&] { trainer.loadCheckpoint(opt.resume); });
      if (opt.seed >= 0 && uint64_t(opt.seed) != trainer.seed())
        fail("--seed ", opt.seed, " differs from the checkpoint's seed ",
             trainer.seed(), "; drop --seed to resume exactly");
      // Nothing to train would only rewrite the checkpoint and an empty log.
      if (totalSteps <= trainer.step())
        fail("--steps ", totalSteps,
             opt.steps >= 0 ? "" : " (the program's default)",
             ": the checkpoint --resume ", opt.resume, " has already done ",
             trainer.step(), " steps; pass --steps greater than ",
             trainer.step(), " to train further");
    }
  });
  // Only rank 0 reports; the others compute the same global numbers.
  StepLog log(rank == 0 ? opt.log : std::string());
  bool tty = ::isatty(2);
  int64_t first = trainer.step();
  int64_t toRun = std::max<int64_t>(0, totalSteps - first);
  int64_t printEvery =
      opt.printEvery > 0 ? opt.printEvery : (toRun <= 100 ? 1 : 10);
  int64_t params = modelParameterCount(trainer.program());
  if (rank == 0)
    std::fprintf(
        stderr, "strata: %s model, %s parameters, %d rank%s, data: %s, %s\n",
        meta.family.c_str(),
        (formatGrouped(params) + (params >= 1000000
                                      ? " (" + formatCount(double(params)) + ")"
                                      : std::string()))
            .c_str(),
        world, world == 1 ? "" : "s", data->description().c_str(),
        first == 0 ? ("steps 1.." + std::to_string(totalSteps)).c_str()
                   : ("steps " + std::to_string(first + 1) + ".." +
                      std::to_string(totalSteps) + " (resumed after step " +
                      std::to_string(first) + ")")
                         .c_str());
  double elapsed = 0.0;
  for (int64_t i = 0; i < toRun; ++i) {
    if (testFailure.rank == rank && testFailure.step == trainer.step() + 1) {
      std::fprintf(stderr,
                   "strata: rank %d: STRATA_TEST_FAIL: exiting with status 3 "
                   "at the start of step %lld\n",
                   rank, (long long)trainer.step() + 1);
      std::fflush(stderr);
      ::_exit(3);
    }
    StepStats s = trainer.runStep(*data);
    // The loss is the same on every rank, so all of them stop here.
    if (!std::isfinite(s.loss))
      throw CollectiveError(
          "step " + std::to_string(s.step + 1) + ": the loss is " +
          std::to_string(s.loss) +
          "; training diverged (lower the learning rate or enable gradient "
          "clipping)");
    elapsed += s.seconds;
    if (!opt.save.empty() && opt.saveEvery > 0 &&
        (s.step + 1) % opt.saveEvery == 0 && i + 1 != toRun)
      trainer.saveCheckpoint(opt.save);
    if (rank != 0)
      continue;
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
  }
  if (!opt.save.empty())
    trainer.saveCheckpoint(opt.save);
  agree(*comms, [&] { log.finish(); });
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  Options opt;
  CLI::Validator positive(
      [](std::string &value) -> std::string {
        if (value.empty() || value[0] == '-' ||
            value.find_first_not_of('0') == std::string::npos)
          return "must be >= 1 (the number of steps done in total when "
                 "training ends), got " +
                 value;
        return {};
      },
      "N>=1");
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
      ->check(positive);
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

  // MPI only when an MPI launcher started us: a one-rank run without
  // mpirun needs no MPI at all (and starts faster without a singleton).
  std::shared_ptr<CommBackend> comms;
  int rank = 0;
  bool usesMpi = mpi::launchedByMpiLauncher();
  try {
    if (usesMpi) {
      comms = mpi::createMpiBackend();
      rank = comms->worldRank();
    }
    int rc = run(opt, comms);
    comms.reset();
    if (usesMpi)
      mpi::finalizeMpi();
    return rc;
  } catch (const AlreadyReported &) {
    // Every rank knows; they finish MPI together.
  } catch (const CollectiveError &e) {
    if (rank == 0)
      std::fprintf(stderr, "strata: error: %s\n", e.what());
  } catch (const std::exception &e) {
    // This rank alone may have failed: report it and leave without
    // MPI_Finalize; mpirun ends the other ranks when this one exits non-zero.
    const char *what =
        dynamic_cast<const std::bad_alloc *>(&e) ? "out of memory" : e.what();
    if (comms && comms->worldSize() > 1)
      std::fprintf(stderr, "strata: rank %d: error: %s\n", rank, what);
    else
      std::fprintf(stderr, "strata: error: %s\n", what);
    std::fflush(stderr);
    if (comms && comms->worldSize() > 1)
      ::_exit(1);
    return 1;
  }
  comms.reset();
  if (usesMpi)
    mpi::finalizeMpi();
  return 1;
}
