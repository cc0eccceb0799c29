//===- CheckpointFilesTest.cpp - Checksums, publishing, the run lock ------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//

#include "runtime/io/CheckpointFiles.h"
#include "runtime/core/RunDirectory.h"
#include "runtime/support/Error.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <unistd.h>

using namespace strata::rt;
namespace fs = std::filesystem;

namespace {

class CheckpointFilesTest : public ::testing::Test {
protected:
  void SetUp() override {
    dir = fs::temp_directory_path() /
          ("strata-ckf-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  void TearDown() override { fs::remove_all(dir); }

  void write(const fs::path &path, const std::string &text) {
    std::ofstream(path, std::ios::binary) << text;
  }
  std::string read(const fs::path &path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  template <typename Fn> std::string errorOf(Fn fn) {
    try {
      fn();
    } catch (const RuntimeError &e) {
      return e.what();
    }
    return "";
  }

  fs::path dir;
};

TEST_F(CheckpointFilesTest, Crc32IsZlibs) {
  // zlib.crc32(b"123456789") == 0xcbf43926, the CRC-32 check value.
  EXPECT_EQ(crc32Of("123456789", 9), 0xcbf43926u);
}

TEST_F(CheckpointFilesTest, StateChecksumCatchesAnyChangedByte) {
  nlohmann::json state = {{"step", 12}, {"seed", 99}};
  std::string text = encodeCheckpointState(state, 2);
  std::vector<uint8_t> bytes(text.begin(), text.end());
  nlohmann::json back = decodeCheckpointState(bytes, "t.json");
  EXPECT_EQ(back, state);
  // "12" -> "13": still valid JSON, a different run state.
  size_t at = text.find("12");
  ASSERT_NE(at, std::string::npos);
  bytes[at + 1] = '3';
  std::string e = errorOf([&] { decodeCheckpointState(bytes, "t.json"); });
  EXPECT_NE(e.find("t.json: checksum mismatch"), std::string::npos) << e;
  EXPECT_NE(e.find("damaged"), std::string::npos) << e;
}

TEST_F(CheckpointFilesTest, VerifyNamesTheDamagedFile) {
  std::string data = "tensor bytes";
  write(dir / "model.safetensors", data);
  nlohmann::json state = {
      {"files", {{"model.safetensors", fileRecord(data.data(), data.size())}}}};
  EXPECT_EQ(errorOf([&] {
              verifyCheckpointFiles(dir.string(), state, "trainer.json");
            }),
            "");
  write(dir / "model.safetensors", "tensor bytEs");
  std::string e = errorOf(
      [&] { verifyCheckpointFiles(dir.string(), state, "trainer.json"); });
  EXPECT_NE(e.find("model.safetensors: checksum mismatch"), std::string::npos)
      << e;
  write(dir / "model.safetensors", "tensor");
  e = errorOf(
      [&] { verifyCheckpointFiles(dir.string(), state, "trainer.json"); });
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
  fs::remove(dir / "model.safetensors");
  e = errorOf(
      [&] { verifyCheckpointFiles(dir.string(), state, "trainer.json"); });
  EXPECT_NE(e.find("model.safetensors: cannot read"), std::string::npos) << e;
  // A name that leaves the directory is refused, not followed.
  state["files"]["../escape"] = fileRecord(data.data(), data.size());
  e = errorOf(
      [&] { verifyCheckpointFiles(dir.string(), state, "trainer.json"); });
  EXPECT_NE(e.find("plain file name"), std::string::npos) << e;
}

TEST_F(CheckpointFilesTest, PublishReplacesAnExistingDirectoryAtomically) {
  fs::create_directories(dir / "ck");
  write(dir / "ck" / "a", "old");
  fs::create_directories(dir / "ck.tmp-1");
  write(dir / "ck.tmp-1" / "a", "new");
  publishDirectory((dir / "ck.tmp-1").string(), (dir / "ck").string(),
                   "--save");
  EXPECT_EQ(read(dir / "ck" / "a"), "new");
  EXPECT_FALSE(fs::exists(dir / "ck.tmp-1"));
  fs::create_directories(dir / "fresh.tmp-2");
  publishDirectory((dir / "fresh.tmp-2").string(), (dir / "fresh").string(),
                   "--save");
  EXPECT_TRUE(fs::is_directory(dir / "fresh"));
}

TEST_F(CheckpointFilesTest, RunLockExcludesASecondWriterAndCleansUp) {
  fs::path run = dir / "run";
  fs::create_directories(run / "step-00000002");
  write(run / "step-00000002" / "trainer.json", "{}");
  fs::create_directories(run / "step-00000003.tmp-save");
  write(run / ".latest-77", "x");
  {
    RunDirectoryLock lock = RunDirectoryLock::acquire(run.string());
    EXPECT_FALSE(fs::exists(run / "step-00000003.tmp-save"));
    EXPECT_FALSE(fs::exists(run / ".latest-77"));
    EXPECT_TRUE(fs::exists(run / "step-00000002"));
    std::string e = errorOf([&] { RunDirectoryLock::acquire(run.string()); });
    EXPECT_NE(e.find("another run (pid " + std::to_string(::getpid())),
              std::string::npos)
        << e;
    EXPECT_NE(e.find("is saving checkpoints here"), std::string::npos) << e;
  }
  EXPECT_FALSE(fs::exists(run / ".lock"));
  // A directory the lock created and nothing was saved in goes again.
  {
    RunDirectoryLock lock = RunDirectoryLock::acquire((dir / "new").string());
    EXPECT_TRUE(fs::is_directory(dir / "new"));
  }
  EXPECT_FALSE(fs::exists(dir / "new"));
  std::string e = errorOf(
      [&] { RunDirectoryLock::acquire((dir / "no" / "such").string()); });
  EXPECT_NE(e.find("--save"), std::string::npos) << e;
}

} // namespace
