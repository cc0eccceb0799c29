//===- BundleLauncherTest.cpp - Embedded programs and the launcher CLI ----===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//

#include "TestPrograms.h"

#include "runtime/format/Bundle.h"
#include "runtime/support/Error.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <sys/wait.h>
#include <unistd.h>

using namespace strata::rt;
namespace fs = std::filesystem;

namespace {

class LauncherTest : public ::testing::Test {
protected:
  void SetUp() override {
    dir = fs::temp_directory_path() /
          ("strata-launch-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    programPath = (dir / "mlp.prog").string();
    std::vector<uint8_t> bytes =
        serializeProgram(testprograms::buildMlpProgram());
    writeFileAtomically(programPath, bytes, false);
  }
  void TearDown() override { fs::remove_all(dir); }

  /// Runs a command; returns its exit code and sets `output` to its
  /// stdout + stderr.
  int run(const std::string &command) {
    std::string out = (dir / "out.txt").string();
    int status = std::system((command + " > " + out + " 2>&1").c_str());
    output = readText(out);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  static std::string readText(const std::string &path) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  static std::vector<std::string> lines(const std::string &text) {
    std::vector<std::string> result;
    std::stringstream ss(text);
    for (std::string line; std::getline(ss, line);)
      result.push_back(line);
    return result;
  }

  fs::path dir;
  std::string programPath;
  std::string output;
  const std::string launcher = STRATA_LAUNCHER_PATH;
};

TEST_F(LauncherTest, BundleRoundTrip) {
  std::string fake = (dir / "fake-launcher").string();
  writeFileAtomically(fake, {1, 2, 3, 4}, true);
  EXPECT_FALSE(readEmbeddedProgram(fake).has_value());
  std::vector<uint8_t> program = {9, 8, 7};
  std::string out = (dir / "bin").string();
  writeExecutable(fake, program, out);
  EXPECT_EQ(readEmbeddedProgram(out), program);
  EXPECT_NE(fs::status(out).permissions() & fs::perms::owner_exec,
            fs::perms::none);
  // Bundling a bundled binary again is refused, and a failed write leaves
  // the existing output untouched.
  EXPECT_THROW(writeExecutable(out, program, (dir / "bin2").string()),
               RuntimeError);
  EXPECT_THROW(writeExecutable((dir / "absent").string(), {1}, out),
               RuntimeError);
  EXPECT_EQ(readEmbeddedProgram(out), program);
}

TEST_F(LauncherTest, EmbeddedProgramTrainsAndLogs) {
  std::string bin = (dir / "train").string();
  std::ifstream in(programPath, std::ios::binary);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), {});
  writeExecutable(launcher, bytes, bin);
  std::string log = (dir / "log.jsonl").string();
  ASSERT_EQ(run(bin + " --steps 4 --log " + log), 0) << output;
  std::vector<std::string> entries = lines(readText(log));
  ASSERT_EQ(entries.size(), 4u);
  EXPECT_EQ(entries[0].rfind("{\"step\": 1, \"loss\": ", 0), 0u) << entries[0];
  for (const char *key :
       {"\"lr\"", "\"grad_norm\"", "\"step_time_s\"", "\"tokens_per_s\""})
    EXPECT_NE(entries[3].find(key), std::string::npos) << key;
  EXPECT_NE(output.find("step 4/4"), std::string::npos) << output;
  // The start-up line counts steps from 1 like the log and the progress
  // lines, and names the parameter count, not the tensor count.
  EXPECT_NE(output.find(" parameters, 1 rank, "), std::string::npos)
      << output;
  EXPECT_NE(output.find(", steps 1..4\n"), std::string::npos) << output;
  ASSERT_EQ(run(bin + " --info"), 0);
  EXPECT_NE(output.find("hand-built MLP"), std::string::npos) << output;
  // --info names the executable, not /proc/self/exe.
  EXPECT_NE(output.find("program: " + bin + "\n"), std::string::npos)
      << output;
}

TEST_F(LauncherTest, SaveResumeThroughTheCli) {
  std::string ck = (dir / "ck").string(), full = (dir / "full.jsonl").string(),
              part = (dir / "part.jsonl").string();
  std::string base = launcher + " --program " + programPath;
  ASSERT_EQ(run(base + " --steps 6 --log " + full), 0) << output;
  EXPECT_NE(output.find(", steps 1..6\n"), std::string::npos) << output;
  ASSERT_EQ(run(base + " --steps 3 --save " + ck), 0) << output;
  ASSERT_EQ(run(base + " --steps 6 --resume " + ck + " --log " + part), 0)
      << output;
  EXPECT_NE(output.find(", steps 4..6 (resumed after step 3)\n"),
            std::string::npos)
      << output;
  std::vector<std::string> a = lines(readText(full)), b = lines(readText(part));
  ASSERT_EQ(a.size(), 6u);
  ASSERT_EQ(b.size(), 3u);
  auto lossOf = [](const std::string &line) {
    size_t at = line.find("\"loss\": ");
    return line.substr(at, line.find(',', at) - at);
  };
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(lossOf(a[3 + i]), lossOf(b[i])) << i;
}

TEST_F(LauncherTest, BadInputsFailWithClearMessages) {
  EXPECT_EQ(run(launcher + " --steps 1"), 1);
  EXPECT_NE(output.find("no embedded program found: " + launcher +
                        " is a bare launcher or a truncated training binary"),
            std::string::npos)
      << output;

  std::string base = launcher + " --program " + programPath;
  EXPECT_EQ(run(base + " --data " + (dir / "nope.bin").string()), 1);
  EXPECT_NE(output.find("--data"), std::string::npos) << output;

  std::string tokens = (dir / "t.bin").string();
  std::vector<uint8_t> raw(200, 0);
  raw[10] = 200; // token 5 = 200 >= vocab 64
  writeFileAtomically(tokens, raw, false);
  EXPECT_EQ(run(base + " --data " + tokens), 1);
  EXPECT_NE(output.find("token 5 has value 200"), std::string::npos) << output;

  std::string bad = (dir / "bad.prog").string();
  std::ifstream in(programPath, std::ios::binary);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), {});
  bytes[bytes.size() / 2] ^= 1;
  writeFileAtomically(bad, bytes, false);
  EXPECT_EQ(run(launcher + " --program " + bad), 1);
  EXPECT_NE(output.find("checksum"), std::string::npos) << output;
  bytes.resize(bytes.size() / 3);
  writeFileAtomically(bad, bytes, false);
  EXPECT_EQ(run(launcher + " --program " + bad), 1);
  EXPECT_NE(output.find("truncated"), std::string::npos) << output;

  EXPECT_EQ(run(base + " --resume " + (dir / "none").string()), 1);
  EXPECT_NE(output.find("--resume"), std::string::npos) << output;
  EXPECT_NE(run(base + " --data-dtype int8"), 0);
}

