//===- MpiLauncherTest.cpp - The launcher under mpirun --------------------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// Starts `mpirun --oversubscribe -np N strata-launcher --program P` as a
// child: a wrong rank count is a clear error on every path, a rank that dies
// ends the whole job quickly with its rank named, a per-rank checkpoint
// written by --save resumes to the same log, and one-rank programs run both
// with and without mpirun.
//
//===----------------------------------------------------------------------===//

#include "TestPrograms.h"

#include "runtime/format/Bundle.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <sys/wait.h>
#include <unistd.h>

using namespace strata::rt;
namespace fs = std::filesystem;

namespace {

class MpiLauncherTest : public ::testing::Test {
protected:
  void SetUp() override {
    // mpirun refuses root without these; they only affect our children.
    ::setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    ::setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    dir = fs::temp_directory_path() /
          ("strata-mpilaunch-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    testprograms::MlpConfig c;
    c.microBatch = 2;
    c.numMicrobatches = 2;
    dpProgram = write("dp2.prog",
                      testprograms::buildDataParallelMlp(c, {2, true, true}));
    oneProgram = write("one.prog", testprograms::buildMlpProgram());
    // The dp program's model and global batch on one rank.
    testprograms::MlpConfig whole = c;
    whole.numMicrobatches = c.numMicrobatches * 2;
    oneOfDpProgram =
        write("one-of-dp.prog", testprograms::buildMlpProgram(whole));
  }
  void TearDown() override { fs::remove_all(dir); }

  std::string write(const std::string &name, const Program &p) {
    std::string path = (dir / name).string();
    writeFileAtomically(path, serializeProgram(p), false);
    return path;
  }
  static std::string mpirun(int np, const std::string &env = "") {
    return std::string("mpirun --oversubscribe ") + env + " -np " +
           std::to_string(np) + " " + STRATA_LAUNCHER_PATH;
  }
  int run(const std::string &command) {
    std::string out = (dir / "out.txt").string();
    int status =
        std::system(("timeout 100 " + command + " > " + out + " 2>&1").c_str());
    std::ifstream in(out);
    std::stringstream ss;
    ss << in.rdbuf();
    output = ss.str();
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  static std::string read(const fs::path &path) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  /// The "loss" values of a --log file, as printed (exact digits).
  static std::vector<std::string> losses(const fs::path &log) {
    std::vector<std::string> out;
    std::stringstream ss(read(log));
    for (std::string line; std::getline(ss, line);) {
      size_t at = line.find("\"loss\":");
      if (at != std::string::npos)
        out.push_back(line.substr(at, line.find(',', at) - at));
    }
    return out;
  }

  fs::path dir;
  std::string dpProgram, oneProgram, oneOfDpProgram, output;
};

TEST_F(MpiLauncherTest, WrongRankCountIsAClearError) {
  const std::string want = "this program was compiled for 2 ranks (plan: "
                           "hand-built data-parallel MLP, dp=2); launch it "
                           "with mpirun -np 2";
  EXPECT_NE(run(mpirun(3) + " --program " + dpProgram + " --steps 1"), 0);
  EXPECT_NE(output.find(want), std::string::npos) << output;
  // Printed once, by rank 0.
  EXPECT_EQ(output.find(want), output.rfind(want)) << output;
  // Without mpirun: the same message, no MPI needed.
  EXPECT_NE(run(std::string(STRATA_LAUNCHER_PATH) + " --program " + dpProgram +
                " --steps 1"),
            0);
  EXPECT_NE(output.find(want), std::string::npos) << output;
}

TEST_F(MpiLauncherTest, OneRankProgramRunsWithAndWithoutMpirun) {
  std::string args = " --program " + oneProgram + " --steps 3 --log ";
  ASSERT_EQ(run(mpirun(1) + args + (dir / "a.jsonl").string()), 0) << output;
  ASSERT_EQ(run(std::string(STRATA_LAUNCHER_PATH) + args +
                (dir / "b.jsonl").string()),
            0)
      << output;
  EXPECT_EQ(losses(dir / "a.jsonl").size(), 3u);
  EXPECT_EQ(losses(dir / "a.jsonl"), losses(dir / "b.jsonl"));
}

TEST_F(MpiLauncherTest, DeadRankEndsTheJobAndIsNamed) {
  auto start = std::chrono::steady_clock::now();
  int rc = run(mpirun(2, "-x STRATA_TEST_FAIL=1:2") + " --program " +
               dpProgram + " --steps 50");
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  EXPECT_NE(rc, 0) << output;
  EXPECT_LT(seconds, 30.0);
  EXPECT_NE(output.find("rank 1: STRATA_TEST_FAIL: exiting with status 3 at "
                        "the start of step 2"),
            std::string::npos)
      << output;
  // mpirun's own report names the process (rank 1 of the job).
  EXPECT_NE(output.find(",1]"), std::string::npos) << output;
  EXPECT_EQ(output.find("step 50/50"), std::string::npos) << output;
}

TEST_F(MpiLauncherTest, SaveAndResumeContinueTheSameLog) {
  std::string base = mpirun(2) + " --program " + dpProgram;
  fs::path ckpt = dir / "ckpt";
  ASSERT_EQ(run(base + " --steps 4 --log " + (dir / "full.jsonl").string()), 0)
      << output;
  ASSERT_EQ(run(base + " --steps 2 --save " + ckpt.string()), 0) << output;
  EXPECT_TRUE(fs::exists(ckpt / "latest" / "index.json"));
  EXPECT_TRUE(fs::exists(ckpt / "step-00000002" / "rank-00001.safetensors"));
  ASSERT_EQ(run(base + " --steps 4 --resume " + ckpt.string() + " --log " +
                (dir / "rest.jsonl").string()),
            0)
      << output;
  std::vector<std::string> full = losses(dir / "full.jsonl"),
                           rest = losses(dir / "rest.jsonl");
  ASSERT_EQ(full.size(), 4u);
  ASSERT_EQ(rest.size(), 2u);
  EXPECT_EQ(rest[0], full[2]);
  EXPECT_EQ(rest[1], full[3]);
  // Only rank 0 logs and prints progress.
  EXPECT_EQ(output.find("step 4/4"), output.rfind("step 4/4")) << output;
  // A 1-rank program of the same model resumes the 2-rank checkpoint
  // (resharded) and takes the same steps.
  ASSERT_EQ(run(std::string(STRATA_LAUNCHER_PATH) + " --program " +
                oneOfDpProgram + " --steps 4 --resume " + ckpt.string() +
                " --log " + (dir / "one.jsonl").string()),
            0)
      << output;
  std::vector<std::string> one = losses(dir / "one.jsonl");
  ASSERT_EQ(one.size(), 2u);
  for (int i = 0; i < 2; ++i)
    EXPECT_NEAR(std::stod(one[i].substr(7)), std::stod(full[2 + i].substr(7)),
                1e-5)
        << one[i] << " vs " << full[2 + i];
}

} // namespace
