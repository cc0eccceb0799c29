// RUN: strata-opt %s -split-input-file -verify-diagnostics

// Verifier diagnostics of strata.causal_attention and its gradient op.

func.func @kv_heads_not_dividing(%q: tensor<1x3x4x8xf32>, %k: tensor<1x2x4x8xf32>) {
  // expected-error @+2 {{'strata.causal_attention' needs query [B, heads, S, D] and key, value [B, kv_heads, S, D] with kv_heads dividing heads, got [1, 3, 4, 8], [1, 2, 4, 8], [1, 2, 4, 8]}}
  // expected-error @+1 {{op failed to infer returned types}}
  %o, %l = strata.causal_attention %q, %k, %k {scale = 1.0 : f64} : (tensor<1x3x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> (tensor<1x3x4x8xf32>, tensor<1x3x4xf32>)
  return
}

// -----

func.func @sequence_differs(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x5x8xf32>) {
  // expected-error @+2 {{with kv_heads dividing heads, got [1, 2, 4, 8], [1, 2, 5, 8], [1, 2, 5, 8]}}
  // expected-error @+1 {{op failed to infer returned types}}
  %o, %l = strata.causal_attention %q, %k, %k {scale = 1.0 : f64} : (tensor<1x2x4x8xf32>, tensor<1x2x5x8xf32>, tensor<1x2x5x8xf32>) -> (tensor<1x2x4x8xf32>, tensor<1x2x4xf32>)
  return
}

// -----

func.func @rank_three(%q: tensor<2x4x8xf32>) {
  // expected-error @+2 {{needs query [B, heads, S, D]}}
  // expected-error @+1 {{op failed to infer returned types}}
  %o, %l = strata.causal_attention %q, %q, %q {scale = 1.0 : f64} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> (tensor<2x4x8xf32>, tensor<2x4xf32>)
  return
}

// -----

func.func @mixed_types(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xbf16>) {
  // expected-error @+2 {{query, key and value must have one element type, got 'f32' and 'bf16'}}
  // expected-error @+1 {{op failed to infer returned types}}
  %o, %l = strata.causal_attention %q, %k, %k {scale = 1.0 : f64} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xbf16>, tensor<1x2x4x8xbf16>) -> (tensor<1x2x4x8xf32>, tensor<1x2x4xf32>)
  return
}

// -----

func.func @zero_scale(%q: tensor<1x2x4x8xf32>) {
  // expected-error @+2 {{scale must be positive and finite, got 0.0}}
  // expected-error @+1 {{op failed to infer returned types}}
  %o, %l = strata.causal_attention %q, %q, %q {scale = 0.0 : f64} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> (tensor<1x2x4x8xf32>, tensor<1x2x4xf32>)
  return
}

// -----

func.func @declared_lse_type(%q: tensor<1x2x4x8xf32>) {
  // expected-error @+2 {{inferred type(s) 'tensor<1x2x4x8xf32>', 'tensor<1x2x4xf32>' are incompatible with return type(s) of operation 'tensor<1x2x4x8xf32>', 'tensor<1x2x4x8xf32>'}}
  // expected-error @+1 {{op failed to infer returned types}}
  %o, %l = strata.causal_attention %q, %q, %q {scale = 1.0 : f64} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>)
  return
}

// -----

func.func @grad_lse_shape(%q: tensor<1x2x4x8xf32>, %lse: tensor<1x2x8xf32>) {
  // expected-error @+2 {{'strata.causal_attention_grad' needs grad and output of the query's type}}
  // expected-error @+1 {{op failed to infer returned types}}
  %dq, %dk, %dv = strata.causal_attention_grad %q, %q, %q, %q, %q, %lse {scale = 1.0 : f64} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x8xf32>) -> (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>)
  return
}
