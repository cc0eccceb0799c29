// RUN: strata-opt %s -split-input-file -verify-diagnostics

// Verifier diagnostics of strata ops. Ops with inferred result types report
// the specific problem and then that inference failed.

func.func @matmul_contraction(%a: tensor<4x8xf32>, %b: tensor<6x3xf32>) {
  // expected-error @+2 {{contraction dimensions differ: lhs [4, 8] has K=8, rhs [6, 3] has K=6}}
  // expected-error @+1 {{op failed to infer returned types}}
  %0 = strata.matmul %a, %b : (tensor<4x8xf32>, tensor<6x3xf32>) -> tensor<4x3xf32>
  return
}

// -----

func.func @matmul_batch(%a: tensor<2x4x8xf32>, %b: tensor<3x8x3xf32>) {
  // expected-error @+2 {{batch dimensions differ}}
  // expected-error @+1 {{op failed to infer returned types}}
  %0 = strata.matmul %a, %b : (tensor<2x4x8xf32>, tensor<3x8x3xf32>) -> tensor<2x4x3xf32>
  return
}

// -----

func.func @matmul_dtype(%a: tensor<4x8xf32>, %b: tensor<8x3xbf16>) {
  // expected-error @+2 {{rhs must have the element type of the input ('f32'), got 'bf16'}}
  // expected-error @+1 {{op failed to infer returned types}}
  %0 = strata.matmul %a, %b : (tensor<4x8xf32>, tensor<8x3xbf16>) -> tensor<4x3xf32>
  return
}

// -----

func.func @matmul_wrong_result(%a: tensor<4x8xf32>, %b: tensor<8x3xf32>) {
  // expected-error @+2 {{inferred type(s) 'tensor<4x3xf32>' are incompatible with return type(s) of operation 'tensor<4x4xf32>'}}
  // expected-error @+1 {{op failed to infer returned types}}
  %0 = strata.matmul %a, %b : (tensor<4x8xf32>, tensor<8x3xf32>) -> tensor<4x4xf32>
  return
}

// -----

func.func @embedding_ids_float(%t: tensor<16x8xf32>, %ids: tensor<4xf32>) {
  // expected-error @+1 {{operand #1 must be ranked tensor of 32-bit signless integer or 64-bit signless integer values}}
  %0 = strata.embedding %t, %ids : (tensor<16x8xf32>, tensor<4xf32>) -> tensor<4x8xf32>
  return
}

// -----

func.func @embedding_table_rank(%t: tensor<16xf32>, %ids: tensor<4xi32>) {
  // expected-error @+2 {{table must be rank 2 [vocab, hidden], got [16]}}
  // expected-error @+1 {{op failed to infer returned types}}
  %0 = strata.embedding %t, %ids : (tensor<16xf32>, tensor<4xi32>) -> tensor<4x8xf32>
  return
}

// -----

func.func @bias_size(%x: tensor<4x8xf32>, %b: tensor<7xf32>) {
  // expected-error @+2 {{bias must be a vector of the input's last dimension: input [4, 8], bias [7]}}
  // expected-error @+1 {{op failed to infer returned types}}
  %0 = strata.bias_add %x, %b : (tensor<4x8xf32>, tensor<7xf32>) -> tensor<4x8xf32>
  return
}

// -----

func.func @add_shapes(%x: tensor<4x8xf32>, %y: tensor<4x7xf32>) {
  // expected-error @+2 {{operands must have identical types}}
  // expected-error @+1 {{op failed to infer returned types}}
  %0 = strata.add %x, %y : (tensor<4x8xf32>, tensor<4x7xf32>) -> tensor<4x8xf32>
  return
}

// -----

