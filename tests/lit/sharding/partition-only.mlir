// RUN: strata-opt %s -strata-partition-sharding="mesh-size=2 rank=0" | FileCheck %s
// RUN: not strata-opt %s -strata-partition-sharding="mesh-size=2 rank=2" 2>&1 | FileCheck %s --check-prefix=RANK

// strata-partition-sharding alone, on shardings written by hand on every
// op (what strata-propagate-sharding would write): the hidden activation
// split by features, so the first weight is split by columns, the second
// by rows, and the partial sums are all-reduced before the loss.

module {
  func.func @forward() -> tensor<f32> {
    %targets = strata.input "targets" {strata.sharding = [["", ""]]} : tensor<2x4xi32>
    %x = strata.param "x" {strata.sharding = [["", "", ""]]} : tensor<2x4x8xf32>
    %w1 = strata.param "fc1.weight" {strata.sharding = [["", "tp"]]} : tensor<8x32xf32>
    %w2 = strata.param "fc2.weight" {strata.sharding = [["tp", ""]]} : tensor<32x16xf32>
    %h = strata.matmul %x, %w1 {strata.sharding = [["", "", "tp"]]} : (tensor<2x4x8xf32>, tensor<8x32xf32>) -> tensor<2x4x32xf32>
    %a = strata.relu %h {strata.sharding = [["", "", "tp"]]} : (tensor<2x4x32xf32>) -> tensor<2x4x32xf32>
    %y = strata.matmul %a, %w2 {strata.sharding = [["", "", ""]]} : (tensor<2x4x32xf32>, tensor<32x16xf32>) -> tensor<2x4x16xf32>
    %s = strata.softmax %y {strata.sharding = [["", "", ""]]} : (tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
    %loss = strata.cross_entropy %s, %targets {strata.sharding = [[]]} : (tensor<2x4x16xf32>, tensor<2x4xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// CHECK: %[[X:.*]] = strata.param "x"
// CHECK-NEXT: %[[XR:.*]] = strata.replicate %[[X]] {group = "tp"}
// CHECK: strata.param "fc1.weight" {{.*}}strata.shard_start = array<i64: 0, 0>{{.*}} : tensor<8x16xf32>
// CHECK: strata.param "fc2.weight" {{.*}}strata.shard_start = array<i64: 0, 0>{{.*}} : tensor<16x16xf32>
// CHECK: strata.matmul %[[XR]], {{.*}} -> tensor<2x4x16xf32>
// CHECK: strata.relu {{.*}} -> tensor<2x4x16xf32>
// CHECK: %[[Y:.*]] = strata.matmul {{.*}} -> tensor<2x4x16xf32>
// CHECK-NEXT: %[[R:.*]] = strata.all_reduce %[[Y]] {group = "tp"}
// CHECK-NEXT: strata.softmax %[[R]]

// RANK: error: need mesh-size >= 1 and 0 <= rank < mesh-size
