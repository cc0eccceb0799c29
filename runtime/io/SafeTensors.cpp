//===- SafeTensors.cpp - safetensors reader and writer --------------------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//

#include "runtime/io/SafeTensors.h"

#include "runtime/support/FileIO.h"

#include "runtime/format/Bundle.h"
#include "runtime/support/Error.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace strata::rt {

namespace {

using json = nlohmann::json;

/// Element size of a dtype name, 0 when unknown.
uint64_t elementBytes(const std::string &dtype) {
  if (dtype == "F64" || dtype == "I64" || dtype == "U64")
    return 8;
  if (dtype == "F32" || dtype == "I32" || dtype == "U32")
    return 4;
  if (dtype == "F16" || dtype == "BF16" || dtype == "I16" || dtype == "U16")
    return 2;
  if (dtype == "I8" || dtype == "U8" || dtype == "BOOL")
    return 1;
  return 0;
}

float halfToFloat(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t exponent = (h >> 10) & 0x1f;
  uint32_t mantissa = h & 0x3ff;
  uint32_t bits;
  if (exponent == 0) {
    if (mantissa == 0) {
      bits = sign;
    } else { // Subnormal: normalise.
      exponent = 127 - 15 + 1;
      while (!(mantissa & 0x400)) {
        mantissa <<= 1;
        --exponent;
      }
      bits = sign | (exponent << 23) | ((mantissa & 0x3ff) << 13);
    }
  } else if (exponent == 31) {
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else {
    bits = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

} // namespace

int64_t SafeTensorInfo::numElements() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

SafeTensorsFile SafeTensorsFile::open(const std::string &path) {
  SafeTensorsFile file;
  file.path_ = path;
  file.bytes_ = readRegularFile(path, "a .safetensors file");
  const auto &bytes = file.bytes_;
  if (bytes.size() < 8)
    fail(path, ": not a safetensors file (", bytes.size(),
         " bytes, no header)");
  // torch.save writes a zip archive (PK\3\4) or, before PyTorch 1.6, a
  // bare pickle (protocol 2..5): say so rather than misread its header.
  bool zip =
      bytes[0] == 'P' && bytes[1] == 'K' && bytes[2] == 3 && bytes[3] == 4;
  bool pickle = bytes[0] == 0x80 && bytes[1] >= 2 && bytes[1] <= 5;
  if (zip || pickle)
    fail(path,
         ": is a PyTorch pickle (torch.save, e.g. pytorch_model.bin), not a "
         "safetensors file; Strata does not unpickle files (unpickling can "
         "run code). Use the model's model.safetensors, or convert it: "
         "python3 -c \"import torch; from safetensors.torch import save_file; "
         "save_file({k: v.clone().contiguous() for k, v in torch.load('",
         path, "').items()}, 'model.safetensors')\"");
  uint64_t headerLength;
  std::memcpy(&headerLength, bytes.data(), 8);
  if (headerLength > bytes.size() - 8)
    fail(path, ": safetensors header length ", headerLength,
         " exceeds the file size; the file is truncated or not safetensors");
  file.dataStart_ = 8 + headerLength;
  uint64_t dataSize = bytes.size() - file.dataStart_;

  json header;
  // A repeated name would silently take the last entry: refuse it.
  std::vector<std::string> topKeys;
  try {
    header =
        json::parse(bytes.begin() + 8, bytes.begin() + file.dataStart_,
                    [&](int depth, json::parse_event_t event, json &parsed) {
                      if (depth == 1 && event == json::parse_event_t::key)
                        topKeys.push_back(parsed.get<std::string>());
                      return true;
                    });
  } catch (const json::exception &e) {
    fail(path, ": safetensors header is not valid JSON: ", e.what());
  }
  std::sort(topKeys.begin(), topKeys.end());
  auto dup = std::adjacent_find(topKeys.begin(), topKeys.end());
  if (dup != topKeys.end())
    fail(path, ": safetensors header names '", *dup,
         "' more than once; the file is malformed");
  if (!header.is_object())
    fail(path, ": safetensors header is not a JSON object");

  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string &name = it.key();
    const json &entry = it.value();
    if (name == "__metadata__") {
      if (!entry.is_object())
        fail(path, ": __metadata__ must be an object of strings");
      for (auto m = entry.begin(); m != entry.end(); ++m) {
        if (!m.value().is_string())
          fail(path, ": __metadata__ value '", m.key(), "' is not a string");
        file.metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    auto bad = [&](const std::string &what) {
      fail(path, ": tensor '", name, "': ", what);
    };
    if (!entry.is_object() || !entry.contains("dtype") ||
        !entry.contains("shape") || !entry.contains("data_offsets"))
      bad("needs dtype, shape and data_offsets");
    const json &dtype = entry["dtype"];
    const json &shape = entry["shape"];
    const json &offsets = entry["data_offsets"];
    if (!dtype.is_string() || !shape.is_array() || !offsets.is_array() ||
        offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
        !offsets[1].is_number_unsigned())
      bad("malformed dtype, shape or data_offsets");
    SafeTensorInfo info;
    info.name = name;
    info.dtype = dtype.get<std::string>();
    uint64_t esize = elementBytes(info.dtype);
    if (esize == 0)
      bad("unknown dtype " + info.dtype);
    __int128 count = 1;
    for (const json &d : shape) {
      if (!d.is_number_unsigned())
        bad("shape entries must be non-negative integers");
      info.shape.push_back(d.get<int64_t>());
      count *= d.get<uint64_t>();
      if (count > (__int128(1) << 56))
        bad("shape is too large");
    }
    info.begin = offsets[0].get<uint64_t>();
    info.end = offsets[1].get<uint64_t>();
    if (info.begin > info.end || info.end > dataSize)
      bad("data_offsets [" + std::to_string(info.begin) + ", " +
          std::to_string(info.end) + ") lie outside the " +
          std::to_string(dataSize) +
          "-byte data section; the file is truncated");
    if (uint64_t(count) * esize != info.end - info.begin)
      bad("holds " + std::to_string(info.end - info.begin) +
          " bytes but its shape and dtype need " +
          std::to_string(uint64_t(count) * esize));
    file.tensors_.push_back(std::move(info));
  }
  // Tensors may not share bytes, and nothing may follow the last one (the
  // format's own reader refuses both; either means a damaged file).
  std::vector<const SafeTensorInfo *> byOffset;
  for (const SafeTensorInfo &t : file.tensors_)
    byOffset.push_back(&t);
  std::sort(byOffset.begin(), byOffset.end(),
            [](const SafeTensorInfo *a, const SafeTensorInfo *b) {
              return a->begin != b->begin ? a->begin < b->begin
                                          : a->end < b->end;
            });
  uint64_t covered = 0;
  const SafeTensorInfo *previous = nullptr;
  for (const SafeTensorInfo *t : byOffset) {
    if (t->begin < covered && t->begin != t->end)
      fail(path, ": tensors '", previous->name, "' and '", t->name,
           "' overlap (data_offsets [", previous->begin, ", ", previous->end,
           ") and [", t->begin, ", ", t->end, ")); the file is malformed");
    if (t->end > covered) {
      covered = t->end;
      previous = t;
    }
  }
  if (covered != dataSize)
    fail(path, ": ", dataSize - covered,
         " bytes after the last tensor's data; the file is malformed or "
         "was appended to");
  return file;
}

const SafeTensorInfo *SafeTensorsFile::find(const std::string &name) const {
  for (const SafeTensorInfo &t : tensors_)
    if (t.name == name)
      return &t;
  return nullptr;
}

std::vector<float> SafeTensorsFile::readF32(const SafeTensorInfo &info) const {
  const uint8_t *p = bytes_.data() + dataStart_ + info.begin;
  int64_t n = info.numElements();
  std::vector<float> out(n);
  if (info.dtype == "F32") {
    std::memcpy(out.data(), p, n * 4);
  } else if (info.dtype == "F64") {
    for (int64_t i = 0; i < n; ++i) {
      double v;
      std::memcpy(&v, p + i * 8, 8);
      out[i] = float(v);
    }
  } else if (info.dtype == "F16" || info.dtype == "BF16") {
    for (int64_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, p + i * 2, 2);
      if (info.dtype == "F16") {
        out[i] = halfToFloat(h);
      } else {
        uint32_t bits = uint32_t(h) << 16;
        std::memcpy(&out[i], &bits, 4);
      }
    }
  } else {
    fail(path_, ": tensor '", info.name, "' has dtype ", info.dtype,
         "; a floating-point tensor (F32, F64, F16, BF16) is needed");
  }
  return out;
}

std::vector<int32_t>
SafeTensorsFile::readI32(const SafeTensorInfo &info) const {
  if (info.dtype != "I32")
    fail(path_, ": tensor '", info.name, "' has dtype ", info.dtype,
         "; I32 is needed");
  std::vector<int32_t> out(info.numElements());
  std::memcpy(out.data(), bytes_.data() + dataStart_ + info.begin,
              out.size() * 4);
  return out;
}

std::vector<uint8_t>
encodeSafeTensors(const std::vector<SafeTensorToWrite> &tensors,
                  const std::map<std::string, std::string> &metadata) {
  json header = json::object();
  if (!metadata.empty())
    header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const SafeTensorToWrite &t : tensors) {
    uint64_t esize = elementBytes(t.dtype);
    int64_t n = 1;
    for (int64_t d : t.shape)
      n *= d;
    if (esize == 0 || uint64_t(n) * esize != t.bytes)
      fail("internal error: tensor '", t.name,
           "' has a size that does not match its shape");
    header[t.name] = {{"dtype", t.dtype},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + t.bytes}}};
    offset += t.bytes;
  }
  std::string text = header.dump();
  // Pad with spaces so the data section starts 8-byte aligned.
  while ((8 + text.size()) % 8 != 0)
    text.push_back(' ');
  std::vector<uint8_t> out(8);
  uint64_t length = text.size();
  std::memcpy(out.data(), &length, 8);
  out.insert(out.end(), text.begin(), text.end());
  out.reserve(out.size() + offset);
  for (const SafeTensorToWrite &t : tensors) {
    const uint8_t *p = static_cast<const uint8_t *>(t.data);
    out.insert(out.end(), p, p + t.bytes);
  }
  return out;
}

void writeSafeTensors(const std::string &path,
                      const std::vector<SafeTensorToWrite> &tensors,
                      const std::map<std::string, std::string> &metadata) {
  writeFileAtomically(path, encodeSafeTensors(tensors, metadata),
                      /*executable=*/false);
}

} // namespace strata::rt