/// Names of the entries of `d`, sorted.
std::vector<std::string> entriesOf(const fs::path &d) {
  std::vector<std::string> names;
  for (const fs::directory_entry &e : fs::directory_iterator(d))
    names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

TEST_F(LauncherTest, TruncatedBinarySaysItCarriesNoProgram) {
  std::string bin = (dir / "train").string();
  std::ifstream in(programPath, std::ios::binary);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), {});
  writeExecutable(launcher, bytes, bin);
  fs::resize_file(bin, fs::file_size(launcher) + bytes.size() / 2);
  EXPECT_EQ(run(bin + " --steps 1"), 1);
  EXPECT_NE(output.find("no embedded program found: " + bin +
                        " is a bare launcher or a truncated training binary"),
            std::string::npos)
      << output;
}

TEST_F(LauncherTest, LogThatIsADirectoryFailsAtStartUp) {
  fs::create_directories(dir / "d");
  std::string base = launcher + " --program " + programPath;
  std::string d = (dir / "d").string();
  EXPECT_EQ(run(base + " --steps 2 --log " + d), 1);
  EXPECT_NE(output.find("error: --log " + d +
                        ": is a directory; expected a file path"),
            std::string::npos)
      << output;
  // Failed before training: no progress line, no stray temporary.
  EXPECT_EQ(output.find("step 1/2"), std::string::npos) << output;
  EXPECT_TRUE(fs::is_empty(dir / "d"));
  EXPECT_EQ(entriesOf(dir),
            (std::vector<std::string>{"d", "mlp.prog", "out.txt"}));
  std::string missing = (dir / "nodir" / "log.jsonl").string();
  EXPECT_EQ(run(base + " --steps 2 --log " + missing), 1);
  EXPECT_NE(output.find("--log " + missing + ": directory '" +
                        (dir / "nodir").string() + "' does not exist"),
            std::string::npos)
      << output;
}

TEST_F(LauncherTest, InitAndResumeOfTheWrongKindNameTheFlag) {
  std::string base = launcher + " --program " + programPath + " --steps 4";
  std::string adir = (dir / "adir").string();
  fs::create_directories(adir);
  EXPECT_EQ(run(base + " --init " + adir), 1);
  EXPECT_NE(output.find("error: --init " + adir +
                        ": not a regular file; expected a .safetensors file"),
            std::string::npos)
      << output;
  EXPECT_EQ(output.find("basic_filebuf"), std::string::npos) << output;

  std::string missing = (dir / "missing.safetensors").string();
  EXPECT_EQ(run(base + " --init " + missing), 1);
  EXPECT_NE(output.find("error: --init " + missing + ": cannot open: "),
            std::string::npos)
      << output;

  std::string ck = (dir / "ck").string();
  ASSERT_EQ(
      run(launcher + " --program " + programPath + " --steps 2 --save " + ck),
      0)
      << output;
  fs::remove(dir / "ck" / "model.safetensors");
  fs::create_directories(dir / "ck" / "model.safetensors");
  EXPECT_EQ(run(base + " --resume " + ck), 1);
  EXPECT_NE(output.find("error: --resume " + ck +
                        "/model.safetensors: not a regular file; expected a "
                        ".safetensors file"),
            std::string::npos)
      << output;
}

TEST_F(LauncherTest, StepsMustLeaveSomethingToTrain) {
  std::string base = launcher + " --program " + programPath;
  EXPECT_GE(run(base + " --steps 0"), 100); // CLI11's status for a bad flag.
  EXPECT_NE(output.find("--steps: must be >= 1"), std::string::npos) << output;
  EXPECT_GE(run(base + " --steps -2"), 100);
  EXPECT_NE(output.find("--steps: must be >= 1"), std::string::npos) << output;

  std::string ck = (dir / "ck").string();
  ASSERT_EQ(run(base + " --steps 3 --save " + ck), 0) << output;
  fs::file_time_type saved = fs::last_write_time(dir / "ck" / "trainer.json");
  EXPECT_EQ(run(base + " --steps 3 --resume " + ck + " --save " + ck), 1);
  EXPECT_NE(output.find("--steps 3: the checkpoint --resume " + ck +
                        " has already done 3 steps; pass --steps greater "
                        "than 3"),
            std::string::npos)
      << output;
  EXPECT_EQ(fs::last_write_time(dir / "ck" / "trainer.json"), saved);
  EXPECT_EQ(run(base + " --steps 4 --resume " + ck), 0) << output;
}

} // namespace
