//===- Trainer.cpp - Runs training steps of one rank's program ------------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// Execution of a step and the services collective kernels use. Parameter
// initialisation, --init and checkpoints are in Checkpoint.cpp.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/Trainer.h"

#include "runtime/core/LrSchedule.h"
#include "runtime/support/Error.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <unistd.h>

namespace strata::rt {

/// The rank's communicators, request slots and input rows, as seen by the
/// collective and load_batch kernels.
class Trainer::Services final : public StepServices {
public:
  Services(CommBackend &comms, const Program &program, uint32_t rank)
      : world_(&comms.world()), meta_(program.meta),
        dataRowStart_(program.ranks[rank].dataRowStart),
        slots_(kNumRequestSlots) {
    // Collective over the world, in table order: every rank takes part in
    // every split, members get a communicator.
    for (const ProcessGroup &g : program.groups)
      groups_.push_back(comms.createGroup(g));
    int64_t rows = meta_.microBatch * meta_.seqLen;
    scratchTokens_.resize(rows);
    scratchTargets_.resize(rows);
  }

  /// The rows of the coming sequence runs are samples firstSample + row
  /// of `data` in `order` with `key`.
  void beginBatch(const TokenData *data, int64_t firstSample, DataOrder order,
                  uint64_t key) {
    data_ = data;
    firstSample_ = firstSample;
    order_ = order;
    key_ = key;
  }

  Communicator &group(int64_t index) override {
    Communicator *c = groups_.at(index).get();
    if (!c)
      fail("internal error: collective on process group ", index,
           ", which this rank is not in");
    return *c;
  }
  Communicator &world() override { return *world_; }

