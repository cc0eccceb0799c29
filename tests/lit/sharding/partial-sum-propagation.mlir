// RUN: strata-opt %s -strata-propagate-sharding="mesh-size=2" | FileCheck %s --check-prefix=PROP
// RUN: strata-opt %s -strata-propagate-sharding="mesh-size=2" -strata-partition-sharding="mesh-size=2 rank=0" | FileCheck %s

// A row-parallel matmul's result is a partial sum: its "whole" is no
// decision for the ops that read it, so the bias after it takes the split
// of the residual it is added to (sequence parallelism, GPT-2's c_proj
// bias): the partial sums are reduce-scattered onto the sequence, the bias
// is added on sequence shards and enters through replicate.

module {
  func.func @forward() -> tensor<f32> {
    %tokens = strata.input "tokens" : tensor<2x4xi32>
    %targets = strata.input "targets" : tensor<2x4xi32>
    %e = strata.param "embed.weight" : tensor<16x8xf32>
    %x = strata.embedding %e, %tokens {strata.sharding = [["", "tp", ""]]} : (tensor<16x8xf32>, tensor<2x4xi32>) -> tensor<2x4x8xf32>
    %w1 = strata.param "fc1.weight" {strata.sharding = [["", "tp"]]} : tensor<8x32xf32>
    %w2 = strata.param "fc2.weight" : tensor<32x8xf32>
    %b2 = strata.param "fc2.bias" : tensor<8xf32>
    %h = strata.matmul %x, %w1 : (tensor<2x4x8xf32>, tensor<8x32xf32>) -> tensor<2x4x32xf32>
    %y = strata.matmul %h, %w2 : (tensor<2x4x32xf32>, tensor<32x8xf32>) -> tensor<2x4x8xf32>
    %yb = strata.bias_add %y, %b2 : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
    %r = strata.add %x, %yb : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
    %loss = strata.cross_entropy %r, %targets : (tensor<2x4x8xf32>, tensor<2x4xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// PROP: strata.bias_add {{.*}}strata.sharding = {{\[\[}}"", "tp", ""]]

// CHECK: %[[B:.*]] = strata.param "fc2.bias"
// CHECK-NEXT: %[[BR:.*]] = strata.replicate %[[B]] {group = "tp"}
// CHECK: %[[Y:.*]] = strata.matmul {{.*}} -> tensor<2x4x8xf32>
// CHECK-NEXT: %[[RS:.*]] = strata.reduce_scatter %[[Y]] {axis = 1 : i64, group = "tp", size = 2 : i64} : (tensor<2x4x8xf32>) -> tensor<2x2x8xf32>
// CHECK-NEXT: %[[YB:.*]] = strata.bias_add %[[RS]], %[[BR]] {{.*}} -> tensor<2x2x8xf32>
// CHECK-NEXT: strata.add %{{.*}}, %[[YB]] {{.*}} -> tensor<2x2x8xf32>
// CHECK-NOT: strata.all_reduce
