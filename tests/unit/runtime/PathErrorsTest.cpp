//===- PathErrorsTest.cpp - Paths of the wrong kind: files vs directories -===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// A directory where a file is expected, an output in a missing directory, a
// FIFO: each must give a message naming the path and the problem, never the
// name of an internal temporary or a C++ library's exception text, and must
// leave the disk as it was.
//
//===----------------------------------------------------------------------===//

#include "runtime/format/Bundle.h"
#include "runtime/io/SafeTensors.h"
#include "runtime/launcher/StepLog.h"
#include "runtime/support/Error.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sys/stat.h>
#include <unistd.h>

using namespace strata::rt;
namespace fs = std::filesystem;

namespace {

class PathErrorsTest : public ::testing::Test {
protected:
  void SetUp() override {
    dir = fs::temp_directory_path() /
          ("strata-paths-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  void TearDown() override { fs::remove_all(dir); }

  /// The message of the RuntimeError `body` throws; "" when it throws none.
  template <typename Fn> static std::string errorOf(Fn body) {
    try {
      body();
    } catch (const RuntimeError &e) {
      return e.what();
    }
    return "";
  }
  /// Names of the entries of `d`, sorted.
  static std::vector<std::string> entries(const fs::path &d) {
    std::vector<std::string> names;
    for (const fs::directory_entry &e : fs::directory_iterator(d))
      names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }
  std::string at(const std::string &name) const {
    return (dir / name).string();
  }

  fs::path dir;
};

#define EXPECT_CONTAINS(text, needle)                                          \
  EXPECT_NE(std::string(text).find(needle), std::string::npos)                 \
      << "missing '" << (needle) << "' in: " << (text)

TEST_F(PathErrorsTest, SafeTensorsOpenOfADirectoryNamesThePath) {
  fs::create_directories(dir / "adir");
  std::string e = errorOf([&] { SafeTensorsFile::open(at("adir")); });
  EXPECT_EQ(e, at("adir") + ": not a regular file; expected a .safetensors "
                            "file");
}

TEST_F(PathErrorsTest, SafeTensorsOpenOfAMissingFileSaysSo) {
  std::string e = errorOf([&] { SafeTensorsFile::open(at("nope")); });
  EXPECT_EQ(e.rfind(at("nope") + ": cannot open: ", 0), 0u) << e;
  EXPECT_CONTAINS(e, "No such file");
}

TEST_F(PathErrorsTest, SafeTensorsOpenOfAFifoDoesNotBlock) {
  ASSERT_EQ(::mkfifo(at("fifo").c_str(), 0600), 0);
  std::string e = errorOf([&] { SafeTensorsFile::open(at("fifo")); });
  EXPECT_CONTAINS(e, "not a regular file");
}

TEST_F(PathErrorsTest, WriteIntoAMissingDirectoryNamesTheDirectory) {
  std::string out = at("nodir/x");
  std::string e = errorOf([&] { writeFileAtomically(out, {1, 2}, false); });
  EXPECT_CONTAINS(e, "directory '" + at("nodir") + "' does not exist");
  EXPECT_CONTAINS(e, "create it or choose another path");
  EXPECT_EQ(e.find(".tmp-"), std::string::npos) << e;
  EXPECT_TRUE(entries(dir).empty());
}

TEST_F(PathErrorsTest, WriteWithARelativeBareNameUsesTheWorkingDirectory) {
  fs::path old = fs::current_path();
  fs::current_path(dir);
  std::string e = errorOf([] { writeFileAtomically("plain", {7}, false); });
  fs::current_path(old);
  EXPECT_EQ(e, "");
  EXPECT_EQ(entries(dir), std::vector<std::string>{"plain"});
}

TEST_F(PathErrorsTest, WriteOntoADirectoryOrThroughAFileIsRefused) {
  fs::create_directories(dir / "outdir");
  std::ofstream(dir / "outdir" / "keep.txt") << "user data\n";
  std::string e =
      errorOf([&] { writeFileAtomically(at("outdir"), {1}, true); });
  EXPECT_EQ(e, at("outdir") + ": is a directory; expected a file path");
  EXPECT_EQ(entries(dir / "outdir"), std::vector<std::string>{"keep.txt"});

  std::ofstream(dir / "afile") << "x";
  e = errorOf([&] { writeFileAtomically(at("afile/x"), {1}, false); });
  EXPECT_CONTAINS(e, "'" + at("afile") + "' is not a directory");
  EXPECT_EQ(entries(dir), (std::vector<std::string>{"afile", "outdir"}));
}

TEST_F(PathErrorsTest, WriteOverAFifoIsRefused) {
  ASSERT_EQ(::mkfifo(at("fifo").c_str(), 0600), 0);
  std::string e = errorOf([&] { writeFileAtomically(at("fifo"), {1}, false); });
  EXPECT_CONTAINS(e, "not a regular file");
  EXPECT_TRUE(fs::is_fifo(dir / "fifo"));
  EXPECT_EQ(entries(dir), std::vector<std::string>{"fifo"});
}

TEST_F(PathErrorsTest, WriteExecutableFromADirectoryLauncherNamesIt) {
  fs::create_directories(dir / "launcher");
  std::string e = errorOf([&] {
    writeExecutable(at("launcher"), {1, 2, 3}, at("bin"));
  });
  EXPECT_EQ(e, at("launcher") + ": not a regular file; expected an "
                                "executable file");
  EXPECT_FALSE(fs::exists(dir / "bin"));
}

TEST_F(PathErrorsTest, TruncatedBundleLooksBare) {
  std::string fake = at("fake-launcher"), bin = at("bin");
  writeFileAtomically(fake, std::vector<uint8_t>(64, 0x7f), true);
  writeExecutable(fake, std::vector<uint8_t>(100, 1), bin);
  ASSERT_TRUE(readEmbeddedProgram(bin).has_value());
  fs::resize_file(bin, 64 + 50);
  EXPECT_FALSE(readEmbeddedProgram(bin).has_value());
}

TEST_F(PathErrorsTest, LogPathChecksNameTheFlag) {
  fs::create_directories(dir / "d");
  EXPECT_EQ(errorOf([&] { checkLogPath(at("d")); }),
            "--log " + at("d") + ": is a directory; expected a file path");
  EXPECT_EQ(errorOf([&] { checkLogPath(at("nodir/log.jsonl")); }),
            "--log " + at("nodir/log.jsonl") + ": directory '" + at("nodir") +
                "' does not exist; create it or choose another path");
  EXPECT_CONTAINS(errorOf([] { checkLogPath("/dev/null"); }),
                  "not a regular file");
  EXPECT_EQ(errorOf([&] { checkLogPath(at("new.jsonl")); }), "");
  std::ofstream(dir / "old.jsonl") << "{}\n";
  EXPECT_EQ(errorOf([&] { checkLogPath(at("old.jsonl")); }), "");
}

std::vector<std::string> lines(const fs::path &path) {
  std::ifstream in(path);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);)
    out.push_back(line);
  return out;
}

TEST_F(PathErrorsTest, StepLogRecordsAreOnDiskAsSoonAsWritten) {
  StepLog log;
  log.open(at("log.jsonl"), 0);
  log.write({{"step", 1}, {"loss", 1.5}});
  // Followable live: the record is there before the log is closed.
  EXPECT_EQ(lines(dir / "log.jsonl"),
            std::vector<std::string>{"{\"step\":1,\"loss\":1.5}"});
  log.write({{"step", 2}, {"loss", 1.25}});
  EXPECT_EQ(lines(dir / "log.jsonl").size(), 2u);
  EXPECT_EQ(entries(dir), std::vector<std::string>{"log.jsonl"});
}

TEST_F(PathErrorsTest, StepLogOfANewRunStartsEmpty) {
  std::ofstream(dir / "log.jsonl") << "{\"step\":1,\"loss\":9}\n";
  StepLog log;
  log.open(at("log.jsonl"), 0);
  log.write({{"step", 1}, {"loss", 2.0}});
  EXPECT_EQ(lines(dir / "log.jsonl"),
            std::vector<std::string>{"{\"step\":1,\"loss\":2.0}"});
}

TEST_F(PathErrorsTest, StepLogOfAResumedRunKeepsStepsUpToTheCheckpoint) {
  // A run killed after step 5 (its last line torn), resumed from step 3.
  std::ofstream(dir / "log.jsonl")
      << "{\"step\":1,\"loss\":3}\n{\"step\":2,\"loss\":2.5}\n"
         "{\"step\":2,\"eval_loss\":2.9}\n{\"step\":3,\"loss\":2}\n"
         "{\"summary\":{\"last_step\":3}}\n{\"step\":4,\"loss\":1.8}\n"
         "{\"step\":5,\"loss\":1.7}\n{\"step\":6,\"lo";
  StepLog log;
  log.open(at("log.jsonl"), 3);
  log.write({{"step", 4}, {"loss", 1.75}});
  std::vector<std::string> got = lines(dir / "log.jsonl");
  ASSERT_EQ(got.size(), 6u);
  EXPECT_EQ(got[3], "{\"step\":3,\"loss\":2}");
  EXPECT_EQ(got[4], "{\"summary\":{\"last_step\":3}}");
  EXPECT_EQ(got[5], "{\"step\":4,\"loss\":1.75}");
  EXPECT_EQ(entries(dir), std::vector<std::string>{"log.jsonl"});
}

} // namespace