  void park(int64_t slot, std::unique_ptr<CommRequest> request) override {
    if (slots_.at(slot))
      fail("internal error: request slot ", slot, " is already in use");
    slots_[slot] = std::move(request);
    ++pending_;
  }
  void wait(int64_t slot) override {
    std::unique_ptr<CommRequest> &r = slots_.at(slot);
    if (!r)
      fail("internal error: wait on empty request slot ", slot);
    r->wait();
    r.reset();
    --pending_;
  }
  bool hasPending() const override { return pending_ > 0; }
  void progress() override {
    // Each test lets MPI advance every outstanding operation, not just the
    // one tested; one call per instruction is enough.
    for (auto &r : slots_)
      if (r) {
        r->test();
        break;
      }
  }
  void loadBatch(int64_t microbatch, int32_t *tokens, int32_t *targets,
                 int32_t *positions) override {
    if (!data_)
      fail("internal error: load_batch outside a step");
    if (tokens || targets)
      data_->fillSamples(firstSample_ + dataRowStart_ +
                             microbatch * meta_.microBatch,
                         meta_.microBatch, order_, key_,
                         tokens ? tokens : scratchTokens_.data(),
                         targets ? targets : scratchTargets_.data());
    if (positions)
      for (int64_t i = 0; i < meta_.microBatch * meta_.seqLen; ++i)
        positions[i] = int32_t(i % meta_.seqLen);
  }

private:
  Communicator *world_;
  ModelMeta meta_;
  int64_t dataRowStart_;
  std::vector<std::unique_ptr<Communicator>> groups_;
  std::vector<std::unique_ptr<CommRequest>> slots_;
  int pending_ = 0;
  const TokenData *data_ = nullptr;
  int64_t firstSample_ = 0;
  DataOrder order_ = DataOrder::Random;
  uint64_t key_ = 0;
  std::vector<int32_t> scratchTokens_, scratchTargets_;
};

Trainer::Trainer(Program program, uint32_t rank, std::unique_ptr<Device> device,
                 uint64_t seed, std::shared_ptr<CommBackend> comms)
    : program_(std::move(program)), rank_(rank), device_(std::move(device)),
      seed_(seed), comms_(std::move(comms)) {
  if (rank_ >= program_.ranks.size())
    fail("rank ", rank_, " is outside the program's world size ",
         program_.ranks.size());
  if (!comms_) {
    if (program_.meta.worldSize != 1)
      fail("this program was compiled for ", program_.meta.worldSize,
           " ranks (plan: ", program_.meta.planDescription,
           "); launch it with mpirun -np ", program_.meta.worldSize);
    comms_ = createSingleRankBackend();
  }
  if (uint32_t(comms_->worldSize()) != program_.meta.worldSize ||
      uint32_t(comms_->worldRank()) != rank_)
    fail("internal error: trainer for rank ", rank_, " of ",
         program_.meta.worldSize, " on a communicator of rank ",
         comms_->worldRank(), " of ", comms_->worldSize());
  // Communicators first: group creation is collective, and a rank that
  // failed to allocate its arena must not leave the others inside a split.
  services_ = std::make_unique<Services>(*comms_, program_, rank_);
  device_->prepare(rankProgram());
  std::vector<uint32_t> lossRanks = program_.effectiveLossRanks();
  isLossRank_ =
      std::find(lossRanks.begin(), lossRanks.end(), rank_) != lossRanks.end();
  int64_t rows = program_.meta.microBatch * program_.meta.seqLen;
  tokenRows_.resize(rows);
  targetRows_.resize(rows);
  positionRows_.resize(rows);
}

Trainer::Trainer(Trainer &&) noexcept = default;
Trainer &Trainer::operator=(Trainer &&) noexcept = default;
Trainer::~Trainer() = default;

std::vector<float> Trainer::readF32(uint32_t buffer) const {
  const BufferDesc &b = rankProgram().buffers.at(buffer);
  std::vector<float> values(b.numElements());
  device_->download(b.offset, values.data(), values.size() * 4);
  return values;
}

void Trainer::download(uint32_t buffer, void *dst) const {
  const BufferDesc &b = rankProgram().buffers.at(buffer);
  device_->download(b.offset, dst, b.byteSize());
}

void Trainer::upload(uint32_t buffer, const void *src) {
  const BufferDesc &b = rankProgram().buffers.at(buffer);
  device_->upload(b.offset, src, b.byteSize());
}

void Trainer::writeF32(uint32_t buffer, const std::vector<float> &values) {
  const BufferDesc &b = rankProgram().buffers.at(buffer);
  if (int64_t(values.size()) != b.numElements())
    fail("internal error: writing ", values.size(), " values into '", b.name,
         "'");
  device_->upload(b.offset, values.data(), values.size() * 4);
}

namespace {

/// This process's resident set size in bytes (0 where /proc is missing).
double residentBytes() {
  FILE *f = std::fopen("/proc/self/statm", "r");
  if (!f)
    return 0.0;
  long long pages = 0, resident = 0;
  int n = std::fscanf(f, "%lld %lld", &pages, &resident);
  std::fclose(f);
  return n == 2 ? double(resident) * double(::sysconf(_SC_PAGESIZE)) : 0.0;
}

} // namespace

double Trainer::runBatch(SequenceKind microbatch, SequenceKind last,
                         SequenceKind schedule, const ExecContext &ctx) {
  const ModelMeta &m = program_.meta;
  const RankProgram &rp = rankProgram();
  auto readLoss = [&] {
    float loss;
    device_->download(rp.buffers[rp.loss].offset, &loss, 4);
    return double(loss);
  };
  if (!rp.sequence(schedule).empty()) {
    device_->run(schedule, ctx);
    return isLossRank_ ? readLoss() : 0.0;
  }
  bool hasLast = !rp.sequence(last).empty();
  double lossSum = 0.0;
  for (int64_t mb = 0; mb < m.numMicrobatches; ++mb) {
    bool needRows = rp.tokens != kNoBuffer || rp.targets != kNoBuffer;
    if (needRows || rp.positions != kNoBuffer)
      services_->loadBatch(mb, needRows ? tokenRows_.data() : nullptr,
                           needRows ? targetRows_.data() : nullptr,
                           rp.positions != kNoBuffer ? positionRows_.data()
                                                     : nullptr);
    auto upload = [&](uint32_t id, const std::vector<int32_t> &rows) {
      if (id != kNoBuffer)
        device_->upload(rp.buffers[id].offset, rows.data(), rows.size() * 4);
    };
    upload(rp.tokens, tokenRows_);
    upload(rp.targets, targetRows_);
    upload(rp.positions, positionRows_);
    bool isLast = mb + 1 == m.numMicrobatches;
    device_->run(isLast && hasLast ? last : microbatch, ctx);
    if (isLossRank_)
      lossSum += readLoss();
  }
  return lossSum / double(m.numMicrobatches);
}

StepStats Trainer::runStep(const TokenData &data, bool stopRequested) {
  const ModelMeta &m = program_.meta;
  const RankProgram &rp = rankProgram();
  auto start = std::chrono::steady_clock::now();
  double blockedBefore = comms_->blockedSeconds();
  StepStats stats;
  stats.step = step_;
  stats.lr = learningRate(program_.train, step_);
  services_->beginBatch(&data, dataPosition_, dataOrder_,
                        sampleKey(seed_, SampleStream::Train));
  ExecContext ctx{step_, stats.lr, services_.get()};

  device_->run(SequenceKind::StepBegin, ctx);
  double localLoss =
      runBatch(SequenceKind::Microbatch, SequenceKind::LastMicrobatch,
               SequenceKind::Schedule, ctx);
  device_->run(SequenceKind::Update, ctx);
  if (services_->hasPending())
    fail("internal error: requests still pending at the end of step ", step_);

  double sumsq = -1.0;
  if (rp.gradSumSq != kNoBuffer)
    device_->download(rp.buffers[rp.gradSumSq].offset, &sumsq, 8);
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  // This rank's busy time: the step less what it spent waiting for others.
  double busy =
      std::max(0.0, seconds - (comms_->blockedSeconds() - blockedBefore));
  // Every rank takes part, loss rank or not, so no rank waits alone. The
  // grad norm is already global where present; max picks it up from any
  // rank that has one. The stop wish and the memory ride along; every
  // rank's busy time rides in its own slot of the sum.
  Communicator &world = comms_->world();
  const uint32_t W = worldSize();
  std::vector<double> sum(1 + W, 0.0);
  sum[0] = isLossRank_ ? localLoss : 0.0;
  sum[1 + rank_] = busy;
  double max[4] = {seconds, sumsq, stopRequested ? 1.0 : 0.0, residentBytes()};
  world.allReduce(sum.data(), int64_t(sum.size()), DType::F64, ReduceOp::Sum);
  world.allReduce(max, 4, DType::F64, ReduceOp::Max);
  stats.loss = sum[0] / double(program_.effectiveLossRanks().size());
  auto busiest = std::max_element(sum.begin() + 1, sum.end());
  stats.slowestRank = uint32_t(busiest - (sum.begin() + 1));
  stats.slowestRankLag =
      *busiest - *std::min_element(sum.begin() + 1, sum.end());
  stats.seconds = max[0];
  if (max[1] >= 0)
    stats.gradNorm = std::sqrt(max[1]);
  stats.stopRequested = max[2] > 0;
  stats.memoryBytes = max[3];
  stats.tokens = m.globalBatch * m.seqLen;
  ++step_;
  dataPosition_ += m.globalBatch;
  return stats;
}

EvalStats Trainer::evaluate(const TokenData &data, int64_t batches) {
  const ModelMeta &m = program_.meta;
  const RankProgram &rp = rankProgram();
  if (rp.sequence(SequenceKind::Eval).empty() &&
      rp.sequence(SequenceKind::EvalSchedule).empty())
    fail("this program has no evaluation sequence (it was compiled by an "
         "older strata); recompile it to evaluate");
  auto start = std::chrono::steady_clock::now();
  ExecContext ctx{step_, 0.0, services_.get()};
  double localSum = 0.0;
  for (int64_t b = 0; b < batches; ++b) {
    // The same windows at every evaluation, so the losses compare.
    services_->beginBatch(&data, b * m.globalBatch, dataOrder_,
                          sampleKey(seed_, SampleStream::Eval));
    localSum += runBatch(SequenceKind::Eval, SequenceKind::Eval,
                         SequenceKind::EvalSchedule, ctx);
    if (services_->hasPending())
      fail("internal error: requests still pending after evaluation");
  }
  double sum[1] = {isLossRank_ ? localSum : 0.0};
  comms_->world().allReduce(sum, 1, DType::F64, ReduceOp::Sum);
  EvalStats stats;
  stats.batches = batches;
  stats.loss = sum[0] / double(program_.effectiveLossRanks().size()) /
               double(std::max<int64_t>(batches, 1));
  stats.tokens = batches * m.globalBatch * m.seqLen;
  stats.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  return stats;
}

} // namespace strata::rt
