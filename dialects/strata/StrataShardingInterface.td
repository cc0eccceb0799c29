//===- StrataShardingInterface.td - sharding rules per op ----*- tablegen -*-===//
//
// How an op's operand and result dimensions correspond, in Shardy's factor
// form. Kept apart from StrataInterfaces.td: the rules are attached to the
// ops as external models (StrataShardingRules.cpp), so adding or changing a
// rule rebuilds one file rather than every user of the op definitions.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_SHARDING_INTERFACE_TD
#define STRATA_SHARDING_INTERFACE_TD

include "mlir/IR/OpBase.td"

def Strata_ShardingRuleOpInterface : OpInterface<"ShardingRuleOpInterface"> {
  let description = [{
    The op's sharding rule: a list of factors (each with a size), and for
    every operand and result dimension the factors it is made of, major
    first. A dimension with no factor cannot be sharded (the op needs it
    whole, e.g. the normalised dimension of layer_norm). A factor that
    appears in operands but in no result is a reduction factor: sharding it
    leaves each member a partial sum (the contraction dimension of matmul).
    `strata-propagate-sharding` and `strata-partition-sharding` read nothing
    else about an op.
  }];
  let cppNamespace = "::strata";
  let methods = [
    InterfaceMethod<"The op's factors and how its dimensions use them.",
      "::strata::ShardingRule", "getShardingRule", (ins)>,
  ];
}

#endif // STRATA_SHARDING_INTERFACE_TD
