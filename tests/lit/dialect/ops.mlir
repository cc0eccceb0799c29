// RUN: strata-opt %s | FileCheck %s
// RUN: strata-opt %s | strata-opt | FileCheck %s
// RUN: strata-opt %s -mlir-print-op-generic | strata-opt | FileCheck %s

// Every strata op parses, verifies, prints and parses back unchanged.

// CHECK-LABEL: func.func @all_ops
func.func @all_ops() -> tensor<f32> {
  // CHECK: strata.input "tokens" : tensor<2x4xi32>
  %tokens = strata.input "tokens" : tensor<2x4xi32>
  %targets = strata.input "targets" : tensor<2x4xi32>
  // Default-valued attributes (init = "normal", init_std = 0.02) are elided.
  // CHECK: strata.param "wte.weight" : tensor<16x8xf32>
  %wte = strata.param "wte.weight" {init_std = 0.02 : f64} : tensor<16x8xf32>
  // CHECK: strata.param "ln.weight" {init = "ones"} : tensor<8xf32>
  %g = strata.param "ln.weight" {init = "ones"} : tensor<8xf32>
  %b = strata.param "ln.bias" {init = "zeros"} : tensor<8xf32>
  %w = strata.param "fc.weight" : tensor<8x24xf32>
  %bw = strata.param "fc.bias" {init = "zeros"} : tensor<24xf32>
  // CHECK: strata.embedding %{{.*}}, %{{.*}} : (tensor<16x8xf32>, tensor<2x4xi32>) -> tensor<2x4x8xf32>
  %x = strata.embedding %wte, %tokens : (tensor<16x8xf32>, tensor<2x4xi32>) -> tensor<2x4x8xf32>
  // CHECK: strata.layer_norm {{.*}} {epsilon = 1.000000e-03 : f64}
  %n = strata.layer_norm %x, %g, %b {epsilon = 1.0e-3 : f64} : (tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  // CHECK: strata.matmul {{.*}} -> tensor<2x4x24xf32>
  %y = strata.matmul %n, %w : (tensor<2x4x8xf32>, tensor<8x24xf32>) -> tensor<2x4x24xf32>
  %yb = strata.bias_add %y, %bw : (tensor<2x4x24xf32>, tensor<24xf32>) -> tensor<2x4x24xf32>
  // CHECK: strata.reshape {{.*}} -> tensor<2x4x3x2x4xf32>
  %r = strata.reshape %yb : (tensor<2x4x24xf32>) -> tensor<2x4x3x2x4xf32>
  // CHECK: strata.transpose {{.*}} {permutation = array<i64: 2, 0, 3, 1, 4>}
  %t = strata.transpose %r {permutation = array<i64: 2, 0, 3, 1, 4>} : (tensor<2x4x3x2x4xf32>) -> tensor<3x2x2x4x4xf32>
  // CHECK: strata.split {{.*}} {axis = 0 : i64}
  %q, %k, %v = strata.split %t {axis = 0 : i64} : (tensor<3x2x2x4x4xf32>) -> (tensor<1x2x2x4x4xf32>, tensor<1x2x2x4x4xf32>, tensor<1x2x2x4x4xf32>)
  %q2 = strata.reshape %q : (tensor<1x2x2x4x4xf32>) -> tensor<2x2x4x4xf32>
  %k2 = strata.reshape %k : (tensor<1x2x2x4x4xf32>) -> tensor<2x2x4x4xf32>
  %v2 = strata.reshape %v : (tensor<1x2x2x4x4xf32>) -> tensor<2x2x4x4xf32>
  // CHECK: strata.matmul {{.*}} {transpose_b = true}
  %s = strata.matmul %q2, %k2 {transpose_b = true} : (tensor<2x2x4x4xf32>, tensor<2x2x4x4xf32>) -> tensor<2x2x4x4xf32>
  // CHECK: strata.softmax {{.*}} {causal = true, scale = 5.000000e-01 : f64}
  %p = strata.softmax %s {causal = true, scale = 0.5 : f64} : (tensor<2x2x4x4xf32>) -> tensor<2x2x4x4xf32>
  %c = strata.matmul %p, %v2 : (tensor<2x2x4x4xf32>, tensor<2x2x4x4xf32>) -> tensor<2x2x4x4xf32>
  %ct = strata.transpose %c {permutation = array<i64: 0, 2, 1, 3>} : (tensor<2x2x4x4xf32>) -> tensor<2x4x2x4xf32>
  %cr = strata.reshape %ct : (tensor<2x4x2x4xf32>) -> tensor<2x4x8xf32>
  // CHECK: strata.gelu
  %ge = strata.gelu %cr : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  // CHECK: strata.relu
  %re = strata.relu %ge : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  // CHECK: strata.scale {{.*}} {factor = 2.500000e-01 : f64}
  %sc = strata.scale %re {factor = 0.25 : f64} : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %m = strata.mul %sc, %x : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %a = strata.add %m, %x : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  // CHECK: strata.concat {{.*}} {axis = 2 : i64} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x16xf32>
  %cat = strata.concat %a, %x {axis = 2 : i64} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x16xf32>
  // CHECK: strata.matmul {{.*}} {transpose_b = true} : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
  %logits = strata.matmul %a, %wte {transpose_b = true} : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
  // CHECK: strata.cross_entropy {{.*}} -> tensor<f32>
  %loss = strata.cross_entropy %logits, %targets : (tensor<2x4x16xf32>, tensor<2x4xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}

// strata.binary: a [H] weight, a [B, S, 1] norm, a scalar (helper onnx).
// CHECK-LABEL: func.func @binary
func.func @binary(%x: tensor<2x3x4xf32>, %w: tensor<4xf32>, %n: tensor<2x3x1xf32>, %c: tensor<f32>) -> tensor<2x3x4xf32> {
  // CHECK: strata.binary %{{.*}}, %{{.*}} {kind = "mul"} : (tensor<2x3x4xf32>, tensor<4xf32>) -> tensor<2x3x4xf32>
  %0 = strata.binary %x, %w {kind = "mul"} : (tensor<2x3x4xf32>, tensor<4xf32>) -> tensor<2x3x4xf32>
  // CHECK: strata.binary %{{.*}}, %{{.*}} {kind = "div"} : (tensor<2x3x4xf32>, tensor<2x3x1xf32>) -> tensor<2x3x4xf32>
  %1 = strata.binary %0, %n {kind = "div"} : (tensor<2x3x4xf32>, tensor<2x3x1xf32>) -> tensor<2x3x4xf32>
  // CHECK: strata.binary %{{.*}}, %{{.*}} {kind = "sub"} : (tensor<2x3x4xf32>, tensor<f32>) -> tensor<2x3x4xf32>
  %2 = strata.binary %1, %c {kind = "sub"} : (tensor<2x3x4xf32>, tensor<f32>) -> tensor<2x3x4xf32>
  return %2 : tensor<2x3x4xf32>
}

// strata.unary and its gradient (helper onnx).
// CHECK-LABEL: func.func @unary
func.func @unary(%x: tensor<2x4xf32>, %dy: tensor<2x4xf32>) -> tensor<2x4xf32> {
  // CHECK: strata.unary %{{.*}} {kind = "erf"} : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %y = strata.unary %x {kind = "erf"} : (tensor<2x4xf32>) -> tensor<2x4xf32>
  // CHECK: strata.unary_grad %{{.*}}, %{{.*}} {kind = "sqrt"} : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  %dx = strata.unary_grad %dy, %y {kind = "sqrt"} : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  return %dx : tensor<2x4xf32>
}

// CHECK-LABEL: func.func @reduce_mean
func.func @reduce_mean(%x: tensor<2x4xf32>) -> tensor<2x4xf32> {
  // CHECK: strata.reduce_mean %{{.*}} {axis = -1 : i64} : (tensor<2x4xf32>) -> tensor<2x1xf32>
  %m = strata.reduce_mean %x {axis = -1 : i64} : (tensor<2x4xf32>) -> tensor<2x1xf32>
  // CHECK: strata.reduce_mean_grad %{{.*}} {axis = 1 : i64, size = 4 : i64} : (tensor<2x1xf32>) -> tensor<2x4xf32>
  %dx = strata.reduce_mean_grad %m {axis = 1 : i64, size = 4 : i64} : (tensor<2x1xf32>) -> tensor<2x4xf32>
  return %dx : tensor<2x4xf32>
}
