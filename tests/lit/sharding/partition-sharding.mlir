// RUN: strata-opt %s -strata-propagate-sharding="mesh-size=2" -strata-partition-sharding="mesh-size=2 rank=1" | FileCheck %s --check-prefix=TP
// RUN: strata-opt %s -strata-propagate-sharding="mesh-size=2" -strata-partition-sharding="mesh-size=2 rank=1" -strata-autodiff | FileCheck %s --check-prefix=GRAD

// Megatron's column -> row block from one decision (fc1 split by columns):
// x enters through replicate (f), each member computes its half of the
// hidden features, and the row-parallel matmul's partial sums are
// all-reduced (g). Nothing here knows about Megatron: these are the
// matmul rule's factors.

module {
  func.func @forward() -> tensor<f32> {
    %tokens = strata.input "tokens" : tensor<2x4xi32>
    %targets = strata.input "targets" : tensor<2x4xi32>
    %e = strata.param "embed.weight" : tensor<16x8xf32>
    %w1 = strata.param "fc1.weight" {strata.sharding = [["", "tp"]]} : tensor<8x32xf32>
    %b1 = strata.param "fc1.bias" : tensor<32xf32>
    %w2 = strata.param "fc2.weight" : tensor<32x8xf32>
    %head = strata.param "head.weight" : tensor<8x16xf32>
    %x = strata.embedding %e, %tokens : (tensor<16x8xf32>, tensor<2x4xi32>) -> tensor<2x4x8xf32>
    %h = strata.matmul %x, %w1 : (tensor<2x4x8xf32>, tensor<8x32xf32>) -> tensor<2x4x32xf32>
    %hb = strata.bias_add %h, %b1 : (tensor<2x4x32xf32>, tensor<32xf32>) -> tensor<2x4x32xf32>
    %a = strata.gelu %hb : (tensor<2x4x32xf32>) -> tensor<2x4x32xf32>
    %y = strata.matmul %a, %w2 : (tensor<2x4x32xf32>, tensor<32x8xf32>) -> tensor<2x4x8xf32>
    %r = strata.add %x, %y : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
    %logits = strata.matmul %r, %head : (tensor<2x4x8xf32>, tensor<8x16xf32>) -> tensor<2x4x16xf32>
    %loss = strata.cross_entropy %logits, %targets : (tensor<2x4x16xf32>, tensor<2x4xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// TP: strata.param "fc1.weight" {strata.global_shape = array<i64: 8, 32>, strata.shard_start = array<i64: 0, 16>, strata.shard_view = array<i64: 8, 32>
// TP-SAME: tensor<8x16xf32>
// TP: strata.param "fc1.bias" {{.*}}strata.shard_start = array<i64: 16>{{.*}} : tensor<16xf32>
// TP: strata.param "fc2.weight" {{.*}}strata.shard_start = array<i64: 16, 0>{{.*}} : tensor<16x8xf32>
// TP: %[[X:.*]] = strata.embedding
// TP-NEXT: %[[F:.*]] = strata.replicate %[[X]] {group = "tp"}
// TP-NEXT: strata.matmul %[[F]], {{.*}} -> tensor<2x4x16xf32>
// TP: strata.gelu {{.*}} -> tensor<2x4x16xf32>
// TP: %[[Y:.*]] = strata.matmul {{.*}} : (tensor<2x4x16xf32>, tensor<16x8xf32>) -> tensor<2x4x8xf32>
// TP-NEXT: %[[G:.*]] = strata.all_reduce %[[Y]] {group = "tp"}
// TP-NEXT: strata.add %[[X]], %[[G]]
// TP-NOT: strata.all_reduce
// TP-NOT: strata.all_gather

// The gradient of x sums the members' partial gradients (f's conjugate).
// GRAD: strata.all_reduce {{.*}}group = "tp"
