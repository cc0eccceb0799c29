//===- EmitDecode.cpp - @decode_step -> inference program -----------------===//
//
// The inference program is lowered by the same op lowering as training
// (ProgramEmitter::lowerOp), so generation runs the training forward's
// kernels with the same attributes; only the attention cores differ
// (strata.cached_attention, one kv_attention instruction each). Parameters
// are whole and persistent, with no gradient or optimizer state; key and
// value caches are persistent buffers the kv_attention kernel extends.
//
//===----------------------------------------------------------------------===//

#include "compiler/emit/ProgramEmitter.h"

using namespace mlir;
using namespace strata;
using namespace strata::emit;

namespace strata::emit {

LogicalResult ProgramEmitter::runDecode(rtf::ProgramBuilder &builder) {
  auto step = module.lookupSymbol<func::FuncOp>("decode_step");
  if (!step)
    return module.emitError("emitting an inference program needs "
                            "@decode_step (run strata-decode-step first)");
  decoding = true;
  for (ParamOp p : step.getOps<ParamOp>()) {
    if (params.count(p.getName()))
      continue;
    FailureOr<rtf::DType> dt = dtypeOf(p, p.getType());
    if (failed(dt))
      return failure();
    ParamInfo info;
    info.op = p;
    info.value = newBuffer(p.getName().str(),
                           cast<RankedTensorType>(p.getType()).getShape(), *dt,
                           /*persistent=*/true);
    params[p.getName()] = info;
    paramOrder.push_back(p.getName().str());
  }
  for (Operation &op : step.getBody().front())
    if (failed(lowerOp(&op)))
      return failure();
  if (tokens < 0 || loss < 0)
    return step.emitError("@decode_step must read the input 'tokens' and "
                          "return the logits");
  uint64_t persistentBytes = 0;
  try {
    placeBuffers(builder, loss, persistentBytes);
    for (const std::string &name : paramOrder) {
      ParamInfo &p = params[name];
      rtf::ParamDesc desc;
      desc.name = name;
      desc.value = buffers[p.value].emitted;
      desc.grad = rtf::kNoBuffer;
      StringRef init = p.op.getInit();
      desc.init = init == "ones"    ? rtf::InitKind::Ones
                  : init == "zeros" ? rtf::InitKind::Zeros
                                    : rtf::InitKind::Normal;
      desc.initStd = p.op.getInitStd().convertToDouble();
      builder.addParamWithBuffers(desc);
    }
    rtf::RankProgram &rank = builder.rankProgram();
    rank.tokens = buffers[tokens].emitted;
    if (positions >= 0)
      rank.positions = buffers[positions].emitted;
    rank.logits = buffers[loss].emitted;
    for (const PendingInstruction &inst : pending) {
      std::vector<uint32_t> ops;
      for (int b : inst.operands)
        ops.push_back(b < 0 ? rtf::kNoBuffer : buffers[b].emitted);
      builder.emit(rtf::SequenceKind::Microbatch, inst.opcode, ops, inst.ints,
                   inst.floats);
    }
  } catch (const rtf::RuntimeError &e) {
    return module.emitError("internal error while emitting the inference "
                            "program: ")
           << e.what();
  }
  return success();
}

} // namespace strata::emit

FailureOr<rtf::RankProgram>
strata::emitDecodeProgram(ModuleOp module, const rtf::ModelMeta &meta) {
  ParallelContext single;
  single.groupIds["world"] = 0;
  rtf::ModelMeta one = meta;
  one.worldSize = 1;
  try {
    rtf::ProgramBuilder builder(one, rtf::TrainConfig{});
    if (failed(ProgramEmitter(module, single).runDecode(builder)))
      return failure();
    return builder.rankProgram();
  } catch (const rtf::RuntimeError &e) {
    return module.emitError("internal error while emitting the inference "
                            "program: ")
               << e.what(),
           failure();
  }
}
