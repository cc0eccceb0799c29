//===- Main.cpp - strata-launcher: runs the program appended to itself ----===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// `strata compile` copies this executable and appends a program (Bundle.h);
// running the copy trains (or, with --generate, samples from trained
// weights). `--program FILE` runs a program file instead.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/LrSchedule.h"
#include "runtime/core/RunDirectory.h"
#include "runtime/core/StepTrace.h"
#include "runtime/core/Trainer.h"
#include "runtime/format/Bundle.h"
#include "runtime/cuda/CudaBindPlan.h"
#include "runtime/launcher/Launcher.h"
#include "runtime/launcher/StepLog.h"
#include "runtime/mpi/MpiBackend.h"
#include "runtime/support/Error.h"
#include "runtime/support/Format.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <atomic>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <pthread.h>
#include <thread>
#include <unistd.h>

using namespace strata::rt;
using strata::formatCount;
using strata::formatGrouped;

/// What `strata compile --launcher` looks for (launcherMarker(), Bundle.h).
extern "C" __attribute__((used)) const char strataLauncherMarker[] =
    "strata-launcher:program-bundle-v1";

namespace {

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

const char *scheduleName(LrScheduleKind kind) {
  return kind == LrScheduleKind::Cosine   ? "cosine"
         : kind == LrScheduleKind::Linear ? "linear"
                                          : "constant";
}

/// Applies the run-time overrides of training settings that do not change
/// the program (the optimizer kernels read the learning rate of each step
/// from the step context). Throws RuntimeError naming a bad flag.
void applyOverrides(const Options &opt, int64_t totalSteps,
                    TrainConfig &train) {
  auto check = [](double v, const char *flag) {
    if (!std::isfinite(v) || v < 0)
      fail(flag, " ", v, ": must be a finite number >= 0");
    return v;
  };
  if (opt.lr)
    train.lr = check(*opt.lr, "--lr");
  if (opt.minLr)
    train.minLr = check(*opt.minLr, "--min-lr");
  if (opt.warmupSteps)
    train.warmupSteps = *opt.warmupSteps;
  if (opt.lrDecaySteps)
    train.totalSteps = *opt.lrDecaySteps;
  if (!opt.lrSchedule.empty()) {
    train.schedule = opt.lrSchedule == "cosine"   ? LrScheduleKind::Cosine
                     : opt.lrSchedule == "linear" ? LrScheduleKind::Linear
                                                  : LrScheduleKind::Constant;
    // A decay needs an end: the run's length unless given.
    if (train.schedule != LrScheduleKind::Constant && train.totalSteps == 0)
      train.totalSteps = totalSteps;
  }
  if (train.schedule != LrScheduleKind::Constant && train.totalSteps == 0)
    fail("--lr-schedule ", scheduleName(train.schedule),
         " needs --lr-decay-steps N (the step where it reaches --min-lr)");
}

void printInfo(const Program &p, const std::string &source, const Options &opt,
               int64_t totalSteps, uint64_t seed) {
  const ModelMeta &m = p.meta;
  const TrainConfig &t = p.train;
  auto flagged = [](bool set, const char *flag) {
    return set ? std::string(" (") + flag + ")" : std::string();
  };
  std::printf("program: %s\n", source.c_str());
  std::printf("model: %s, vocab %lld, seq_len %lld\n", m.family.c_str(),
              (long long)m.vocab, (long long)m.seqLen);
  std::printf("batch: global %lld = %lld micro-batches x %lld rows per "
              "replica\n",
              (long long)m.globalBatch, (long long)m.numMicrobatches,
              (long long)m.microBatch);
  std::printf("world size: %u, seed %llu%s\n", m.worldSize,
              (unsigned long long)seed,
              flagged(opt.seed.has_value(), "--seed").c_str());
  std::printf("plan: %s\n", m.planDescription.c_str());
  std::printf("target: %s, device model %s%s\n", targetName(p.target.kind),
              p.target.deviceModel.empty() ? "(not recorded)"
                                           : p.target.deviceModel.c_str(),
              p.target.cluster.empty()
                  ? ""
                  : (" (planned for " + p.target.cluster + ")").c_str());
  // Settings a run may change without recompiling (docs/runtime.md).
  std::printf("optimizer: %s, lr %g%s, weight decay %g, grad clip %g\n",
              t.optimizer == OptimizerKind::AdamW ? "adamw" : "sgd", t.lr,
              flagged(bool(opt.lr), "--lr").c_str(), t.weightDecay, t.gradClip);
  std::printf("lr schedule: %s%s, warmup %lld steps%s, min lr %g%s, decay "
              "steps %lld%s\n",
              scheduleName(t.schedule),
              flagged(!opt.lrSchedule.empty(), "--lr-schedule").c_str(),
              (long long)t.warmupSteps,
              flagged(bool(opt.warmupSteps), "--warmup-steps").c_str(), t.minLr,
              flagged(bool(opt.minLr), "--min-lr").c_str(),
              (long long)t.totalSteps,
              flagged(bool(opt.lrDecaySteps), "--lr-decay-steps").c_str());
  std::printf("steps: %lld%s, data order %s\n", (long long)totalSteps,
              opt.steps >= 0 ? " (--steps)" : " (the program's default)",
              opt.dataOrder.empty() ? "random (default)"
                                    : opt.dataOrder.c_str());
  if (opt.evalEvery > 0 || !opt.evalData.empty())
    std::printf("eval: %s, %lld batches%s\n",
                opt.evalEvery > 0 ? ("every " + std::to_string(opt.evalEvery) +
                                     " steps and at the end")
                                        .c_str()
                                  : "at the end",
                (long long)opt.evalBatches,
                opt.saveBest ? ", best checkpoint kept" : "");
  if (!opt.save.empty())
    std::printf(
        "save: %s%s%s\n", opt.save.c_str(),
        opt.saveEvery > 0
            ? (", every " + std::to_string(opt.saveEvery) + " steps").c_str()
            : ", at the end",
        opt.keepLast > 0
            ? (", keep last " + std::to_string(opt.keepLast)).c_str()
            : "");
  std::printf("generation: %s\n",
              p.decode ? "yes (--generate N)" : "no inference program");
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
    throw RuntimeError(flag + " " + value +
                       ": out of memory while loading it; it is larger than "
                       "this machine's free memory (or malformed)");
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

/// The signal that asked the job to stop (SIGTERM, SIGINT), or 0.
std::atomic<int> stopSignal{0};
/// Set once training runs: from then on the first signal asks for a stop.
std::atomic<bool> stopHandled{false};

/// SIGTERM and SIGINT are blocked in every thread of the process (MPI's and
/// oneDNN's included, which inherit the mask) and taken by one thread in
/// sigwait, so that no signal handler ever interrupts a thread: a handler
/// running on a thread inside MPI's progress engine or an interrupted
/// system call there corrupted the heap of about one in ten dp=2 jobs
/// stopped with SIGTERM. Before training starts, and for a second signal,
/// the signal has its default effect (the process ends). Call first thing
/// in main, before any thread exists.
void startSignalThread() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  ::pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread([set] {
    while (true) {
      int sig = 0;
      if (::sigwait(&set, &sig) != 0)
        continue;
      if (stopHandled.load() && stopSignal.load() == 0) {
        stopSignal.store(sig);
        continue;
      }
      // Not training yet, or a second signal: the default effect.
      std::signal(sig, SIG_DFL);
      ::pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
      ::raise(sig);
    }
  }).detach();
}

/// Asks every rank to finish its step, checkpoint and exit 0 on SIGTERM
/// or SIGINT; a second signal has the default effect.
void installStopHandlers() { stopHandled.store(true); }

/// Whether `path` lies inside directory `dir` (both resolved).
bool isInside(const std::string &path, const std::string &dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path d = fs::weakly_canonical(dir, ec);
  if (ec || !fs::is_directory(d, ec))
    return false;
  fs::path p = fs::weakly_canonical(path, ec);
  if (ec)
    return false;
  auto di = d.begin(), pi = p.begin();
  for (; di != d.end(); ++di, ++pi)
    if (pi == p.end() || *di != *pi)
      return false;
  return true;
}

/// Whether the existing file at `path` is a log this launcher wrote (or
/// empty): only such a file may be truncated or rewritten by --log.
bool looksLikeStepLog(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::string line;
  if (!std::getline(in, line))
    return true; // Empty.
  nlohmann::json first = nlohmann::json::parse(line, nullptr, false);
  return !first.is_discarded() && first.is_object() &&
         (first.contains("step") || first.contains("summary"));
}

/// Refuses a --log that names one of the run's inputs, a file inside a
/// checkpoint or run directory, or an existing file that is not a log: a
/// new log starts empty and a resumed one is rewritten, and neither may
/// destroy what is not theirs.
void checkLogIsNotAnInput(const Options &opt, const std::string &self) {
  namespace fs = std::filesystem;
  std::error_code ec;
  for (const auto &[flag, dir] :
       {std::pair<const char *, std::string>{"--save", opt.save},
        {"--resume", opt.resume},
        {"--init", opt.init}})
    if (!dir.empty() && isInside(opt.log, dir))
      fail("--log ", opt.log, ": lies inside ", flag, " ", dir,
           ", a checkpoint directory of this run; choose a path outside it");
  if (!fs::exists(opt.log, ec))
    return;
  for (const std::string &input :
       {opt.data, opt.evalData, opt.init, opt.program, self})
    if (!input.empty() && fs::equivalent(opt.log, input, ec))
      fail("--log ", opt.log, ": is ", input,
           ", an input of this run; choose another path for the log");
  if (!looksLikeStepLog(opt.log))
    fail("--log ", opt.log,
         ": exists and is not a Strata training log (its first line is not "
         "a step record); it would be overwritten. Remove it or choose "
         "another path");
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
  uint64_t seed = opt.seed ? *opt.seed : program.meta.seed;
  int64_t totalSteps = opt.steps >= 0 ? opt.steps : program.train.defaultSteps;
  try {
    applyOverrides(opt, totalSteps, program.train);
  } catch (const RuntimeError &e) {
    throw CollectiveError(e.what());
  }
  if (!opt.init.empty() && !opt.resume.empty())
    throw CollectiveError(
        "--init " + opt.init + " and --resume " + opt.resume +
        ": --resume restores the weights (and the run) from the checkpoint, "
        "so --init would be ignored; drop one of them");
  if (opt.info) {
    if (rank == 0)
      printInfo(program, source, opt, totalSteps, seed);
    return 0;
  }
  if (opt.cudaPlan) {
    // Plain C++ over the program: works on machines without a GPU.
    if (rank == 0)
      for (const RankProgram &rp : program.ranks) {
        std::printf("rank %u:\n%s", rp.rank,
                    cuda::describeCudaBinding(
                        rp, cuda::planCudaBinding(
                                rp, cuda::bindOptionsFromEnvironment()))
                        .c_str());
        break;
      }
    return 0;
  }
  if (opt.generate > 0) {
    // One process samples, whatever the training plan.
    if (rank != 0)
      return 0;
    try {
      return runGenerate(program, opt);
    } catch (const RuntimeError &e) {
      throw CollectiveError(e.what());
    }
  }
  const ModelMeta meta = program.meta;
  if (int64_t(meta.worldSize) != world)
    throw CollectiveError(
        "this program was compiled for " + std::to_string(meta.worldSize) +
        " ranks (plan: " + meta.planDescription +
        "); launch it with mpirun -np " + std::to_string(meta.worldSize) +
        (world > 1 ? " (it was started on " + std::to_string(world) + " ranks)"
                   : ""));
  // Before any input is read: a CUDA program on a machine that cannot run
  // it says why (every rank finds the same, so all exit together).
  if (program.target.kind == TargetKind::Cuda) {
    std::string reason = cudaUnavailableReason();
    if (!reason.empty())
      throw CollectiveError(
          "this program was compiled for the cuda target (device model " +
          program.target.deviceModel + ") and cannot run here: " + reason +
          "; run it on a machine with an NVIDIA GPU and driver, or "
          "recompile with --target cpu --cluster local:N");
  }
  // A multi-rank CUDA program's groups run on NCCL where every rank has a
  // GPU of its own; otherwise on MPI, staged through host memory.
  if (program.target.kind == TargetKind::Cuda && comms && world > 1) {
    std::string why;
    comms = createCudaCommBackend(comms, why);
    if (!why.empty() && rank == 0 && std::getenv("STRATA_COMM") == nullptr)
      std::fprintf(stderr,
                   "strata: collectives use MPI with host staging: %s\n",
                   why.c_str());
  }
  TestFailure testFailure = parseTestFailure();
  if (!comms)
    comms = createSingleRankBackend();

  if (totalSteps < 1)
    throw CollectiveError(
        opt.steps >= 0
            ? "--steps must be >= 1, got " + std::to_string(opt.steps)
            : "the program's default step count is " +
                  std::to_string(totalSteps) + "; pass --steps N (N >= 1)");
  if (opt.evalEvery > 0 && opt.evalData.empty())
    throw CollectiveError("--eval-every needs --eval-data FILE (the "
                          "validation tokens, e.g. nanoGPT's val.bin)");
  if (opt.saveBest && (opt.save.empty() || opt.evalData.empty()))
    throw CollectiveError("--save-best needs --save DIR and --eval-data FILE");
  if (opt.evalBatches < 1)
    throw CollectiveError("--eval-batches must be >= 1");
  std::optional<StepTraceSession> tracing;
  try {
    tracing.emplace(opt.trace, opt.traceSteps);
  } catch (const RuntimeError &e) {
    throw CollectiveError(e.what());
  }

  // Check every input before the first step, so a bad flag fails fast, and
  // on every rank before any collective, so a failure cannot strand a rank.
  TokenFileDType dtype =
      opt.dataDType == "uint32" ? TokenFileDType::U32 : TokenFileDType::U16;
  std::optional<TokenData> data, evalData;
  RunDirectoryLock saveLock;
  agree(*comms, [&] {
    if (rank == 0 && !opt.log.empty()) {
      checkLogPath(opt.log);
      checkLogIsNotAnInput(opt, source);
    }
    if (!opt.save.empty()) {
      checkRunDirectory(opt.save);
      // Rank 0 publishes every checkpoint; it holds the directory's lock.
      if (rank == 0)
        saveLock = RunDirectoryLock::acquire(opt.save);
    }
    if (!opt.data.empty())
      data.emplace(
          TokenData::loadFile(opt.data, dtype, meta.vocab, meta.seqLen));
    if (!opt.evalData.empty()) {
      try {
        evalData.emplace(
            TokenData::loadFile(opt.evalData, dtype, meta.vocab, meta.seqLen));
      } catch (const RuntimeError &e) {
        std::string message = e.what();
        // The reader names the flag --data; this file is --eval-data's.
        if (message.rfind("--data ", 0) == 0)
          message = "--eval-data " + message.substr(7);
        fail(message);
      }
    }
  });

  std::unique_ptr<Device> device = createDevice(program.target);
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
      // The checkpoint's seed drives initialisation, sampling and the
      // synthetic stream of the resumed run: another one would silently
      // change the data.
      if (opt.seed && *opt.seed != trainer.seed())
        fail("--seed ", *opt.seed, " differs from the seed ", trainer.seed(),
             " that the checkpoint --resume ", opt.resume,
             " was trained with; a resumed run continues with the "
             "checkpoint's seed and data stream: drop --seed (or pass --seed ",
             trainer.seed(), ")");
      // Nothing to train would only rewrite the checkpoint and an empty log.
      if (totalSteps <= trainer.step())
        fail("--steps ", totalSteps,
             opt.steps >= 0 ? "" : " (the program's default)",
             ": the checkpoint --resume ", opt.resume, " has already done ",
             trainer.step(), " steps; pass --steps greater than ",
             trainer.step(), " to train further");
    }
  });
  // The data order: the flag, else the checkpoint's, else nanoGPT's random
  // windows.
  if (!opt.dataOrder.empty())
    trainer.setDataOrder(opt.dataOrder == "sequential" ? DataOrder::Sequential
                                                       : DataOrder::Random);
  else if (opt.resume.empty() || !trainer.checkpointHadDataOrder())
    trainer.setDataOrder(opt.resume.empty() ? DataOrder::Random
                                            : trainer.dataOrder());
  // The synthetic stream follows the run's seed (the checkpoint's when
  // resumed).
  if (!data)
    data.emplace(TokenData::synthetic(trainer.seed(), meta.vocab, meta.seqLen));

  // Only rank 0 reports; the others compute the same global numbers.
  StepLog log;
  int64_t first = trainer.step();
  agree(*comms, [&] {
    if (rank == 0)
      log.open(opt.log, first);
  });
  bool tty = ::isatty(2);
  int64_t toRun = std::max<int64_t>(0, totalSteps - first);
  int64_t printEvery =
      opt.printEvery > 0 ? opt.printEvery : (toRun <= 100 ? 1 : 10);
  int64_t params = modelParameterCount(trainer.program());
  if (rank == 0)
    std::fprintf(
        stderr,
        "strata: %s model, %s parameters, %d rank%s, data: %s (%s), %s\n",
        meta.family.c_str(),
        (formatGrouped(params) + (params >= 1000000
                                      ? " (" + formatCount(double(params)) + ")"
                                      : std::string()))
            .c_str(),
        world, world == 1 ? "" : "s", data->description().c_str(),
        dataOrderName(trainer.dataOrder()),
        first == 0 ? ("steps 1.." + std::to_string(totalSteps)).c_str()
                   : ("steps " + std::to_string(first + 1) + ".." +
                      std::to_string(totalSteps) + " (resumed after step " +
                      std::to_string(first) + ")")
                         .c_str());
  installStopHandlers();

  // The best evaluation loss so far (a resumed run reads it back).
  namespace fs = std::filesystem;
  fs::path bestRecord = fs::path(opt.save) / "best.json";
  double bestEval = INFINITY;
  if (opt.saveBest) {
    std::ifstream in(bestRecord);
    nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
    if (!j.is_discarded() && j.is_object())
      bestEval = j.value("eval_loss", double(INFINITY));
  }
  std::string lastCheckpoint;
  int64_t savedStep = -1;
  auto saveStep = [&](int64_t step) {
    std::string name = stepCheckpointName(step);
    trainer.saveCheckpoint((fs::path(opt.save) / name).string());
    agree(*comms, [&] {
      if (rank != 0)
        return;
      pointLatestAt(opt.save, name);
      for (const std::string &gone : pruneCheckpoints(opt.save, opt.keepLast))
        (void)gone;
    });
    lastCheckpoint = (fs::path(opt.save) / name).string();
    savedStep = step;
  };

  auto evaluate = [&](int64_t step) {
    EvalStats e = trainer.evaluate(*evalData, opt.evalBatches);
    bool best = e.loss < bestEval;
    if (best)
      bestEval = e.loss;
    if (best && opt.saveBest) {
      trainer.saveCheckpoint((fs::path(opt.save) / "best").string());
      agree(*comms, [&] {
        if (rank != 0)
          return;
        std::string text =
            nlohmann::json{{"step", step}, {"eval_loss", e.loss}}.dump() + "\n";
        writeFileAtomically(bestRecord.string(),
                            std::vector<uint8_t>(text.begin(), text.end()),
                            false);
      });
    }
    if (rank != 0)
      return;
    log.write({{"step", step},
               {"eval_loss", e.loss},
               {"eval_batches", e.batches},
               {"eval_tokens", e.tokens},
               {"eval_time_s", e.seconds},
               {"best", best},
               {"time", utcTimestamp()}});
    std::fprintf(stderr, "%sstep %lld: eval loss %.6f over %lld batches%s\n",
                 tty ? "\n" : "", (long long)step, e.loss, (long long)e.batches,
                 best && opt.saveBest ? " (best; saved)" : "");
  };

  auto wallStart = std::chrono::steady_clock::now();
  double elapsed = 0.0, lastLoss = NAN;
  int64_t ran = 0;
  bool stopped = false;
  for (int64_t i = 0; i < toRun; ++i) {
    tracing->beforeStep(trainer, trainer.step() + 1, toRun - i);
    if (testFailure.rank == rank && testFailure.step == trainer.step() + 1) {
      std::fprintf(stderr,
                   "strata: rank %d: STRATA_TEST_FAIL: exiting with status 3 "
                   "at the start of step %lld\n",
                   rank, (long long)trainer.step() + 1);
      std::fflush(stderr);
      ::_exit(3);
    }
    StepStats s = trainer.runStep(*data, stopSignal.load() != 0);
    // The loss is the same on every rank, so all of them stop here.
    if (!std::isfinite(s.loss))
      throw CollectiveError(
          "step " + std::to_string(s.step + 1) + ": the loss is " +
          std::to_string(s.loss) +
          "; training diverged (lower the learning rate or enable gradient "
          "clipping)");
    tracing->afterStep(trainer, comms->world(), s.seconds,
                       i + 1 == toRun || s.stopRequested);
    elapsed += s.seconds;
    lastLoss = s.loss;
    ++ran;
    int64_t step = s.step + 1;
    bool last = i + 1 == toRun;
    if (rank == 0) {
      double tokPerS = s.seconds > 0 ? s.tokens / s.seconds : 0.0;
      double eta = elapsed / double(i + 1) * double(toRun - i - 1);
      std::optional<double> mfu;
      if (meta.flopsPerStep > 0 && meta.peakFlops > 0 && s.seconds > 0)
        mfu = meta.flopsPerStep / s.seconds / (double(world) * meta.peakFlops);
      log.write({{"step", step},
                 {"loss", s.loss},
                 {"lr", s.lr},
                 {"grad_norm", s.gradNorm ? nlohmann::ordered_json(*s.gradNorm)
                                          : nlohmann::ordered_json()},
                 {"step_time_s", s.seconds},
                 {"tokens_per_s", tokPerS},
                 {"tokens", s.tokens},
                 {"samples_seen", trainer.dataPosition()},
                 {"mfu", mfu ? nlohmann::ordered_json(*mfu)
                             : nlohmann::ordered_json()},
                 {"memory_bytes", int64_t(s.memoryBytes)},
                 {"slowest_rank", s.slowestRank},
                 {"slowest_rank_lag_s", s.slowestRankLag},
                 {"time", utcTimestamp()}});
      if (tty) {
        std::fprintf(stderr,
                     "\rstep %lld/%lld | loss %.4f | lr %.3g | %.0f tok/s | "
                     "ETA %s   ",
                     (long long)step, (long long)totalSteps, s.loss, s.lr,
                     tokPerS, formatDuration(eta).c_str());
        if (last || s.stopRequested)
          std::fprintf(stderr, "\n");
      } else if ((i + 1) % printEvery == 0 || last || s.stopRequested) {
        std::fprintf(stderr,
                     "step %lld/%lld loss %.6f lr %.6g grad_norm %.4g "
                     "tok/s %.0f eta %s\n",
                     (long long)step, (long long)totalSteps, s.loss, s.lr,
                     s.gradNorm.value_or(NAN), tokPerS,
                     formatDuration(eta).c_str());
      }
    }
    // An evaluation due at this step is part of it, stop or not, so that a
    // resumed run's log misses nothing.
    if (evalData && ((opt.evalEvery > 0 && step % opt.evalEvery == 0) || last))
      evaluate(step);
    if (s.stopRequested) {
      stopped = true;
      break;
    }
    if (!opt.save.empty() && opt.saveEvery > 0 && step % opt.saveEvery == 0 &&
        !last)
      saveStep(step);
  }
  tracing->finish(rank, first + 1, trainer.step());
  if (!opt.save.empty() && savedStep != trainer.step())
    saveStep(trainer.step());

  double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                              wallStart)
                    .count();
  if (rank == 0) {
    int64_t tokens = ran * meta.globalBatch * meta.seqLen;
    double meanTokPerS = elapsed > 0 ? double(tokens) / elapsed : 0.0;
    const char *signalName = stopSignal.load() == SIGINT ? "SIGINT" : "SIGTERM";
    nlohmann::ordered_json summary = {
        {"first_step", first + 1},
        {"last_step", trainer.step()},
        {"steps_run", ran},
        {"time_s", wall},
        {"train_time_s", elapsed},
        {"mean_tokens_per_s", meanTokPerS},
        {"final_loss",
         ran > 0 ? nlohmann::ordered_json(lastLoss) : nlohmann::ordered_json()},
        {"best_eval_loss", std::isfinite(bestEval)
                               ? nlohmann::ordered_json(bestEval)
                               : nlohmann::ordered_json()},
        {"checkpoint", lastCheckpoint.empty()
                           ? nlohmann::ordered_json()
                           : nlohmann::ordered_json(lastCheckpoint)},
        {"stopped_by", stopped ? nlohmann::ordered_json(signalName)
                               : nlohmann::ordered_json()},
        {"time", utcTimestamp()}};
    log.write({{"summary", summary}});
    std::string where = lastCheckpoint.empty()
                            ? std::string("no checkpoint (no --save)")
                            : "checkpoint " + lastCheckpoint +
                                  " (resume with --resume " + opt.save + ")";
    if (stopped)
      std::fprintf(stderr,
                   "strata: %s received: stopped after step %lld of %lld; "
                   "%s\n",
                   signalName, (long long)trainer.step(), (long long)totalSteps,
                   where.c_str());
    std::fprintf(stderr,
                 "strata: done: steps %lld..%lld (%lld run) in %s, %.0f "
                 "tokens/s mean, final loss %.6f%s; %s\n",
                 (long long)first + 1, (long long)trainer.step(),
                 (long long)ran, formatDuration(wall).c_str(), meanTokPerS,
                 lastLoss,
                 std::isfinite(bestEval)
                     ? (", best eval loss " + std::to_string(bestEval)).c_str()
                     : "",
                 where.c_str());
  }
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  startSignalThread();
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
  // An empty path would silently mean "not given" (synthetic data, no
  // checkpoint): refuse it.
  CLI::Validator nonEmpty(
      [](std::string &value) -> std::string {
        if (value.empty())
          return "must not be empty (leave the flag out instead)";
        return {};
      },
      "PATH");
  CLI::App app{"Strata training binary: runs the compiled training program "
               "embedded in this executable (or --program FILE), or samples "
               "from trained weights with --generate."};
  app.footer(
      "Data: raw little-endian tokens (nanoGPT train.bin). By default each "
      "sample is a window of seq_len + 1 tokens at a random offset drawn from "
      "the seed and the sample's number (nanoGPT's get_batch; resumed "
      "exactly); --data-order sequential reads consecutive windows. Without "
      "--data a synthetic Markov stream from the seed is used. SIGTERM or "
      "SIGINT: every rank finishes its step, the job saves a checkpoint "
      "(with --save) and exits 0. See docs/runtime.md.");
  app.add_option("--program", opt.program,
                 "Run this program file instead of the embedded one")
      ->check(CLI::ExistingFile);
  app.add_option("--steps", opt.steps,
                 "Train until N steps are done in total (a resumed run "
                 "continues from its step); default from the program")
      ->check(positive);
  app.add_option("--data", opt.data,
                 "Token file: raw little-endian uint16 (or --data-dtype)")
      ->check(nonEmpty);
  app.add_option("--data-dtype", opt.dataDType,
                 "Token width of --data and --eval-data")
      ->check(CLI::IsMember({"uint16", "uint32"}));
  app.add_option("--data-order", opt.dataOrder,
                 "random (default; nanoGPT's random windows) or sequential "
                 "(consecutive windows in file order); default on --resume: "
                 "the checkpoint's")
      ->check(CLI::IsMember({"random", "sequential"}));
  app.add_option("--eval-data", opt.evalData,
                 "Validation tokens (same format as --data): the loss on "
                 "them is logged at --eval-every and at the end")
      ->check(nonEmpty);
  app.add_option("--eval-every", opt.evalEvery,
                 "Evaluate every N steps (needs --eval-data)")
      ->check(nonNegative);
  app.add_option("--eval-batches", opt.evalBatches,
                 "Global batches per evaluation (default 8; the same windows "
                 "every time)")
      ->check(positive);
  app.add_option("--init", opt.init,
                 "Initial weights: a safetensors file (Strata's or Hugging "
                 "Face's names) or a checkpoint directory of any plan")
      ->check(nonEmpty);
  app.add_option("--log", opt.log,
                 "Append one JSON object per step (step, loss, lr, "
                 "grad_norm, time, mfu, memory_bytes, ...), per evaluation "
                 "and a summary; continued on --resume")
      ->check(nonEmpty);
  app.add_option("--save", opt.save,
                 "Run directory: checkpoints DIR/step-N (at the end, every "
                 "--save-every steps, on SIGTERM) and DIR/latest")
      ->check(nonEmpty);
  app.add_option("--save-every", opt.saveEvery, "Checkpoint period in steps")
      ->check(nonNegative);
  app.add_option("--keep-last", opt.keepLast,
                 "Keep only the newest N step checkpoints (default: all)")
      ->check(nonNegative);
  app.add_flag("--save-best", opt.saveBest,
               "Keep DIR/best, the checkpoint with the lowest eval loss");
  app.add_option("--resume", opt.resume,
                 "Continue from a checkpoint (a run directory's latest, or a "
                 "checkpoint directory), under this plan or another")
      ->check(nonEmpty);
  CLI::Validator seed64(
      [](std::string &value) -> std::string {
        errno = 0;
        char *end = nullptr;
        if (value.empty() ||
            value.find_first_not_of("0123456789") != std::string::npos)
          return "must be an integer in 0..18446744073709551615, got '" +
                 value + "'";
        (void)std::strtoull(value.c_str(), &end, 10);
        if (errno == ERANGE)
          return "must be at most 18446744073709551615 (2^64 - 1), got " +
                 value;
        return {};
      },
      "0..2^64-1");
  app.add_option("--seed", opt.seedText,
                 "Seed for initialisation, data sampling and synthetic data "
                 "(default: the program's; a resumed run keeps the "
                 "checkpoint's); with --generate, the sampling seed")
      ->check(seed64);
  app.add_option("--threads", opt.threads, "CPU threads (default 1)")
      ->check(CLI::Range(1, 1024));
  app.add_option("--print-every", opt.printEvery,
                 "Progress line period when stderr is not a terminal")
      ->check(nonNegative);
  app.add_option("--trace", opt.trace,
                 "write a measured Chrome trace of --trace-steps (every "
                 "instruction on every rank; docs/report.md)");
  app.add_option("--trace-steps", opt.traceSteps,
                 "steps to trace, A..B (1-based; default: the run's second "
                 "step)");
  app.add_flag("--info", opt.info,
               "Describe the program and the run's settings and exit");
  app.add_flag("--cuda-plan", opt.cudaPlan,
               "Print how the CUDA device would run rank 0's program "
               "(fusions, staged bf16 kernels, CUDA graphs, scratch) and "
               "exit; needs no GPU");
  auto *overrides = app.add_option_group(
      "Run-time settings", "Override the program's training settings "
                           "without recompiling (shown by --info)");
  overrides->add_option("--lr", opt.lr, "Base learning rate");
  overrides
      ->add_option("--lr-schedule", opt.lrSchedule,
                   "constant, cosine or linear")
      ->check(CLI::IsMember({"constant", "cosine", "linear"}));
  overrides
      ->add_option("--warmup-steps", opt.warmupSteps, "Linear warm-up steps")
      ->check(nonNegative);
  overrides->add_option("--min-lr", opt.minLr,
                        "Where cosine/linear decay ends");
  overrides
      ->add_option("--lr-decay-steps", opt.lrDecaySteps,
                   "Step where the decay reaches --min-lr (default for "
                   "a schedule given here: --steps)")
      ->check(nonNegative);
  auto *generation = app.add_option_group(
      "Generation", "Sample from trained weights (--init or --resume) with "
                    "the program's inference program and a key/value cache");
  generation
      ->add_option("--generate", opt.generate,
                   "Sample N new tokens and print them")
      ->check(positive);
  generation->add_option("--prompt", opt.prompt,
                         "Prompt text (needs --tokenizer)");
  generation->add_option("--prompt-ids", opt.promptIds,
                         "Prompt as token ids, e.g. 464,3290");
  generation
      ->add_option("--tokenizer", opt.tokenizer,
                   "Directory with GPT-2's vocab.json + merges.txt or "
                   "encoder.json + vocab.bpe")
      ->check(nonEmpty);
  generation
      ->add_option("--temperature", opt.temperature,
                   "Softmax temperature (default 1; 0: greedy)")
      ->check(CLI::Range(0.0, 1e6));
  generation
      ->add_option("--top-k", opt.topK,
                   "Sample among the k most likely tokens (0: all)")
      ->check(nonNegative);
  generation->add_flag("--print-ids", opt.printIds, "Also print the token ids");
  CLI11_PARSE(app, argc, argv);
  if (!opt.seedText.empty())
    opt.seed = std::strtoull(opt.seedText.c_str(), nullptr, 10);

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
        dynamic_cast<const std::bad_alloc *>(&e)
            ? "out of memory: this rank could not allocate what the run "
              "needs (see `BIN --info` for the arena size per rank); use a "
              "plan with more ranks, a smaller model or batch, or a machine "
              "with more memory"
            : e.what();
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
