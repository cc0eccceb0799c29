//===- StrataInterfaces.td - strata op interfaces -----------*- tablegen -*-===//
//
// Per-op facts that passes query without knowing the op: cost now, gradient
// rules with autodiff, sharding rules with the partitioner.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_INTERFACES_TD
#define STRATA_INTERFACES_TD

include "mlir/IR/OpBase.td"

def Strata_CostOpInterface : OpInterface<"CostOpInterface"> {
  let description = [{
    The arithmetic cost of one execution of the op: floating-point operations
    (a multiply-add counts as two) and the bytes it must read and write at
    least once. The planner's roofline model and `strata-summarize-model` use
    these numbers.
  }];
  let cppNamespace = "::strata";
  let methods = [
    InterfaceMethod<"Floating-point operations of the forward computation.",
      "int64_t", "getFlops", (ins)>,
    InterfaceMethod<"Bytes read plus bytes written, each tensor once.",
      "int64_t", "getBytesAccessed", (ins), [{}], [{
        int64_t bytes = 0;
        auto count = [&](::mlir::Type t) {
          auto tt = ::llvm::cast<::mlir::RankedTensorType>(t);
          bytes += tt.getNumElements() *
                   ((tt.getElementTypeBitWidth() + 7) / 8);
        };
        for (::mlir::Type t : $_op->getOperandTypes()) count(t);
        for (::mlir::Type t : $_op->getResultTypes()) count(t);
        return bytes;
      }]>,
  ];
}

def Strata_DifferentiableOpInterface : OpInterface<"DifferentiableOpInterface"> {
  let description = [{
    The op's gradient rule (reverse mode). Given the gradients of the loss
    with respect to the op's results, builds ops that compute the gradients
    with respect to its operands, at the builder's insertion point.
    `resultGrads[i]` is null when no gradient flows into result `i`;
    `operandGrads` receives one value per operand, null for operands that
    have no gradient (token ids, targets). The autodiff pass
    (passes/autodiff/Autodiff.cpp) sums the gradients of values with
    several uses; every rule is checked against finite differences in
    tests/unit/autodiff.
  }];
  let cppNamespace = "::strata";
  let methods = [
    InterfaceMethod<"Builds the operand gradients.",
      "::llvm::LogicalResult", "buildGradients",
      (ins "::mlir::OpBuilder &":$builder,
           "::mlir::ArrayRef<::mlir::Value>":$resultGrads,
           "::llvm::SmallVectorImpl<::mlir::Value> &":$operandGrads)>,
  ];
}

#endif // STRATA_INTERFACES_TD
