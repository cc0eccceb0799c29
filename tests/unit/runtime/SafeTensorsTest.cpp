//===- SafeTensorsTest.cpp - safetensors round trip and bad files ---------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//

#include "runtime/io/SafeTensors.h"
#include "runtime/support/Error.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <unistd.h>

using namespace strata::rt;
namespace fs = std::filesystem;

namespace {

class SafeTensorsTest : public ::testing::Test {
protected:
  void SetUp() override {
    dir =
        fs::temp_directory_path() / ("strata-st-" + std::to_string(::getpid()));
    fs::create_directories(dir);
  }
  void TearDown() override { fs::remove_all(dir); }

  std::string writeRaw(const std::string &name,
                       const std::vector<uint8_t> &bytes) {
    std::string path = (dir / name).string();
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char *>(bytes.data()), bytes.size());
    return path;
  }
  /// A file with a hand-written header and `dataBytes` zero data bytes.
  std::string withHeader(const std::string &header, size_t dataBytes) {
    std::vector<uint8_t> bytes(8);
    uint64_t n = header.size();
    std::memcpy(bytes.data(), &n, 8);
    bytes.insert(bytes.end(), header.begin(), header.end());
    bytes.resize(bytes.size() + dataBytes, 0);
    return writeRaw("hand.safetensors", bytes);
  }
  std::string openError(const std::string &path) {
    try {
      SafeTensorsFile::open(path);
    } catch (const RuntimeError &e) {
      return e.what();
    }
    return "";
  }

  fs::path dir;
};

TEST_F(SafeTensorsTest, RoundTripF32AndI32WithMetadata) {
  std::vector<float> w = {1.5f, -2.0f, 3.25f, 0.0f, 1e-30f, -7.0f};
  std::vector<int32_t> ids = {7, -1, 42};
  std::string path = (dir / "rt.safetensors").string();
  writeSafeTensors(path,
                   {{"h.0.attn.c_attn.weight", "F32", {2, 3}, w.data(), 24},
                    {"ids", "I32", {3}, ids.data(), 12}},
                   {{"format", "pt"}});
  SafeTensorsFile file = SafeTensorsFile::open(path);
  ASSERT_EQ(file.tensors().size(), 2u);
  const SafeTensorInfo *t = file.find("h.0.attn.c_attn.weight");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(file.readF32(*t), w);
  EXPECT_EQ(file.readI32(*file.find("ids")), ids);
  EXPECT_EQ(file.metadata().at("format"), "pt");
  EXPECT_EQ(file.find("nope"), nullptr);
  EXPECT_THROW(file.readI32(*t), RuntimeError);
}

TEST_F(SafeTensorsTest, ReadsF64F16AndBF16AsF32) {
  double d[2] = {0.5, -3.0};
  uint16_t half[3] = {0x3c00, 0xc000, 0x0001}; // 1, -2, smallest subnormal
  uint16_t bf[2] = {0x3f80, 0x4049};           // 1, 3.140625
  std::string path = (dir / "mixed.safetensors").string();
  writeSafeTensors(path, {}, {});
  std::vector<uint8_t> bytes = encodeSafeTensors({{"d", "F64", {2}, d, 16},
                                                  {"h", "F16", {3}, half, 6},
                                                  {"b", "BF16", {2}, bf, 4}},
                                                 {});
  path = writeRaw("mixed.safetensors", bytes);
  SafeTensorsFile file = SafeTensorsFile::open(path);
  EXPECT_EQ(file.readF32(*file.find("d")), (std::vector<float>{0.5f, -3.0f}));
  std::vector<float> h = file.readF32(*file.find("h"));
  EXPECT_EQ(h[0], 1.0f);
  EXPECT_EQ(h[1], -2.0f);
  EXPECT_FLOAT_EQ(h[2], 5.9604645e-08f);
  EXPECT_EQ(file.readF32(*file.find("b")),
            (std::vector<float>{1.0f, 3.140625f}));
}

TEST_F(SafeTensorsTest, BadFilesNameTheFileAndTensor) {
  EXPECT_NE(openError((dir / "missing").string()).find("cannot open"),
            std::string::npos);
  EXPECT_NE(openError(writeRaw("tiny", {1, 2, 3})).find("tiny"),
            std::string::npos);
  // Header length beyond the file.
  std::vector<uint8_t> big(16, 0);
  big[0] = 0xff;
  EXPECT_NE(openError(writeRaw("big", big)).find("exceeds"), std::string::npos);
  EXPECT_NE(openError(withHeader("{not json", 0)).find("JSON"),
            std::string::npos);
  std::string e = openError(withHeader(
      R"({"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}})",
      8));
  EXPECT_NE(e.find("'w'"), std::string::npos) << e;
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
  e = openError(withHeader(
      R"({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", 8));
  EXPECT_NE(e.find("need 12"), std::string::npos) << e;
  e = openError(withHeader(
      R"({"w": {"dtype": "Q7", "shape": [1], "data_offsets": [0, 4]}})", 4));
  EXPECT_NE(e.find("unknown dtype"), std::string::npos) << e;
  e = openError(withHeader(R"({"w": {"dtype": "F32"}})", 0));
  EXPECT_NE(e.find("data_offsets"), std::string::npos) << e;
}

// The format's own reader refuses these; so must Strata's, since each would
// otherwise load silently (the last of two entries, bytes shared by two
// tensors, data appended after the last tensor).
TEST_F(SafeTensorsTest, RefusesDuplicateNamesOverlapsAndTrailingBytes) {
  std::string e = openError(withHeader(
      R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},)"
      R"( "w": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
      8));
  EXPECT_NE(e.find("names 'w' more than once"), std::string::npos) << e;
  e = openError(withHeader(
      R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},)"
      R"( "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
      12));
  EXPECT_NE(e.find("'a' and 'b' overlap"), std::string::npos) << e;
  e = openError(withHeader(
      R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", 12));
  EXPECT_NE(e.find("8 bytes after the last tensor"), std::string::npos) << e;
  // Zero-size tensors share offsets legitimately.
  e = openError(withHeader(
      R"({"a": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]},)"
      R"( "b": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})",
      4));
  EXPECT_EQ(e, "");
}

TEST_F(SafeTensorsTest, WriteIsAtomic) {
  std::string path = (dir / "keep.safetensors").string();
  float v = 1.0f;
  writeSafeTensors(path, {{"a", "F32", {1}, &v, 4}}, {});
  // A write that fails (missing directory) leaves nothing half-written.
  EXPECT_THROW(writeSafeTensors((dir / "no/such/x").string(),
                                {{"a", "F32", {1}, &v, 4}}, {}),
               RuntimeError);
  EXPECT_EQ(SafeTensorsFile::open(path).tensors().size(), 1u);
}

} // namespace
