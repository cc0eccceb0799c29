//===- StrataOps.td - strata dialect operations -------------*- tablegen -*-===//
//
// Every op of the strata dialect, with its documentation and constraints.
// Shape rules are implemented once per op in `inferReturnTypes`
// (StrataOps.cpp); the verifier generated from InferTypeOpInterface checks
// that declared result types agree with them.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_OPS_TD
#define STRATA_OPS_TD

include "dialects/strata/StrataDialect.td"
include "dialects/strata/StrataInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/IR/BuiltinAttributeInterfaces.td"

//===----------------------------------------------------------------------===//
// Type constraints
//===----------------------------------------------------------------------===//

def Strata_FloatTensor : RankedTensorOf<[F32, BF16, F16, F64]>;
def Strata_IdTensor : RankedTensorOf<[I32, I64]>;
def Strata_AnyTensor : RankedTensorOf<[F32, BF16, F16, F64, I32, I64]>;
def Strata_ScalarFloat : 0DTensorOf<[F32, BF16, F16, F64]>;

class Strata_ShapeOp<string mnemonic, list<Trait> traits = []>
    : Strata_Op<mnemonic, !listconcat(traits,
        [Pure, DeclareOpInterfaceMethods<InferTypeOpInterface>,
         DeclareOpInterfaceMethods<Strata_CostOpInterface>])>;

//===----------------------------------------------------------------------===//
// Declarations
//===----------------------------------------------------------------------===//

def Strata_ParamOp : Strata_Op<"param", [Pure]> {
  let summary = "declares a trainable parameter by its checkpoint name";
  let description = [{
    Declares a parameter tensor. `name` is the name the parameter has in
    checkpoints (`--init`, `--save`), e.g. Hugging Face GPT-2's
    `h.0.attn.c_attn.weight`; names are unique within a function. `init` says
    how the runtime initialises it when no checkpoint is given: `normal`
    (mean 0, standard deviation `init_std`), `zeros` or `ones`.

    ```mlir
    %w = strata.param "h.0.attn.c_attn.weight" {init = "normal", init_std = 2.0e-02 : f64} : tensor<768x2304xf32>
    %b = strata.param "h.0.attn.c_attn.bias" {init = "zeros"} : tensor<2304xf32>
    ```
  }];
  let arguments = (ins StrAttr:$name,
                       DefaultValuedStrAttr<StrAttr, "normal">:$init,
                       DefaultValuedAttr<F64Attr, "0.02">:$init_std);
  let results = (outs Strata_FloatTensor:$result);
  let assemblyFormat = "$name attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Strata_InputOp : Strata_Op<"input", [Pure]> {
  let summary = "declares a named input that the runtime feeds each step";
  let description = [{
    Declares an input tensor filled by the runtime for every micro-batch:
    `tokens` and `targets` for language models (i32 token ids), `positions`
    (0 … S-1) for learned position embeddings. Names are unique within a
    function.

    ```mlir
    %tokens = strata.input "tokens" : tensor<8x64xi32>
    ```
  }];
  let arguments = (ins StrAttr:$name);
  let results = (outs Strata_AnyTensor:$result);
  let assemblyFormat = "$name attr-dict `:` type($result)";
}

//===----------------------------------------------------------------------===//
// Compute ops
//===----------------------------------------------------------------------===//

