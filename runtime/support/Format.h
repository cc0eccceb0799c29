//===- Format.h - Numbers for people: counts, bytes, rates ----------------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// Header-only, no dependencies: the launcher and the compiler's reports
// print parameter counts, memory sizes and rates the same way, in a unit
// that keeps three significant digits visible (137K parameters, not
// "0.00B"; 5.3 MiB, not "0.01 GiB").
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_RUNTIME_SUPPORT_FORMAT_H
#define STRATA_RUNTIME_SUPPORT_FORMAT_H

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>

namespace strata {

namespace format_detail {
inline std::string scaled(double v, const char *unit) {
  char buf[48];
  double a = std::fabs(v);
  std::snprintf(buf, sizeof buf,
                a >= 100 || a == 0 ? "%.0f%s"
                : a >= 10          ? "%.1f%s"
                                   : "%.2f%s",
                v, unit);
  return buf;
}
} // namespace format_detail

/// 950 -> "950", 136960 -> "137K", 124439808 -> "124M", 1.75e11 -> "175B".
inline std::string formatCount(double n) {
  double a = std::fabs(n);
  if (a < 1e3)
    return format_detail::scaled(n, "");
  if (a < 1e6)
    return format_detail::scaled(n / 1e3, "K");
  if (a < 1e9)
    return format_detail::scaled(n / 1e6, "M");
  if (a < 1e12)
    return format_detail::scaled(n / 1e9, "B");
  return format_detail::scaled(n / 1e12, "T");
}

/// 136960 -> "136,960".
inline std::string formatGrouped(int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0)
      out += ',';
    out += digits[i];
  }
  return n < 0 ? "-" + out : out;
}

/// Binary units: "512 B", "5.30 MiB", "79.0 GiB".
inline std::string formatBytes(double bytes) {
  double a = std::fabs(bytes);
  if (a < 1024)
    return format_detail::scaled(bytes, " B");
  if (a < 1024.0 * 1024)
    return format_detail::scaled(bytes / 1024, " KiB");
  if (a < 1024.0 * 1024 * 1024)
    return format_detail::scaled(bytes / (1024.0 * 1024), " MiB");
  if (a < 1024.0 * 1024 * 1024 * 1024)
    return format_detail::scaled(bytes / (1024.0 * 1024 * 1024), " GiB");
  return format_detail::scaled(bytes / (1024.0 * 1024 * 1024 * 1024), " TiB");
}

/// FLOP/s in the unit that suits: "37.5 GFLOP/s", "145 TFLOP/s".
inline std::string formatFlops(double flopsPerS) {
  double a = std::fabs(flopsPerS);
  if (a < 1e12)
    return format_detail::scaled(flopsPerS / 1e9, " GFLOP/s");
  if (a < 1e15)
    return format_detail::scaled(flopsPerS / 1e12, " TFLOP/s");
  return format_detail::scaled(flopsPerS / 1e15, " PFLOP/s");
}

/// "1 rank", "2 ranks"; "1 micro-batch", "2 micro-batches".
inline std::string plural(int64_t n, const std::string &noun) {
  bool es = noun.size() >= 2 && (noun.compare(noun.size() - 2, 2, "ch") == 0 ||
                                 noun.compare(noun.size() - 2, 2, "sh") == 0 ||
                                 noun.back() == 's' || noun.back() == 'x');
  return std::to_string(n) + " " + noun + (n == 1 ? "" : es ? "es" : "s");
}

} // namespace strata

#endif // STRATA_RUNTIME_SUPPORT_FORMAT_H
