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

/// A forward op: shape rule, cost rule and gradient rule.
class Strata_ForwardOp<string mnemonic, list<Trait> traits = []>
    : Strata_ShapeOp<mnemonic, !listconcat(traits,
        [DeclareOpInterfaceMethods<Strata_DifferentiableOpInterface>])>;

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

def Strata_EmbeddingOp : Strata_ForwardOp<"embedding"> {
  let summary = "looks up rows of an embedding table";
  let description = [{
    `result[i..., :] = table[ids[i...] - row_start, :]`. The table is
    `[V, H]`, the ids any-rank integers; the result has the ids' shape plus
    `H`. Ids outside `[row_start, row_start + V)` give zero rows, so a table
    sharded over the vocabulary (tensor parallelism) looks up its own rows
    and an all-reduce completes the embedding.

    ```mlir
    %x = strata.embedding %wte, %tokens : (tensor<512x64xf32>, tensor<8x64xi32>) -> tensor<8x64x64xf32>
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$table, Strata_IdTensor:$ids,
                       DefaultValuedAttr<I64Attr, "0">:$row_start);
  let results = (outs Strata_FloatTensor:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
}

def Strata_MatmulOp : Strata_ForwardOp<"matmul"> {
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

def Strata_BiasAddOp : Strata_ForwardOp<"bias_add"> {
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

class Strata_BinaryOp<string mnemonic, string what> : Strata_ForwardOp<mnemonic> {
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

def Strata_ScaleOp : Strata_ForwardOp<"scale"> {
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

class Strata_UnaryOp<string mnemonic, string what> : Strata_ForwardOp<mnemonic> {
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

def Strata_LayerNormOp : Strata_ForwardOp<"layer_norm"> {
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

def Strata_SoftmaxOp : Strata_ForwardOp<"softmax"> {
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
                                     ["getBytesAccessed"]>,
     DeclareOpInterfaceMethods<Strata_DifferentiableOpInterface>]> {
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

def Strata_TransposeOp : Strata_ForwardOp<"transpose"> {
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
    [Pure, DeclareOpInterfaceMethods<Strata_CostOpInterface>,
     DeclareOpInterfaceMethods<Strata_DifferentiableOpInterface>]> {
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

  let extraClassDeclaration = [{
    /// `axis` in [0, rank): negative axes count from the end.
    int64_t getNormalizedAxis() {
      int64_t axis = static_cast<int64_t>(getAxis());
      int64_t rank = ::llvm::cast<::mlir::RankedTensorType>(
          getOperation()->getOperand(0).getType()).getRank();
      return axis < 0 ? axis + rank : axis;
    }
  }];
  let hasVerifier = 1;
}

def Strata_ConcatOp : Strata_ForwardOp<"concat"> {
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

  let extraClassDeclaration = [{
    /// `axis` in [0, rank): negative axes count from the end.
    int64_t getNormalizedAxis() {
      int64_t axis = static_cast<int64_t>(getAxis());
      int64_t rank = ::llvm::cast<::mlir::RankedTensorType>(
          getOperation()->getOperand(0).getType()).getRank();
      return axis < 0 ? axis + rank : axis;
    }
  }];
}

//===----------------------------------------------------------------------===//
// Loss
//===----------------------------------------------------------------------===//

def Strata_CrossEntropyOp : Strata_ForwardOp<"cross_entropy"> {
  let summary = "mean softmax cross-entropy against integer targets";
  let description = [{
    `logits` is `[..., C]`, `targets` integer with the shape `[...]`; the
    result is the scalar mean over all positions of
    `-log softmax(logits)[target]`, in float32 (float64 for float64 logits,
    which gradient checks use).

    ```mlir
    %loss = strata.cross_entropy %logits, %targets : (tensor<8x64x512xf32>, tensor<8x64xi32>) -> tensor<f32>
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$logits, Strata_IdTensor:$targets);
  let results = (outs Strata_ScalarFloat:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
}

//===----------------------------------------------------------------------===//
// Constants and slices
//===----------------------------------------------------------------------===//

def Strata_ConstantOp : Strata_Op<"constant", [Pure]> {
  let summary = "a tensor filled with one value";
  let description = [{
    Every element is `value`. Autodiff seeds the loss gradient with one
    (`1 / micro-batches per step`, so the step's loss is the mean over the
    global batch).

    ```mlir
    %seed = strata.constant {value = 2.500000e-01 : f64} : tensor<f32>
    ```
  }];
  let arguments = (ins F64Attr:$value);
  let results = (outs Strata_FloatTensor:$result);
  let assemblyFormat = "attr-dict `:` type($result)";
}

def Strata_SliceOp : Strata_ForwardOp<"slice"> {
  let summary = "a contiguous range along one axis";
  let description = [{
    `result` is `input[..., offset : offset + size, ...]` along `axis`
    (the gradient of `concat`; also drops the padding of a vocabulary padded
    for tensor parallelism). Its gradient puts the result gradient back
    between zeros.

    ```mlir
    %y = strata.slice %x {axis = 1 : i64, offset = 8 : i64, size = 8 : i64} : (tensor<4x16xf32>) -> tensor<4x8xf32>
    ```
  }];
  let arguments = (ins Strata_AnyTensor:$input, I64Attr:$axis, I64Attr:$offset,
                       I64Attr:$size);
  let results = (outs Strata_AnyTensor:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";

  let extraClassDeclaration = [{
    /// `axis` in [0, rank): negative axes count from the end.
    int64_t getNormalizedAxis() {
      int64_t axis = static_cast<int64_t>(getAxis());
      int64_t rank = ::llvm::cast<::mlir::RankedTensorType>(
          getOperation()->getOperand(0).getType()).getRank();
      return axis < 0 ? axis + rank : axis;
    }
  }];
}

//===----------------------------------------------------------------------===//
// Gradient ops (built by the forward ops' gradient rules)
//===----------------------------------------------------------------------===//

def Strata_EmbeddingGradOp : Strata_Op<"embedding_grad", [Pure]> {
  let summary = "gradient of an embedding lookup with respect to the table";
  let description = [{
    Scatter-adds the rows of `grad` (`[..., H]`) into a zero `[V, H]` table at
    rows `ids - row_start` (ids outside the table are skipped); `V` comes
    from the result type.

    ```mlir
    %dwte = strata.embedding_grad %dx, %tokens : (tensor<8x64x64xf32>, tensor<8x64xi32>) -> tensor<512x64xf32>
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$grad, Strata_IdTensor:$ids,
                       DefaultValuedAttr<I64Attr, "0">:$row_start);
  let results = (outs Strata_FloatTensor:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Strata_BiasGradOp : Strata_ShapeOp<"bias_grad"> {
  let summary = "sums a tensor over every dimension but the last";
  let description = [{
    The gradient of `bias_add` with respect to the bias.

    ```mlir
    %db = strata.bias_grad %dy : (tensor<8x64x192xf32>) -> tensor<192xf32>
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$grad);
  let results = (outs Strata_FloatTensor:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
}

class Strata_ActivationGradOp<string mnemonic, string of>
    : Strata_ShapeOp<mnemonic> {
  let summary = "gradient of " # of;
  let description = [{
    `result = grad * f'(input)` for f = }] # of # [{, where `input` is the
    forward op's input.

    ```mlir
    %dx = strata.}] # mnemonic # [{ %dy, %x : (tensor<8x64xf32>, tensor<8x64xf32>) -> tensor<8x64xf32>
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$grad, Strata_FloatTensor:$input);
  let results = (outs Strata_FloatTensor:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
}

def Strata_GeluGradOp : Strata_ActivationGradOp<"gelu_grad", "`strata.gelu`">;
def Strata_ReluGradOp : Strata_ActivationGradOp<"relu_grad", "`strata.relu`">;

def Strata_LayerNormGradOp : Strata_ShapeOp<"layer_norm_grad"> {
  let summary = "gradients of layer_norm";
  let description = [{
    From the result gradient, the forward input and `gamma`, computes the
    gradients with respect to the input, `gamma` and `beta` (mean and
    variance are recomputed from the input).

    ```mlir
    %dx, %dg, %db = strata.layer_norm_grad %dy, %x, %g {epsilon = 1.0e-05 : f64} : (tensor<8x64xf32>, tensor<8x64xf32>, tensor<64xf32>) -> (tensor<8x64xf32>, tensor<64xf32>, tensor<64xf32>)
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$grad, Strata_FloatTensor:$input,
                       Strata_FloatTensor:$gamma, F64Attr:$epsilon);
  let results = (outs Strata_FloatTensor:$input_grad,
                      Strata_FloatTensor:$gamma_grad,
                      Strata_FloatTensor:$beta_grad);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
}

def Strata_SoftmaxGradOp : Strata_ShapeOp<"softmax_grad"> {
  let summary = "gradient of softmax";
  let description = [{
    With `output` the forward result `y`: `result = scale * y * (grad -
    sum(grad * y))` along the last dimension. Masked (causal) entries have
    `y = 0` and get no gradient.

    ```mlir
    %ds = strata.softmax_grad %dp, %p {scale = 2.500000e-01 : f64} : (tensor<8x4x64x64xf32>, tensor<8x4x64x64xf32>) -> tensor<8x4x64x64xf32>
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$grad, Strata_FloatTensor:$output,
                       DefaultValuedAttr<F64Attr, "1.0">:$scale);
  let results = (outs Strata_FloatTensor:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
}

def Strata_CrossEntropyGradOp : Strata_ShapeOp<"cross_entropy_grad"> {
  let summary = "gradient of the mean cross-entropy with respect to the logits";
  let description = [{
    `result = loss_grad * (softmax(logits) - onehot(targets)) / positions`,
    where `loss_grad` is the scalar gradient flowing into the loss.

    ```mlir
    %dl = strata.cross_entropy_grad %logits, %targets, %seed : (tensor<8x64x512xf32>, tensor<8x64xi32>, tensor<f32>) -> tensor<8x64x512xf32>
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$logits, Strata_IdTensor:$targets,
                       Strata_ScalarFloat:$loss_grad);
  let results = (outs Strata_FloatTensor:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
}

//===----------------------------------------------------------------------===//
// Training state: gradient accumulation and optimizer updates
//===----------------------------------------------------------------------===//

def Strata_AccumulateGradOp : Strata_Op<"accumulate_grad",
    [MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "adds a gradient into a parameter's gradient buffer";
  let description = [{
    Adds `grad` into the gradient buffer of the parameter named `param`
    (which has `grad`'s type). Gradient buffers are zeroed at the start of
    each step and accumulate over its micro-batches.

    ```mlir
    strata.accumulate_grad %dw {param = "h.0.mlp.c_fc.weight"} : tensor<64x256xf32>
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$grad, StrAttr:$param);
  let assemblyFormat = "$grad attr-dict `:` type($grad)";
}

def Strata_ClipGradNormOp : Strata_Op<"clip_grad_norm",
    [MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "clips all gradients by their global L2 norm";
  let description = [{
    Computes the L2 norm over every parameter's gradient and, if it exceeds
    `max_norm`, scales all gradients by `max_norm / (norm + 1e-6)` (exactly
    `torch.nn.utils.clip_grad_norm_`).

    ```mlir
    strata.clip_grad_norm {max_norm = 1.000000e+00 : f64}
    ```
  }];
  let arguments = (ins F64Attr:$max_norm);
  let assemblyFormat = "attr-dict";
}

def Strata_SgdUpdateOp : Strata_Op<"sgd_update",
    [MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "SGD with momentum on one parameter";
  let description = [{
    `torch.optim.SGD` semantics: `g += weight_decay * p; buf = momentum * buf
    + g` (buf = g on the first step); `p -= lr * buf`. The learning rate is
    the step's value of the module's schedule.

    ```mlir
    strata.sgd_update {param = "fc.weight", momentum = 9.000000e-01 : f64, weight_decay = 0.000000e+00 : f64}
    ```
  }];
  let arguments = (ins StrAttr:$param, F64Attr:$momentum, F64Attr:$weight_decay);
  let assemblyFormat = "attr-dict";
}

def Strata_AdamWUpdateOp : Strata_Op<"adamw_update",
    [MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "AdamW on one parameter";
  let description = [{
    `torch.optim.AdamW` semantics: decoupled weight decay `p *= 1 - lr *
    weight_decay`, then bias-corrected Adam moments. Weight decay is non-zero
    only for parameters of rank >= 2 (matmul weights, embeddings).

    ```mlir
    strata.adamw_update {param = "wte.weight", beta1 = 9.000000e-01 : f64, beta2 = 9.990000e-01 : f64, eps = 1.000000e-08 : f64, weight_decay = 1.000000e-01 : f64}
    ```
  }];
  let arguments = (ins StrAttr:$param, F64Attr:$beta1, F64Attr:$beta2,
                       F64Attr:$eps, F64Attr:$weight_decay);
  let assemblyFormat = "attr-dict";
}

//===----------------------------------------------------------------------===//
// Collectives (SPMD): each rank holds its own value; `group` names the
// process-group axis ("tp", "dp", "pp") the collective runs over. Gradient
// rules follow Megatron-LM's conjugate pairs.
//===----------------------------------------------------------------------===//

def Strata_AllReduceOp : Strata_ForwardOp<"all_reduce"> {
  let summary = "sums a tensor over a process group; result replicated";
  let description = [{
    Every member of `group` gets the sum of all members' `input`. The result
    is replicated, so its gradient is the (replicated) result gradient:
    identity in reverse mode (Megatron's `g` after a row-parallel matmul).

    ```mlir
    %y = strata.all_reduce %partial {group = "tp"} : (tensor<4x64x64xf32>) -> tensor<4x64x64xf32>
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$input, StrAttr:$group);
  let results = (outs Strata_FloatTensor:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
}

def Strata_ReplicateOp : Strata_ForwardOp<"replicate"> {
  let summary = "identity forward, gradient summed over a process group";
  let description = [{
    Marks a replicated value entering a region where each member of `group`
    computes a different part (a column-parallel matmul): the forward is the
    identity and the gradient is all-reduced (Megatron's `f`).

    ```mlir
    %x2 = strata.replicate %x {group = "tp"} : (tensor<4x64x64xf32>) -> tensor<4x64x64xf32>
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$input, StrAttr:$group);
  let results = (outs Strata_FloatTensor:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
}

def Strata_AllGatherOp : Strata_ForwardOp<"all_gather"> {
  let summary = "concatenates the members' tensors along an axis";
  let description = [{
    The result is the concatenation along `axis` of every member's `input`,
    in group-rank order, and `size` is the group size. With `replicated`
    (the consumers compute the same thing on every member, e.g. a loss over
    gathered logits) the gradient is this member's slice of the result
    gradient; otherwise (the consumers are partial, as in sequence
    parallelism) it is the reduce-scatter of the result gradient.

    ```mlir
    %y = strata.all_gather %x {group = "tp", axis = 1 : i64, size = 2 : i64} : (tensor<4x32x64xf32>) -> tensor<4x64x64xf32>
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$input, StrAttr:$group, I64Attr:$axis,
                       I64Attr:$size,
                       DefaultValuedAttr<BoolAttr, "false">:$replicated);
  let results = (outs Strata_FloatTensor:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";

  let extraClassDeclaration = [{
    /// `axis` in [0, rank): negative axes count from the end.
    int64_t getNormalizedAxis() {
      int64_t axis = static_cast<int64_t>(getAxis());
      int64_t rank = ::llvm::cast<::mlir::RankedTensorType>(
          getOperation()->getOperand(0).getType()).getRank();
      return axis < 0 ? axis + rank : axis;
    }
  }];
}

def Strata_ReduceScatterOp : Strata_ForwardOp<"reduce_scatter"> {
  let summary = "sums over a process group and keeps this member's slice";
  let description = [{
    Sums `input` over the members of `group` (of `size` members) and keeps
    slice `group rank` along `axis`. Its gradient is the all-gather of the
    result gradient (sequence parallelism's conjugate of all_gather).

    ```mlir
    %y = strata.reduce_scatter %x {group = "tp", axis = 1 : i64, size = 2 : i64} : (tensor<4x64x64xf32>) -> tensor<4x32x64xf32>
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$input, StrAttr:$group, I64Attr:$axis,
                       I64Attr:$size);
  let results = (outs Strata_FloatTensor:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";

  let extraClassDeclaration = [{
    /// `axis` in [0, rank): negative axes count from the end.
    int64_t getNormalizedAxis() {
      int64_t axis = static_cast<int64_t>(getAxis());
      int64_t rank = ::llvm::cast<::mlir::RankedTensorType>(
          getOperation()->getOperand(0).getType()).getRank();
      return axis < 0 ? axis + rank : axis;
    }
  }];
}

def Strata_TakeSliceOp : Strata_ShapeOp<"take_slice"> {
  let summary = "this member's slice of a replicated tensor";
  let description = [{
    Slice `group rank` of `size` equal parts of `input` along `axis`: the
    gradient of a replicated all_gather.

    ```mlir
    %y = strata.take_slice %x {group = "tp", axis = 1 : i64, size = 2 : i64} : (tensor<4x64x64xf32>) -> tensor<4x32x64xf32>
    ```
  }];
  let arguments = (ins Strata_AnyTensor:$input, StrAttr:$group, I64Attr:$axis,
                       I64Attr:$size);
  let results = (outs Strata_FloatTensor:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";

  let extraClassDeclaration = [{
    /// `axis` in [0, rank): negative axes count from the end.
    int64_t getNormalizedAxis() {
      int64_t axis = static_cast<int64_t>(getAxis());
      int64_t rank = ::llvm::cast<::mlir::RankedTensorType>(
          getOperation()->getOperand(0).getType()).getRank();
      return axis < 0 ? axis + rank : axis;
    }
  }];
}

def Strata_VocabParallelCrossEntropyOp
    : Strata_ForwardOp<"vocab_parallel_cross_entropy"> {
  let summary = "mean cross-entropy over logits sharded by vocabulary";
  let description = [{
    Each member of `group` holds the logits of its slice of the vocabulary:
    local column `c` is class `vocab_start + c`, and only the first `valid`
    columns are real (the rest pad a vocabulary padded to a multiple of the
    group size). The result, identical on every member, is the mean over all
    positions of `-log softmax(logits)[target]` over the whole vocabulary
    (Megatron-LM's vocabulary-parallel cross-entropy: the row maximum, the
    sum of exponentials and the target logit are all-reduced, never the
    logits). Its gradient is this member's slice of the softmax minus the
    one-hot target.

    ```mlir
    %loss = strata.vocab_parallel_cross_entropy %logits, %targets {group = "tp", valid = 256 : i64, vocab_start = 256 : i64} : (tensor<8x64x256xf32>, tensor<8x64xi32>) -> tensor<f32>
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$logits, Strata_IdTensor:$targets,
                       StrAttr:$group, I64Attr:$vocab_start, I64Attr:$valid);
  let results = (outs Strata_ScalarFloat:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
}

def Strata_VocabParallelCrossEntropyGradOp
    : Strata_ShapeOp<"vocab_parallel_cross_entropy_grad"> {
  let summary = "gradient of vocab_parallel_cross_entropy for this member";
  let description = [{
    `result = loss_grad * (softmax(logits) - onehot(targets)) / positions` on
    this member's `valid` columns (softmax over the whole, sharded
    vocabulary), zero on padding columns.

    ```mlir
    %dl = strata.vocab_parallel_cross_entropy_grad %logits, %targets, %seed {group = "tp", valid = 256 : i64, vocab_start = 256 : i64} : (tensor<8x64x256xf32>, tensor<8x64xi32>, tensor<f32>) -> tensor<8x64x256xf32>
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$logits, Strata_IdTensor:$targets,
                       Strata_ScalarFloat:$loss_grad, StrAttr:$group,
                       I64Attr:$vocab_start, I64Attr:$valid);
  let results = (outs Strata_FloatTensor:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
}

//===----------------------------------------------------------------------===//
// Data-parallel gradient reduction and ZeRO (in the training step)
//===----------------------------------------------------------------------===//

def Strata_GradientBucketOp : Strata_Op<"gradient_bucket",
    [MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "reduces a bucket of gradients over a process group";
  let description = [{
    Once the gradients of `params` are final for the step (after the last
    micro-batch's last `accumulate_grad` of them), sums them over `group`:
    all-reduce (`reduction = "all_reduce"`, ZeRO 0), or reduce-scatter so
    that each member keeps only its shard (`"reduce_scatter"`, ZeRO >= 1).
    The emitter starts it without blocking where it stands in the last
    micro-batch and waits for it before the optimizer step, so it overlaps
    the rest of the backward pass.

    ```mlir
    strata.gradient_bucket {group = "dp", params = ["h.1.mlp.c_proj.weight", "h.1.mlp.c_proj.bias"], reduction = "all_reduce"}
    ```
  }];
  let arguments = (ins StrAttr:$group, StrArrayAttr:$params, StrAttr:$reduction);
  let assemblyFormat = "attr-dict";
}

//===----------------------------------------------------------------------===//
// Llama family: RMSNorm, rotary embeddings, SiLU / SwiGLU, and the kv-head
// repetition of grouped-query attention, with their gradient ops
//===----------------------------------------------------------------------===//

def Strata_RmsNormOp : Strata_ForwardOp<"rms_norm"> {
  let summary = "root-mean-square normalisation over the last dimension";
  let description = [{
    `result = x * rsqrt(mean(x^2) + epsilon) * weight`, the mean over the
    last dimension; `weight` is a vector of the last dimension's size
    (Hugging Face `LlamaRMSNorm`: no mean subtraction, no bias).

    ```mlir
    %y = strata.rms_norm %x, %w {epsilon = 1.0e-05 : f64} : (tensor<8x64x64xf32>, tensor<64xf32>) -> tensor<8x64x64xf32>
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$input, Strata_FloatTensor:$weight,
                       DefaultValuedAttr<F64Attr, "1.0e-5">:$epsilon);
  let results = (outs Strata_FloatTensor:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
}

def Strata_RotaryEmbeddingOp : Strata_ForwardOp<"rotary_embedding"> {
  let summary = "rotary position embedding (RoPE), rotate_half convention";
  let description = [{
    The input is `[..., S, D]` with `D` even: position `p` is the index
    along dimension `-2` and feature pairs `(i, i + D/2)` are rotated by
    the angle `p * theta^(-2i/D)`:
    `result = x * cos + rotate_half(x) * sin` with
    `rotate_half(x) = concat(-x[..., D/2:], x[..., :D/2])` and the cos/sin
    tables repeated over both halves (Hugging Face Llama's
    `apply_rotary_pos_emb` with position ids `0 .. S-1`). Its gradient is
    the rotation by the opposite angle.

    ```mlir
    %q = strata.rotary_embedding %x {theta = 1.000000e+04 : f64} : (tensor<8x4x64x16xf32>) -> tensor<8x4x64x16xf32>
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$input,
                       DefaultValuedAttr<F64Attr, "10000.0">:$theta);
  let results = (outs Strata_FloatTensor:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
}

def Strata_SiluOp : Strata_UnaryOp<"silu",
    "SiLU (swish): `x * sigmoid(x)`.">{
  let summary = "SiLU activation";
}

def Strata_SiluMulOp : Strata_ForwardOp<"silu_mul"> {
  let summary = "SwiGLU gating: silu(gate) * up";
  let description = [{
    `result = gate * sigmoid(gate) * up`, elementwise over two tensors of
    identical shape and element type: the gated MLP of Llama,
    `down(silu(gate(x)) * up(x))`, in one op.

    ```mlir
    %a = strata.silu_mul %g, %u : (tensor<8x64x172xf32>, tensor<8x64x172xf32>) -> tensor<8x64x172xf32>
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$gate, Strata_FloatTensor:$up);
  let results = (outs Strata_FloatTensor:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
}

def Strata_RepeatInterleaveOp : Strata_ForwardOp<"repeat_interleave"> {
  let summary = "repeats every entry along an axis in place";
  let description = [{
    `result[..., i, ...] = input[..., i / repeats, ...]` along `axis`
    (`torch.repeat_interleave`): grouped-query attention repeats each of
    the `kv_heads` key/value heads for the `heads / kv_heads` query heads it
    serves. Its gradient sums each group of `repeats` entries.

    ```mlir
    %k = strata.repeat_interleave %x {axis = 1 : i64, repeats = 4 : i64} : (tensor<8x2x64x16xf32>) -> tensor<8x8x64x16xf32>
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$input, I64Attr:$axis,
                       I64Attr:$repeats);
  let results = (outs Strata_FloatTensor:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";

  let extraClassDeclaration = [{
    /// `axis` in [0, rank): negative axes count from the end.
    int64_t getNormalizedAxis() {
      int64_t axis = static_cast<int64_t>(getAxis());
      int64_t rank = ::llvm::cast<::mlir::RankedTensorType>(
          getOperation()->getOperand(0).getType()).getRank();
      return axis < 0 ? axis + rank : axis;
    }
  }];
}

def Strata_RmsNormGradOp : Strata_ShapeOp<"rms_norm_grad"> {
  let summary = "gradients of rms_norm";
  let description = [{
    From the result gradient, the forward input and `weight`, computes the
    gradients with respect to the input and `weight` (the reciprocal root
    mean square is recomputed from the input).

    ```mlir
    %dx, %dw = strata.rms_norm_grad %dy, %x, %w {epsilon = 1.0e-05 : f64} : (tensor<8x64xf32>, tensor<8x64xf32>, tensor<64xf32>) -> (tensor<8x64xf32>, tensor<64xf32>)
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$grad, Strata_FloatTensor:$input,
                       Strata_FloatTensor:$weight, F64Attr:$epsilon);
  let results = (outs Strata_FloatTensor:$input_grad,
                      Strata_FloatTensor:$weight_grad);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
}

def Strata_RotaryEmbeddingGradOp : Strata_ShapeOp<"rotary_embedding_grad"> {
  let summary = "gradient of rotary_embedding";
  let description = [{
    The transpose of the forward rotation: each feature pair of `grad` is
    rotated by the opposite angle.

    ```mlir
    %dx = strata.rotary_embedding_grad %dy {theta = 1.000000e+04 : f64} : (tensor<8x4x64x16xf32>) -> tensor<8x4x64x16xf32>
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$grad, F64Attr:$theta);
  let results = (outs Strata_FloatTensor:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
}

def Strata_SiluGradOp : Strata_ActivationGradOp<"silu_grad", "`strata.silu`">;

def Strata_SiluMulGradOp : Strata_ShapeOp<"silu_mul_grad"> {
  let summary = "gradients of silu_mul";
  let description = [{
    With `s = sigmoid(gate)`: `gate_grad = grad * up * s * (1 + gate * (1 -
    s))` and `up_grad = grad * gate * s`.

    ```mlir
    %dg, %du = strata.silu_mul_grad %dy, %g, %u : (tensor<8x64xf32>, tensor<8x64xf32>, tensor<8x64xf32>) -> (tensor<8x64xf32>, tensor<8x64xf32>)
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$grad, Strata_FloatTensor:$gate,
                       Strata_FloatTensor:$up);
  let results = (outs Strata_FloatTensor:$gate_grad,
                      Strata_FloatTensor:$up_grad);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
}

def Strata_RepeatInterleaveGradOp : Strata_ShapeOp<"repeat_interleave_grad"> {
  let summary = "gradient of repeat_interleave: sums each group of repeats";
  let description = [{
    `result[..., j, ...] = sum_{r < repeats} grad[..., j * repeats + r, ...]`
    along `axis`: a key/value head's gradient is the sum over the query
    heads it served.

    ```mlir
    %dx = strata.repeat_interleave_grad %dk {axis = 1 : i64, repeats = 4 : i64} : (tensor<8x8x64x16xf32>) -> tensor<8x2x64x16xf32>
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$grad, I64Attr:$axis,
                       I64Attr:$repeats);
  let results = (outs Strata_FloatTensor:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";

  let extraClassDeclaration = [{
    /// `axis` in [0, rank): negative axes count from the end.
    int64_t getNormalizedAxis() {
      int64_t axis = static_cast<int64_t>(getAxis());
      int64_t rank = ::llvm::cast<::mlir::RankedTensorType>(
          getOperation()->getOperand(0).getType()).getRank();
      return axis < 0 ? axis + rank : axis;
    }
  }];
}

//===----------------------------------------------------------------------===//
// Fused causal attention (FlashAttention-2) and its gradient
//===----------------------------------------------------------------------===//

def Strata_CausalAttentionOp : Strata_ForwardOp<"causal_attention"> {
  let summary = "causal scaled dot-product attention, never materialising scores";
  let description = [{
    `output = softmax(scale * q k^T, causal) v` per head, computed block by
    block with an online softmax (FlashAttention-2): the `[S, S]` scores and
    probabilities exist only as tiles inside the kernel. `query` is
    `[B, heads, S, D]`; `key` and `value` are `[B, kv_heads, S, D]` with
    `kv_heads` dividing `heads`: query head `h` attends to key/value head
    `h / (heads / kv_heads)` (grouped-query attention without repeating
    keys and values). The second result, `lse`, is the per-row log of the
    softmax denominator, `log(sum_j exp(scale * q_i . k_j))` over the
    unmasked `j`, in float32 (float64 for float64 operands), `[B, heads,
    S]`: with the output it is all
    the backward pass keeps (`strata.causal_attention_grad` recomputes the
    probabilities from it).

    ```mlir
    %o, %lse = strata.causal_attention %q, %k, %v {scale = 2.500000e-01 : f64} : (tensor<8x4x64x16xf32>, tensor<8x2x64x16xf32>, tensor<8x2x64x16xf32>) -> (tensor<8x4x64x16xf32>, tensor<8x4x64xf32>)
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$query, Strata_FloatTensor:$key,
                       Strata_FloatTensor:$value, F64Attr:$scale);
  let results = (outs Strata_FloatTensor:$output, Strata_FloatTensor:$lse);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
}

def Strata_CausalAttentionGradOp : Strata_ShapeOp<"causal_attention_grad"> {
  let summary = "gradients of causal_attention, recomputing scores by block";
  let description = [{
    The FlashAttention-2 backward pass: from the output gradient `grad`,
    the forward operands and the forward's `output` and `lse`, computes the
    gradients with respect to `query`, `key` and `value`. Probabilities are
    recomputed tile by tile as `exp(scale * q_i . k_j - lse_i)`; with
    `D_i = sum(grad_i * output_i)`, `dS = P * (dP - D_i)`. Key and value
    gradients of a kv head sum over the query heads it serves.

    ```mlir
    %dq, %dk, %dv = strata.causal_attention_grad %do, %q, %k, %v, %o, %lse {scale = 2.500000e-01 : f64} : (tensor<8x4x64x16xf32>, tensor<8x4x64x16xf32>, tensor<8x2x64x16xf32>, tensor<8x2x64x16xf32>, tensor<8x4x64x16xf32>, tensor<8x4x64xf32>) -> (tensor<8x4x64x16xf32>, tensor<8x2x64x16xf32>, tensor<8x2x64x16xf32>)
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$grad, Strata_FloatTensor:$query,
                       Strata_FloatTensor:$key, Strata_FloatTensor:$value,
                       Strata_FloatTensor:$output, Strata_FloatTensor:$lse,
                       F64Attr:$scale);
  let results = (outs Strata_FloatTensor:$query_grad,
                      Strata_FloatTensor:$key_grad,
                      Strata_FloatTensor:$value_grad);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
}

//===----------------------------------------------------------------------===//
// Inference (generation with a key/value cache)
//===----------------------------------------------------------------------===//

def Strata_CachedAttentionOp : Strata_Op<"cached_attention",
    [MemoryEffects<[MemRead, MemWrite]>,
     DeclareOpInterfaceMethods<InferTypeOpInterface>,
     DeclareOpInterfaceMethods<Strata_CostOpInterface>]> {
  let summary = "causal attention of one new position over a key/value cache";
  let description = [{
    One generation step of `softmax(q k^T, causal, scale) v` for the new
    position `p` (the runtime's position counter): the new key and value
    (`[B, kv_heads, 1, D]`) are written into row `p` of this op's cache
    (`[B, kv_heads, max_len, D]` each, kept across steps), then query head
    `h` attends to rows `0..p` of key/value head `h / (heads / kv_heads)`.
    The result is the context `[B, heads, 1, D]`. `strata-decode-step`
    creates it from the training graph's matmul-softmax-matmul; it has no
    gradient.

    ```mlir
    %ctx = strata.cached_attention %q, %k, %v {max_len = 64 : i64, scale = 2.500000e-01 : f64} : (tensor<1x4x1x16xf32>, tensor<1x4x1x16xf32>, tensor<1x4x1x16xf32>) -> tensor<1x4x1x16xf32>
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$query, Strata_FloatTensor:$key,
                       Strata_FloatTensor:$value, F64Attr:$scale,
                       I64Attr:$max_len);
  let results = (outs Strata_FloatTensor:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
}

def Strata_RotaryEmbeddingAtPositionOp
    : Strata_Op<"rotary_embedding_at_position",
                [MemoryEffects<[MemRead]>,
                 DeclareOpInterfaceMethods<InferTypeOpInterface>,
                 DeclareOpInterfaceMethods<Strata_CostOpInterface>]> {
  let summary = "rotary embedding of one new position (generation)";
  let description = [{
    `strata.rotary_embedding` of an input `[..., 1, D]` holding one position
    per sequence: the position is the runtime's position counter `p` (the
    token being fed), not the index along dimension `-2`, so feature pairs
    `(i, i + D/2)` are rotated by `p * theta^(-2i/D)`.
    `strata-decode-step` creates it; it has no gradient.

    ```mlir
    %q = strata.rotary_embedding_at_position %x {theta = 1.000000e+04 : f64} : (tensor<1x4x1x16xf32>) -> tensor<1x4x1x16xf32>
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$input,
                       DefaultValuedAttr<F64Attr, "10000.0">:$theta);
  let results = (outs Strata_FloatTensor:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
}

//===----------------------------------------------------------------------===//
// Mixed precision (helper bf16)
//===----------------------------------------------------------------------===//

def Strata_CastOp : Strata_Op<"cast",
    [Pure, DeclareOpInterfaceMethods<Strata_CostOpInterface>,
     DeclareOpInterfaceMethods<Strata_DifferentiableOpInterface>]> {
  let summary = "converts a tensor to another floating-point element type";
  let description = [{
    Same shape, each element rounded to the result's element type (round to
    nearest even). `strata-mixed-precision` inserts it: the bfloat16 working
    copy of a float32 master parameter. Its gradient is the cast back, so a
    parameter's gradient arrives in float32.

    ```mlir
    %wb = strata.cast %w : (tensor<64x64xf32>) -> tensor<64x64xbf16>
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$input);
  let results = (outs Strata_FloatTensor:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Elementwise functions of ONNX imports (helper onnx)
//===----------------------------------------------------------------------===//

def Strata_ElementwiseUnaryOp : Strata_ForwardOp<"unary"> {
  let summary = "an elementwise function named by its kind";
  let description = [{
    `result = f(input)` elementwise, f named by `kind`: `sqrt`, `reciprocal`
    (1/x), `erf`, `tanh`, `sigmoid` (1/(1+exp(-x))), `exp` or `neg` (-x).
    The result has the input's shape and type. Its gradient is
    `strata.unary_grad` of the same kind, which recomputes f'(x) from the
    input. Graph specs and ONNX imports write it `op: unary` with
    `attrs: {kind: erf}`.

    ```mlir
    %y = strata.unary %x {kind = "erf"} : (tensor<8x64xf32>) -> tensor<8x64xf32>
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$input, StrAttr:$kind);
  let results = (outs Strata_FloatTensor:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Strata_ElementwiseUnaryGradOp : Strata_ShapeOp<"unary_grad"> {
  let summary = "gradient of strata.unary";
  let description = [{
    `result = grad * f'(input)` for the f of `kind` (as `strata.unary`),
    where `input` is the forward op's input.

    ```mlir
    %dx = strata.unary_grad %dy, %x {kind = "erf"} : (tensor<8x64xf32>, tensor<8x64xf32>) -> tensor<8x64xf32>
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$grad, Strata_FloatTensor:$input,
                       StrAttr:$kind);
  let results = (outs Strata_FloatTensor:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Strata_ReduceMeanOp : Strata_ForwardOp<"reduce_mean"> {
  let summary = "mean over one dimension, kept with size 1";
  let description = [{
    `result[..., 0, ...] = mean_i input[..., i, ...]` over dimension `axis`
    (negative counts from the end); the result keeps that dimension with
    size 1 (ONNX ReduceMean with keepdims; a `reshape` drops it). Its
    sharding rule keeps the reduced dimension whole. Its gradient is
    `strata.reduce_mean_grad`.

    ```mlir
    %m = strata.reduce_mean %x {axis = -1 : i64} : (tensor<8x64xf32>) -> tensor<8x1xf32>
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$input, I64Attr:$axis);
  let results = (outs Strata_FloatTensor:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let extraClassDeclaration = [{
    int64_t getNormalizedAxis() {
      int64_t axis = static_cast<int64_t>(getAxis());
      int64_t rank = ::llvm::cast<::mlir::RankedTensorType>(
          getInput().getType()).getRank();
      return axis < 0 ? axis + rank : axis;
    }
  }];
}

def Strata_ReduceMeanGradOp : Strata_ShapeOp<"reduce_mean_grad"> {
  let summary = "gradient of strata.reduce_mean";
  let description = [{
    `result[..., i, ...] = grad[..., 0, ...] / size` for i < `size` along
    `axis`: the gradient of a mean over a dimension of `size` entries.

    ```mlir
    %dx = strata.reduce_mean_grad %dm {axis = 1 : i64, size = 64 : i64} : (tensor<8x1xf32>) -> tensor<8x64xf32>
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$grad, I64Attr:$axis, I64Attr:$size);
  let results = (outs Strata_FloatTensor:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
}

def Strata_ElementwiseBinaryOp : Strata_ForwardOp<"binary"> {
  let summary = "x op y elementwise, y broadcast over a run of x's dims";
  let description = [{
    `result = lhs op rhs` elementwise, op named by `kind`: `add`, `sub`,
    `mul` or `div` (one IEEE operation per element, as torch computes
    them). `rhs`, aligned to the right, repeats over its leading 1s and,
    past them, has `lhs`'s dims except one contiguous run where it has 1s
    (numpy broadcasting of that form): a scalar, a [H] weight over
    [B, S, H], a [S, 1] or [B, S, 1] norm. The result has
    `lhs`'s shape. Its sharding rule shares the matching dims' factors.
    Its gradient is built from `strata.binary` itself, `strata.mul`,
    `strata.reduce_mean` and `strata.scale` (the sum over the run) and
    `strata.bias_grad` (the sum over the leading dims).
    Graph specs and ONNX imports write it `op: binary` with
    `attrs: {kind: div}`.

    ```mlir
    %y = strata.binary %x, %w {kind = "mul"} : (tensor<8x64xf32>, tensor<64xf32>) -> tensor<8x64xf32>
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$lhs, Strata_FloatTensor:$rhs,
                       StrAttr:$kind);
  let results = (outs Strata_FloatTensor:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// {lead, outer, mid, inner}: lhs viewed as [lead, outer, mid, inner],
    /// rhs as [1, outer, 1, inner].
    ::std::array<int64_t, 4> getBroadcast();
  }];
}

#endif // STRATA_OPS_TD
