//===- Generate.cpp - BIN --generate: sampling from trained weights -------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// One process runs the program's inference program (whatever plan the
// training program has): weights from --init (a weights file or any
// checkpoint directory) or --resume, a prompt as token ids or as text with
// GPT-2's tokenizer files, then temperature / top-k sampling with a seed.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/Generator.h"
#include "runtime/io/CheckpointReader.h"
#include "runtime/io/Gpt2Tokenizer.h"
#include "runtime/launcher/Launcher.h"
#include "runtime/support/Error.h"

#include <chrono>
#include <cstdio>
#include <sstream>

namespace strata::rt {

namespace {

std::vector<int64_t> parseIds(const std::string &text) {
  std::vector<int64_t> ids;
  std::string item;
  std::stringstream in(text);
  while (std::getline(in, item, ',')) {
    size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception &) {
      used = 0;
    }
    while (used < item.size() && item[used] == ' ')
      ++used;
    if (used != item.size() || item.empty() || v < 0)
      fail("--prompt-ids ", text,
           ": expected token ids separated by commas, e.g. 464,3290,11");
    ids.push_back(v);
  }
  return ids;
}

} // namespace

int runGenerate(const Program &program, const Options &opt) {
  if (!opt.prompt.empty() && !opt.promptIds.empty())
    fail("--prompt and --prompt-ids both given; pass one");
  if (!opt.prompt.empty() && opt.tokenizer.empty())
    fail("--prompt needs --tokenizer DIR (GPT-2's vocab.json and merges.txt, "
         "or encoder.json and vocab.bpe); or pass --prompt-ids");
  if (opt.init.empty() && opt.resume.empty())
    fail("--generate needs the trained weights: --init FILE.safetensors or "
         "a checkpoint directory, or --resume DIR");
  std::optional<Gpt2Tokenizer> tokenizer;
  if (!opt.tokenizer.empty()) {
    try {
      tokenizer = Gpt2Tokenizer::load(opt.tokenizer);
    } catch (const RuntimeError &e) {
      fail("--tokenizer ", e.what());
    }
    if (tokenizer->vocabSize() > program.meta.vocab)
      fail("--tokenizer ", opt.tokenizer, ": has ", tokenizer->vocabSize(),
           " token ids, more than the model's vocab of ", program.meta.vocab);
  }
  std::vector<int64_t> prompt;
  if (!opt.promptIds.empty())
    prompt = parseIds(opt.promptIds);
  else if (!opt.prompt.empty())
    prompt = tokenizer->encode(opt.prompt);
  if (prompt.empty())
    fail("--generate needs a prompt: --prompt TEXT (with --tokenizer) or "
         "--prompt-ids IDS");
  for (int64_t id : prompt)
    if (id >= program.meta.vocab)
      fail("--prompt-ids: token ", id, " is not below the model's vocab of ",
           program.meta.vocab);

  Generator generator(program, createDevice(program.target));
  const std::string &weights = opt.resume.empty() ? opt.init : opt.resume;
  const char *flag = opt.resume.empty() ? "--init" : "--resume";
  try {
    generator.loadWeights(opt.resume.empty()
                              ? weights
                              : resolveCheckpointPath(weights, "--resume"));
  } catch (const RuntimeError &e) {
    std::string message = e.what();
    fail(message.rfind(flag, 0) == 0 ? "" : std::string(flag) + " ", message);
  }
  SamplingOptions sampling;
  sampling.temperature = opt.temperature;
  sampling.topK = opt.topK;
  sampling.seed = opt.seed >= 0 ? uint64_t(opt.seed) : program.meta.seed;
  auto start = std::chrono::steady_clock::now();
  std::vector<int64_t> tokens =
      generator.generate(prompt, opt.generate, sampling);
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  if (tokenizer) {
    std::string text = tokenizer->decode(tokens);
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fputc('\n', stdout);
  }
  if (!tokenizer || opt.printIds) {
    for (size_t i = 0; i < tokens.size(); ++i)
      std::printf("%s%lld", i ? " " : "", (long long)tokens[i]);
    std::printf("\n");
  }
  std::fflush(stdout);
  std::fprintf(stderr,
               "strata: generated %lld tokens after a %zu-token prompt in "
               "%.2f s (%.1f tokens/s; temperature %g, top-k %lld, seed "
               "%llu)\n",
               (long long)opt.generate, prompt.size(), seconds,
               seconds > 0 ? double(tokens.size()) / seconds : 0.0,
               sampling.temperature, (long long)sampling.topK,
               (unsigned long long)sampling.seed);
  return 0;
}

} // namespace strata::rt
