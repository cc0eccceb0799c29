// RUN: strata-opt %s -split-input-file -strata-propagate-sharding="mesh-size=2" -strata-partition-sharding="mesh-size=2 rank=1" | FileCheck %s
// RUN: strata-opt %s -split-input-file -strata-propagate-sharding="mesh-size=2" -strata-partition-sharding="mesh-size=2 rank=1" -strata-autodiff | FileCheck %s --check-prefix=GRAD

// Hand-written shardings (strata.sharding on parameters or activations)
// that disagree with what the next op's rule needs: one case per
// reconciling collective strata-partition-sharding inserts, read on mesh
// member 1 of 2.

// all-reduce: the contraction split on both operands leaves partial sums;
// the softmax needs the whole value.

module {
  func.func @forward() -> tensor<f32> {
    %targets = strata.input "targets" : tensor<2x4xi32>
    %x = strata.param "x" {strata.sharding = [["", "", "tp"]]} : tensor<2x4x8xf32>
    %w = strata.param "w" {strata.sharding = [["tp", ""]]} : tensor<8x16xf32>
    %y = strata.matmul %x, %w : (tensor<2x4x8xf32>, tensor<8x16xf32>) -> tensor<2x4x16xf32>
    %s = strata.softmax %y : (tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
    %loss = strata.cross_entropy %s, %targets : (tensor<2x4x16xf32>, tensor<2x4xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// CHECK-LABEL: func.func @forward
// GRAD-LABEL: func.func @train_microbatch
// CHECK: strata.param "x" {{.*}}strata.shard_start = array<i64: 0, 0, 4>{{.*}} : tensor<2x4x4xf32>
// CHECK: strata.param "w" {{.*}}strata.shard_start = array<i64: 4, 0>{{.*}} : tensor<4x16xf32>
// CHECK: %[[Y:.*]] = strata.matmul {{.*}} -> tensor<2x4x16xf32>
// CHECK-NEXT: %[[R:.*]] = strata.all_reduce %[[Y]] {group = "tp"} : (tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
// CHECK-NEXT: strata.softmax %[[R]]

// -----

// reduce-scatter: partial sums meet an addend split along the sequence.
module {
  func.func @forward() -> tensor<f32> {
    %targets = strata.input "targets" : tensor<2x4xi32>
    %x = strata.param "x" {strata.sharding = [["", "", "tp"]]} : tensor<2x4x8xf32>
    %w = strata.param "w" {strata.sharding = [["tp", ""]]} : tensor<8x16xf32>
    %r = strata.param "r" {strata.sharding = [["", "tp", ""]]} : tensor<2x4x16xf32>
    %y = strata.matmul %x, %w : (tensor<2x4x8xf32>, tensor<8x16xf32>) -> tensor<2x4x16xf32>
    %a = strata.add %r, %y : (tensor<2x4x16xf32>, tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
    %loss = strata.cross_entropy %a, %targets : (tensor<2x4x16xf32>, tensor<2x4xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// CHECK-LABEL: func.func @forward
// GRAD-LABEL: func.func @train_microbatch
// CHECK: %[[R:.*]] = strata.param "r" {{.*}} : tensor<2x2x16xf32>
// CHECK: %[[Y:.*]] = strata.matmul {{.*}} -> tensor<2x4x16xf32>
// CHECK-NEXT: %[[RS:.*]] = strata.reduce_scatter %[[Y]] {axis = 1 : i64, group = "tp", size = 2 : i64} : (tensor<2x4x16xf32>) -> tensor<2x2x16xf32>
// CHECK-NEXT: %[[A:.*]] = strata.add %[[R]], %[[RS]] {{.*}} -> tensor<2x2x16xf32>
// The loss needs every position: the sequence is gathered again.
// CHECK-NEXT: strata.all_gather %[[A]] {axis = 1 : i64, group = "tp", replicated = true, size = 2 : i64} : (tensor<2x2x16xf32>) -> tensor<2x4x16xf32>

// The reduce-scatter's gradient gathers the sequence (the non-replicated
// all_gather).
// GRAD: strata.take_slice {{.*}}axis = 1
// GRAD: strata.all_gather %{{.*}} {axis = 1 : i64, group = "tp", size = 2 : i64}
// GRAD-NEXT: strata.matmul

// -----

// all-gather: an activation seeded split by features (propagation splits
// its parameter alike, backwards) meets a softmax over the features.
module {
  func.func @forward() -> tensor<f32> {
    %targets = strata.input "targets" : tensor<2x4xi32>
    %x = strata.param "x" : tensor<2x4x16xf32>
    %g = strata.gelu %x {strata.sharding = [["", "", "tp"]]} : (tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
    %s = strata.softmax %g : (tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
    %loss = strata.cross_entropy %s, %targets : (tensor<2x4x16xf32>, tensor<2x4xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// CHECK-LABEL: func.func @forward
// GRAD-LABEL: func.func @train_microbatch
// CHECK: strata.param "x" {{.*}}strata.shard_start = array<i64: 0, 0, 8>{{.*}} : tensor<2x4x8xf32>
// CHECK: %[[G:.*]] = strata.gelu {{.*}} -> tensor<2x4x8xf32>
// CHECK-NEXT: %[[AG:.*]] = strata.all_gather %[[G]] {axis = 2 : i64, group = "tp", replicated = true, size = 2 : i64} : (tensor<2x4x8xf32>) -> tensor<2x4x16xf32>
// CHECK-NEXT: strata.softmax %[[AG]]

// -----

// all-to-all: a value split along the sequence meets a bias split by
// features (parameters win): gather the sequence, take this member's
// features (through replicate, whose gradient sums the members' parts).
module {
  func.func @forward() -> tensor<f32> {
    %targets = strata.input "targets" : tensor<2x4xi32>
    %x = strata.param "x" {strata.sharding = [["", "tp", ""]]} : tensor<2x4x16xf32>
    %b = strata.param "b" {strata.sharding = [["tp"]]} : tensor<16xf32>
    %g = strata.gelu %x : (tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
    %y = strata.bias_add %g, %b : (tensor<2x4x16xf32>, tensor<16xf32>) -> tensor<2x4x16xf32>
    %loss = strata.cross_entropy %y, %targets : (tensor<2x4x16xf32>, tensor<2x4xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// CHECK-LABEL: func.func @forward
// GRAD-LABEL: func.func @train_microbatch
// CHECK: strata.param "x" {{.*}} : tensor<2x2x16xf32>
// CHECK: strata.param "b" {{.*}}strata.shard_start = array<i64: 8>{{.*}} : tensor<8xf32>
// CHECK: %[[G:.*]] = strata.gelu {{.*}} -> tensor<2x2x16xf32>
// CHECK-NEXT: %[[AG:.*]] = strata.all_gather %[[G]] {axis = 1 : i64, {{.*}}} : (tensor<2x2x16xf32>) -> tensor<2x4x16xf32>
// CHECK-NEXT: %[[REP:.*]] = strata.replicate %[[AG]] {group = "tp"}
// CHECK-NEXT: %[[S:.*]] = strata.slice %[[REP]] {axis = 2 : i64, offset = 8 : i64, size = 8 : i64} : (tensor<2x4x16xf32>) -> tensor<2x4x8xf32>
// CHECK-NEXT: strata.bias_add %[[S]], {{.*}} -> tensor<2x4x8xf32>

// The replicate's gradient sums the members' feature parts.
// GRAD: strata.bias_grad
// GRAD: %[[P:.*]] = strata.concat
// GRAD-NEXT: strata.all_reduce %[[P]] {group = "tp"}
