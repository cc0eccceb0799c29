// RUN: strata-opt %s -strata-propagate-sharding="mesh-size=4" -strata-partition-sharding="mesh-size=4 rank=3" | FileCheck %s
// RUN: strata-opt %s -strata-propagate-sharding="mesh-size=4" -strata-partition-sharding="mesh-size=4 rank=3" -strata-autodiff | FileCheck %s --check-prefix=GRAD

// Grouped-query attention with 2 kv heads on 4 members: the query heads
// (kv g) are split over the whole axis, the kv heads over its major part
// ("tp/2": members 0-1 share kv head 0, members 2-3 kv head 1). The key and
// value weights stay whole; each member cuts its group's kv head out of
// them where they are used, through replicate, whose gradient sums every
// member's part.

module {
  func.func @forward() -> tensor<f32> {
    %targets = strata.input "targets" : tensor<2x8xi32>
    %x = strata.param "x" : tensor<2x8x16xf32>
    %wq = strata.param "q.weight" {strata.sharding = [["tp", ""]]} : tensor<16x16xf32>
    %wk = strata.param "k.weight" {strata.sharding = [["tp/2", ""]]} : tensor<8x16xf32>
    %wo = strata.param "o.weight" : tensor<16x16xf32>
    %q0 = strata.matmul %x, %wq {transpose_b = true} : (tensor<2x8x16xf32>, tensor<16x16xf32>) -> tensor<2x8x16xf32>
    %q1 = strata.reshape %q0 : (tensor<2x8x16xf32>) -> tensor<2x8x4x4xf32>
    %q = strata.transpose %q1 {permutation = array<i64: 0, 2, 1, 3>} : (tensor<2x8x4x4xf32>) -> tensor<2x4x8x4xf32>
    %k0 = strata.matmul %x, %wk {transpose_b = true} : (tensor<2x8x16xf32>, tensor<8x16xf32>) -> tensor<2x8x8xf32>
    %k1 = strata.reshape %k0 : (tensor<2x8x8xf32>) -> tensor<2x8x2x4xf32>
    %k = strata.transpose %k1 {permutation = array<i64: 0, 2, 1, 3>} : (tensor<2x8x2x4xf32>) -> tensor<2x2x8x4xf32>
    %out, %lse = strata.causal_attention %q, %k, %k {scale = 5.000000e-01 : f64} : (tensor<2x4x8x4xf32>, tensor<2x2x8x4xf32>, tensor<2x2x8x4xf32>) -> (tensor<2x4x8x4xf32>, tensor<2x4x8xf32>)
    %o1 = strata.transpose %out {permutation = array<i64: 0, 2, 1, 3>} : (tensor<2x4x8x4xf32>) -> tensor<2x8x4x4xf32>
    %o2 = strata.reshape %o1 : (tensor<2x8x4x4xf32>) -> tensor<2x8x16xf32>
    %y = strata.matmul %o2, %wo {transpose_b = true} : (tensor<2x8x16xf32>, tensor<16x16xf32>) -> tensor<2x8x16xf32>
    %loss = strata.cross_entropy %y, %targets : (tensor<2x8x16xf32>, tensor<2x8xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// CHECK: %[[K:.*]] = strata.param "k.weight" {{.*}}: tensor<8x16xf32>
// CHECK: %[[KR:.*]] = strata.replicate %[[K]] {group = "tp"}
// CHECK-NEXT: %[[KS:.*]] = strata.slice %[[KR]] {axis = 0 : i64, offset = 4 : i64, size = 4 : i64} : (tensor<8x16xf32>) -> tensor<4x16xf32>
// CHECK-NEXT: strata.matmul %{{.*}}, %[[KS]] {{.*}} -> tensor<2x8x4xf32>
// CHECK: strata.causal_attention {{.*}} : (tensor<2x1x8x4xf32>, tensor<2x1x8x4xf32>, tensor<2x1x8x4xf32>) -> (tensor<2x1x8x4xf32>, tensor<2x1x8xf32>)
// CHECK: strata.all_reduce

// GRAD: strata.accumulate_grad {{.*}}{param = "k.weight"} : tensor<8x16xf32>