def Strata_EmbeddingOp : Strata_ShapeOp<"embedding"> {
  let summary = "looks up rows of an embedding table";
  let description = [{
    `result[i..., :] = table[ids[i...], :]`. The table is `[V, H]`, the ids
    any-rank integers; the result has the ids' shape plus `H`.

    ```mlir
    %x = strata.embedding %wte, %tokens : (tensor<512x64xf32>, tensor<8x64xi32>) -> tensor<8x64x64xf32>
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$table, Strata_IdTensor:$ids);
  let results = (outs Strata_FloatTensor:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
}

def Strata_MatmulOp : Strata_ShapeOp<"matmul"> {
  let summary = "batched matrix multiplication";
  let description = [{
    `lhs` is `[..., M, K]` (`[..., K, M]` with `transpose_a`), `rhs` is
    `[..., K, N]` (`[..., N, K]` with `transpose_b`) with the same batch
    dimensions as `lhs`, or rank 2 and broadcast over them. The result is
    `[..., M, N]`. Operand element types must agree.

    ```mlir
    %y = strata.matmul %x, %w : (tensor<8x64x64xf32>, tensor<64x192xf32>) -> tensor<8x64x192xf32>
    %s = strata.matmul %q, %k {transpose_b = true} : (tensor<8x4x64x16xf32>, tensor<8x4x64x16xf32>) -> tensor<8x4x64x64xf32>
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$lhs, Strata_FloatTensor:$rhs,
                       DefaultValuedAttr<BoolAttr, "false">:$transpose_a,
                       DefaultValuedAttr<BoolAttr, "false">:$transpose_b);
  let results = (outs Strata_FloatTensor:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
}

def Strata_BiasAddOp : Strata_ShapeOp<"bias_add"> {
  let summary = "adds a vector along the last dimension";
  let description = [{
    `result[..., n] = input[..., n] + bias[n]`.

    ```mlir
    %y = strata.bias_add %x, %b : (tensor<8x64x192xf32>, tensor<192xf32>) -> tensor<8x64x192xf32>
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$input, Strata_FloatTensor:$bias);
  let results = (outs Strata_FloatTensor:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
}

class Strata_BinaryOp<string mnemonic, string what> : Strata_ShapeOp<mnemonic> {
  let summary = "elementwise " # what;
  let description = [{
    Elementwise }] # what # [{ of two tensors of identical shape and element
    type.

    ```mlir
    %z = strata.}] # mnemonic # [{ %x, %y : (tensor<8x64xf32>, tensor<8x64xf32>) -> tensor<8x64xf32>
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$lhs, Strata_FloatTensor:$rhs);
  let results = (outs Strata_FloatTensor:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
}

def Strata_AddOp : Strata_BinaryOp<"add", "sum">;
def Strata_MulOp : Strata_BinaryOp<"mul", "product">;

def Strata_ScaleOp : Strata_ShapeOp<"scale"> {
  let summary = "multiplies by a constant";
  let description = [{
    `result = factor * input`.

    ```mlir
    %y = strata.scale %x {factor = 2.500000e-01 : f64} : (tensor<8x64xf32>) -> tensor<8x64xf32>
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$input, F64Attr:$factor);
  let results = (outs Strata_FloatTensor:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
}

class Strata_UnaryOp<string mnemonic, string what> : Strata_ShapeOp<mnemonic> {
  let description = [{
    }] # what # [{ The result has the input's shape and type.

    ```mlir
    %y = strata.}] # mnemonic # [{ %x : (tensor<8x64xf32>) -> tensor<8x64xf32>
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$input);
  let results = (outs Strata_FloatTensor:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
}

def Strata_GeluOp : Strata_UnaryOp<"gelu",
    "GELU, tanh approximation: `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))` (GPT-2's `gelu_new`).">{
  let summary = "GELU activation (tanh approximation)";
}

def Strata_ReluOp : Strata_UnaryOp<"relu", "`max(x, 0)`.">{
  let summary = "ReLU activation";
}

def Strata_LayerNormOp : Strata_ShapeOp<"layer_norm"> {
  let summary = "layer normalisation over the last dimension";
  let description = [{
    `result = (x - mean(x)) / sqrt(var(x) + epsilon) * gamma + beta`, with the
    mean and (biased) variance over the last dimension; `gamma` and `beta` are
    vectors of the last dimension's size.

    ```mlir
    %y = strata.layer_norm %x, %g, %b {epsilon = 1.0e-05 : f64} : (tensor<8x64x64xf32>, tensor<64xf32>, tensor<64xf32>) -> tensor<8x64x64xf32>
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$input, Strata_FloatTensor:$gamma,
                       Strata_FloatTensor:$beta,
                       DefaultValuedAttr<F64Attr, "1.0e-5">:$epsilon);
  let results = (outs Strata_FloatTensor:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
}

def Strata_SoftmaxOp : Strata_ShapeOp<"softmax"> {
  let summary = "softmax over the last dimension, optionally causal and scaled";
  let description = [{
    `result = softmax(scale * input)` over the last dimension. With `causal`,
    the input is viewed as `[..., S, S]` and entry `(i, j)` with `j > i` is
    masked out before normalising (GPT-2's attention mask), so attention is
    `softmax(q k^T, causal, scale = 1/sqrt(head_dim)) v`.

    ```mlir
    %p = strata.softmax %s {causal = true, scale = 2.500000e-01 : f64} : (tensor<8x4x64x64xf32>) -> tensor<8x4x64x64xf32>
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$input,
                       DefaultValuedAttr<BoolAttr, "false">:$causal,
                       DefaultValuedAttr<F64Attr, "1.0">:$scale);
  let results = (outs Strata_FloatTensor:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

def Strata_ReshapeOp : Strata_Op<"reshape",
    [Pure, DeclareOpInterfaceMethods<Strata_CostOpInterface,
                                     ["getBytesAccessed"]>]> {
  let summary = "reinterprets a tensor with another shape";
  let description = [{
    Same elements in row-major order, new shape given by the result type;
    element counts and types must agree.

    ```mlir
    %y = strata.reshape %x : (tensor<8x64x192xf32>) -> tensor<8x64x3x4x16xf32>
    ```
  }];
  let arguments = (ins Strata_AnyTensor:$input);
  let results = (outs Strata_AnyTensor:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Strata_TransposeOp : Strata_ShapeOp<"transpose"> {
  let summary = "permutes dimensions";
  let description = [{
    `result` dimension `i` is `input` dimension `permutation[i]`.

    ```mlir
    %y = strata.transpose %x {permutation = array<i64: 2, 0, 3, 1, 4>} : (tensor<8x64x3x4x16xf32>) -> tensor<3x8x4x64x16xf32>
    ```
  }];
  let arguments = (ins Strata_AnyTensor:$input, DenseI64ArrayAttr:$permutation);
  let results = (outs Strata_AnyTensor:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
}

def Strata_SplitOp : Strata_Op<"split",
    [Pure, DeclareOpInterfaceMethods<Strata_CostOpInterface>]> {
  let summary = "splits a tensor into equal parts along an axis";
  let description = [{
    Splits `input` into as many equal parts along `axis` as there are results.

    ```mlir
    %q, %k, %v = strata.split %x {axis = 0 : i64} : (tensor<3x8x4x64x16xf32>) -> (tensor<1x8x4x64x16xf32>, tensor<1x8x4x64x16xf32>, tensor<1x8x4x64x16xf32>)
    ```
  }];
  let arguments = (ins Strata_AnyTensor:$input, I64Attr:$axis);
  let results = (outs Variadic<Strata_AnyTensor>:$results);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Strata_ConcatOp : Strata_ShapeOp<"concat"> {
  let summary = "concatenates tensors along an axis";
  let description = [{
    All inputs have the same rank, element type and dimensions except `axis`.

    ```mlir
    %y = strata.concat %a, %b {axis = 1 : i64} : (tensor<8x32xf32>, tensor<8x32xf32>) -> tensor<8x64xf32>
    ```
  }];
  let arguments = (ins Variadic<Strata_AnyTensor>:$inputs, I64Attr:$axis);
  let results = (outs Strata_AnyTensor:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
}

//===----------------------------------------------------------------------===//
// Loss
//===----------------------------------------------------------------------===//

def Strata_CrossEntropyOp : Strata_ShapeOp<"cross_entropy"> {
  let summary = "mean softmax cross-entropy against integer targets";
  let description = [{
    `logits` is `[..., C]`, `targets` integer with the shape `[...]`; the
    result is the scalar mean over all positions of
    `-log softmax(logits)[target]`, in the logits' element type.

    ```mlir
    %loss = strata.cross_entropy %logits, %targets : (tensor<8x64x512xf32>, tensor<8x64xi32>) -> tensor<f32>
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$logits, Strata_IdTensor:$targets);
  let results = (outs Strata_ScalarFloat:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
}

#endif // STRATA_OPS_TD