func.func @layer_norm_gamma(%x: tensor<4x8xf32>, %g: tensor<4xf32>, %b: tensor<8xf32>) {
  // expected-error @+2 {{gamma must be a vector of the input's last dimension}}
  // expected-error @+1 {{op failed to infer returned types}}
  %0 = strata.layer_norm %x, %g, %b : (tensor<4x8xf32>, tensor<4xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  return
}

// -----

func.func @causal_not_square(%x: tensor<2x4x5xf32>) {
  // expected-error @+2 {{with causal = true needs an input of shape [..., S, S], got [2, 4, 5]}}
  // expected-error @+1 {{op failed to infer returned types}}
  %0 = strata.softmax %x {causal = true} : (tensor<2x4x5xf32>) -> tensor<2x4x5xf32>
  return
}

// -----

func.func @reshape_count(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{element counts differ: [4, 8] has 32, [5, 8] has 40}}
  %0 = strata.reshape %x : (tensor<4x8xf32>) -> tensor<5x8xf32>
  return
}

// -----

func.func @transpose_perm(%x: tensor<4x8xf32>) {
  // expected-error @+2 {{permutation [0, 0] is not a permutation of 0..1}}
  // expected-error @+1 {{op failed to infer returned types}}
  %0 = strata.transpose %x {permutation = array<i64: 0, 0>} : (tensor<4x8xf32>) -> tensor<4x4xf32>
  return
}

// -----

func.func @split_uneven(%x: tensor<4x9xf32>) {
  // expected-error @+1 {{cannot split dimension 1 of size 9 into 2 equal parts}}
  %0, %1 = strata.split %x {axis = 1 : i64} : (tensor<4x9xf32>) -> (tensor<4x4xf32>, tensor<4x5xf32>)
  return
}

// -----

func.func @concat_mismatch(%x: tensor<4x8xf32>, %y: tensor<5x8xf32>) {
  // expected-error @+2 {{differ outside the concatenation axis 1}}
  // expected-error @+1 {{op failed to infer returned types}}
  %0 = strata.concat %x, %y {axis = 1 : i64} : (tensor<4x8xf32>, tensor<5x8xf32>) -> tensor<4x16xf32>
  return
}

// -----

func.func @ce_targets(%l: tensor<4x8x16xf32>, %t: tensor<4x7xi32>) {
  // expected-error @+2 {{targets must have the logits' shape without the class dimension: logits [4, 8, 16], targets [4, 7]; expected targets [4, 8]}}
  // expected-error @+1 {{op failed to infer returned types}}
  %0 = strata.cross_entropy %l, %t : (tensor<4x8x16xf32>, tensor<4x7xi32>) -> tensor<f32>
  return
}

// -----

func.func @param_init() {
  // expected-error @+1 {{init must be one of normal, zeros, ones; got 'uniform'}}
  %0 = strata.param "w" {init = "uniform"} : tensor<4xf32>
  return
}


// -----

func.func @unary_kind(%x: tensor<4xf32>) {
  // expected-error @+1 {{kind 'cos' is not a unary function; expected one of sqrt, reciprocal, erf, tanh, sigmoid, exp, neg}}
  %0 = strata.unary %x {kind = "cos"} : (tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @binary_kind(%x: tensor<4xf32>) {
  // expected-error @+1 {{kind 'pow' is not a binary function; expected one of add, sub, mul, div}}
  %0 = strata.binary %x, %x {kind = "pow"} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @binary_two_runs(%x: tensor<2x3x4x5xf32>, %y: tensor<3x1x5x1xf32>) {
  // expected-error @+2 {{'strata.binary' rhs must have lhs's element type and, aligned to the right and past its leading 1s, lhs's dims but for one run of 1s}}
  // expected-error @+1 {{op failed to infer returned types}}
  %0 = strata.binary %x, %y {kind = "add"} : (tensor<2x3x4x5xf32>, tensor<3x1x5x1xf32>) -> tensor<2x3x4x5xf32>
  return
}

// -----

func.func @reduce_mean_axis(%x: tensor<4xf32>) {
  // expected-error @+2 {{'strata.reduce_mean' axis 1 is out of range for a tensor of rank 1}}
  // expected-error @+1 {{op failed to infer returned types}}
  %0 = strata.reduce_mean %x {axis = 1 : i64} : (tensor<4xf32>) -> tensor<1xf32>
  return
}
