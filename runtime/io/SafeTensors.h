//===- SafeTensors.h - safetensors reader and writer ----------------------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// The format (huggingface/safetensors): u64 little-endian header length N,
// N bytes of JSON {name: {dtype, shape, data_offsets: [begin, end]},
// "__metadata__": {string: string}}, then the data; offsets are relative to
// the end of the header. The reader validates every offset, length and shape
// before touching data; errors name the file and the tensor.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_RUNTIME_IO_SAFETENSORS_H
#define STRATA_RUNTIME_IO_SAFETENSORS_H

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace strata::rt {

struct SafeTensorInfo {
  std::string name;
  std::string dtype; ///< "F32", "I32", "F64", "F16", "BF16", ...
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0; ///< Byte range within the data section.
  int64_t numElements() const;
};

class SafeTensorsFile {
public:
  /// Reads and validates the file. Throws RuntimeError naming the file.
  static SafeTensorsFile open(const std::string &path);

  const std::string &path() const { return path_; }
  const std::vector<SafeTensorInfo> &tensors() const { return tensors_; }
  const std::map<std::string, std::string> &metadata() const {
    return metadata_;
  }
  /// nullptr when absent.
  const SafeTensorInfo *find(const std::string &name) const;

  /// Values converted to f32 (from F32, F64, F16 or BF16).
  std::vector<float> readF32(const SafeTensorInfo &info) const;
  /// Values of an I32 tensor.
  std::vector<int32_t> readI32(const SafeTensorInfo &info) const;

private:
  std::string path_;
  std::vector<uint8_t> bytes_;
  uint64_t dataStart_ = 0;
  std::vector<SafeTensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

struct SafeTensorToWrite {
  std::string name;
  std::string dtype; ///< "F32", "I32" or "F64".
  std::vector<int64_t> shape;
  const void *data;
  uint64_t bytes;
};

/// Serialises tensors (in the given order) and metadata.
std::vector<uint8_t>
encodeSafeTensors(const std::vector<SafeTensorToWrite> &tensors,
                  const std::map<std::string, std::string> &metadata);

/// Writes a safetensors file through a temporary sibling and a rename.
void writeSafeTensors(const std::string &path,
                      const std::vector<SafeTensorToWrite> &tensors,
                      const std::map<std::string, std::string> &metadata);

} // namespace strata::rt

#endif // STRATA_RUNTIME_IO_SAFETENSORS_H
