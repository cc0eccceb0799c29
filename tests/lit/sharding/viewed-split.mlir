// RUN: strata-opt %s -strata-propagate-sharding="mesh-size=2" -strata-partition-sharding="mesh-size=2 rank=1" | FileCheck %s
// RUN: strata-opt %s -strata-propagate-sharding="mesh-size=2" -strata-partition-sharding="mesh-size=2 rank=1" -strata-autodiff | FileCheck %s --check-prefix=GRAD

// GPT-2's fused QKV projection [hidden, 3 * heads * head_dim] split by
// heads: the decision "tp@3x4x4:1" splits the output features viewed as
// [3, heads, head_dim] along the heads. The matmul and the bias carry the
// viewed split; the reshape that unfolds the heads splits its heads factor
// plainly; the member declares its box of the view [16, 3, 4, 4] and
// reshapes it. The softmax over the features needs them whole: the viewed
// split is gathered in the view (reshape, all_gather of the heads, reshape).

module {
  func.func @forward() -> tensor<f32> {
    %targets = strata.input "targets" : tensor<2x8xi32>
    %x = strata.param "x" : tensor<2x8x16xf32>
    %w = strata.param "c_attn.weight" {strata.sharding = [["", "tp@3x4x4:1"]]} : tensor<16x48xf32>
    %b = strata.param "c_attn.bias" : tensor<48xf32>
    %y = strata.matmul %x, %w : (tensor<2x8x16xf32>, tensor<16x48xf32>) -> tensor<2x8x48xf32>
    %yb = strata.bias_add %y, %b : (tensor<2x8x48xf32>, tensor<48xf32>) -> tensor<2x8x48xf32>
    %h = strata.reshape %yb : (tensor<2x8x48xf32>) -> tensor<2x8x3x4x4xf32>
    %g = strata.gelu %h : (tensor<2x8x3x4x4xf32>) -> tensor<2x8x3x4x4xf32>
    %f = strata.reshape %g : (tensor<2x8x3x4x4xf32>) -> tensor<2x8x48xf32>
    %s = strata.softmax %f : (tensor<2x8x48xf32>) -> tensor<2x8x48xf32>
    %loss = strata.cross_entropy %s, %targets : (tensor<2x8x48xf32>, tensor<2x8xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// CHECK: %[[W:.*]] = strata.param "c_attn.weight" {strata.global_shape = array<i64: 16, 48>, strata.shard_start = array<i64: 0, 0, 2, 0>, strata.shard_view = array<i64: 16, 3, 4, 4>{{.*}}} : tensor<16x3x2x4xf32>
// CHECK-NEXT: %[[WL:.*]] = strata.reshape %[[W]] : (tensor<16x3x2x4xf32>) -> tensor<16x24xf32>
// CHECK-NEXT: %[[B:.*]] = strata.param "c_attn.bias" {strata.global_shape = array<i64: 48>, strata.shard_start = array<i64: 0, 2, 0>, strata.shard_view = array<i64: 3, 4, 4>{{.*}}} : tensor<3x2x4xf32>
// CHECK-NEXT: %[[BL:.*]] = strata.reshape %[[B]] : (tensor<3x2x4xf32>) -> tensor<24xf32>
// CHECK: %[[Y:.*]] = strata.matmul %{{.*}}, %[[WL]] {{.*}} -> tensor<2x8x24xf32>
// CHECK-NEXT: strata.bias_add %[[Y]], %[[BL]] {{.*}} -> tensor<2x8x24xf32>
// CHECK-NEXT: strata.reshape {{.*}} -> tensor<2x8x3x2x4xf32>
// CHECK-NEXT: strata.gelu {{.*}} -> tensor<2x8x3x2x4xf32>
// CHECK-NEXT: %[[F:.*]] = strata.reshape {{.*}} -> tensor<2x8x24xf32>
// CHECK-NEXT: %[[U:.*]] = strata.reshape %[[F]] : (tensor<2x8x24xf32>) -> tensor<2x8x3x2x4xf32>
// CHECK-NEXT: %[[G:.*]] = strata.all_gather %[[U]] {axis = 3 : i64, group = "tp", replicated = true, size = 2 : i64} : (tensor<2x8x3x2x4xf32>) -> tensor<2x8x3x4x4xf32>
// CHECK-NEXT: %[[WHOLE:.*]] = strata.reshape %[[G]] : (tensor<2x8x3x4x4xf32>) -> tensor<2x8x48xf32>
// CHECK-NEXT: strata.softmax %[[WHOLE]]

// GRAD: strata.accumulate_grad {{.*}}{param = "c_attn.bias"} : tensor<3x2x4xf32>
// GRAD: strata.accumulate_grad {{.*}}{param = "c_attn.weight"} : tensor<16x3x2x4xf32>
