//===- OnnxNodeTests.cpp - ONNX backend node tests through Strata ---------===//
//
//   OnnxNodeTests DATA_DIR [--markdown FILE] [--verbose]
//
// For every node test under DATA_DIR (Debian's libonnx-testdata:
// DIR/test_*/model.onnx with test_data_set_*/input_N.pb and output_N.pb)
// whose nodes all have op types of Strata's ONNX list (docs/model-spec.md),
// imports the model with loadOnnxForward, builds the strata IR, evaluates it
// with the float64 reference interpreter on each data set's inputs and
// compares every output to the expected one (ONNX's backend tolerance:
// |got - want| <= 1e-7 + 1e-3 |want|). A model the importer refuses is
// SKIPPED with the importer's message (so is a test whose data has element
// types Strata has no dtype for); a wrong value, a shape mismatch or an
// evaluation error FAILS. Exits 1 on any failure or when nothing ran,
// 77 when DATA_DIR does not exist.
//
//===----------------------------------------------------------------------===//

#include "frontends/import/ImportModel.h"
#include "frontends/onnx/OnnxImport.h"
#include "tests/unit/autodiff/Interpreter.h"

#include "mlir/IR/MLIRContext.h"
#include "onnx/onnx_pb.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>

namespace fs = std::filesystem;
using namespace strata;

namespace {

/// The op types issue #13 lists for the ONNX import, plus the shape
/// helpers the importer folds: a node test made only of these is run (or
/// skipped with the importer's reason); others are not Strata's business.
const std::set<std::string> kListedOps = {"MatMul",
                                          "Gemm",
                                          "Add",
                                          "Sub",
                                          "Mul",
                                          "Div",
                                          "Pow",
                                          "Sqrt",
                                          "Reciprocal",
                                          "Reshape",
                                          "Transpose",
                                          "Split",
                                          "Slice",
                                          "Concat",
                                          "Gather",
                                          "Unsqueeze",
                                          "Squeeze",
                                          "Softmax",
                                          "LayerNormalization",
                                          "ReduceMean",
                                          "Tanh",
                                          "Erf",
                                          "Relu",
                                          "Sigmoid",
                                          "Where",
                                          "Cast",
                                          "Constant",
                                          "Expand",
                                          "Shape",
                                          "Identity",
                                          "Flatten"};

struct Outcome {
  std::string test, status, detail;
};

bool readTensor(const fs::path &file, onnx::TensorProto &t) {
  std::ifstream in(file, std::ios::binary);
  return in && t.ParseFromIstream(&in);
}

reference::Tensor toTensor(const frontend::ConstTensor &c) {
  return reference::Tensor(c.shape, c.data);
}

std::string firstLine(const std::string &s) {
  return s.substr(0, s.find('\n'));
}

struct DataSet {
  std::string name;
  std::map<std::string, frontend::ConstTensor> inputs;
  std::vector<frontend::ConstTensor> outputs;
};

/// Reads DIR/test_data_set_*; an error message on failure.
std::optional<std::string> readDataSets(const fs::path &dir,
                                        const onnx::ModelProto &model,
                                        std::vector<DataSet> &sets) {
  std::set<std::string> inits;
  for (const onnx::TensorProto &t : model.graph().initializer())
    inits.insert(t.name());
  std::vector<std::string> inputNames;
  for (const onnx::ValueInfoProto &in : model.graph().input())
    if (!inits.count(in.name()))
      inputNames.push_back(in.name());
  std::vector<fs::path> dirs;
  for (const fs::directory_entry &e : fs::directory_iterator(dir))
    if (e.is_directory() &&
        e.path().filename().string().rfind("test_data_set_", 0) == 0)
      dirs.push_back(e.path());
  std::sort(dirs.begin(), dirs.end());
  for (const fs::path &d : dirs) {
    DataSet set;
    set.name = d.filename().string();
    auto read = [&](const std::string &file,
                    frontend::ConstTensor &c) -> std::optional<std::string> {
      onnx::TensorProto t;
      if (!readTensor(d / file, t))
        return "cannot read " + set.name + "/" + file;
      if (auto err = frontend::decodeTensor(t, c))
        return set.name + "/" + file + ": " + *err;
      return std::nullopt;
    };
    for (size_t i = 0; i < inputNames.size(); ++i)
      if (auto err = read("input_" + std::to_string(i) + ".pb",
                          set.inputs[inputNames[i]]))
        return err;
    for (int i = 0; i < model.graph().output_size(); ++i) {
      set.outputs.emplace_back();
      if (auto err =
              read("output_" + std::to_string(i) + ".pb", set.outputs.back()))
        return err;
    }
    sets.push_back(std::move(set));
  }
  if (sets.empty())
    return std::string("no test_data_set_*");
  return std::nullopt;
}

/// ONNX's backend tolerance; an error message on a mismatch.
std::optional<std::string> compare(const std::string &what,
                                   const std::vector<int64_t> &shape,
                                   const std::vector<double> &got,
                                   const frontend::ConstTensor &want) {
  if (shape != want.shape)
    return what + " has shape " + reference::formatShape(shape) +
           ", expected " + reference::formatShape(want.shape);
  for (size_t k = 0; k < want.data.size(); ++k) {
    double g = got[k], w = want.data[k];
    if (!(std::fabs(g - w) <= 1e-7 + 1e-3 * std::fabs(w)))
      return what + " element " + std::to_string(k) + ": got " +
             std::to_string(g) + ", expected " + std::to_string(w);
  }
  return std::nullopt;
}

/// Imports with `constInputs` bound, evaluates and compares one data set.
/// Returns nullopt when the importer refuses (refusal set), else the
/// failure message ("" on success).
std::optional<std::string> runDataSet(const std::string &modelPath,
                                      const onnx::ModelProto &model,
                                      const DataSet &set, bool intInputsConst,
                                      mlir::MLIRContext &ctx,
                                      std::string &refusal) {
  std::map<std::string, frontend::ConstTensor> constInputs;
  if (intInputsConst)
    for (const auto &[name, c] : set.inputs)
      if (!c.isFloat)
        constInputs[name] = c;
  std::vector<frontend::Diagnostic> diags;
  frontend::OnnxForwardExtras extras;
  std::optional<frontend::ModelSpec> spec =
      frontend::loadOnnxForward(modelPath, diags, extras, constInputs);
  if (!spec) {
    refusal = diags.empty() ? "refused" : diags[0].message;
    return std::nullopt;
  }
  mlir::OwningOpRef<mlir::ModuleOp> module = importModel(*spec, ctx);
  if (!module)
    return std::string("the imported graph does not verify as strata IR");
  auto func = module->lookupSymbol<mlir::func::FuncOp>("forward");
  reference::TensorMap params, inputs;
  for (const auto &[name, c] : extras.paramValues)
    params[name] = reference::Tensor(c.shape, c.data);
  for (const auto &[name, c] : set.inputs)
    if (!constInputs.count(name))
      inputs[name] = reference::Tensor(c.shape, c.data);
  reference::Evaluation ev = reference::evaluate(func, inputs, params);
  if (!ev.ok())
    return set.name + ": evaluation: " + firstLine(ev.error);
  size_t next = 0;
  for (int i = 0; i < model.graph().output_size(); ++i) {
    const std::string &name = model.graph().output(i).name();
    std::string what = set.name + " output " + std::to_string(i);
    std::optional<std::string> err;
    auto folded = extras.constOutputs.find(name);
    if (folded != extras.constOutputs.end()) {
      err = compare(what + " (folded at import)", folded->second.shape,
                    folded->second.data, set.outputs[i]);
    } else {
      if (next >= ev.results.size())
        return what + " is missing";
      const reference::Tensor &got = ev.results[next++];
      err = compare(what, got.shape, got.data, set.outputs[i]);
    }
    if (err)
      return err;
  }
  return std::string();
}

Outcome runTest(const fs::path &dir, const onnx::ModelProto &model,
                mlir::MLIRContext &ctx) {
  Outcome o{dir.filename().string(), "", ""};
  std::vector<DataSet> sets;
  if (auto err = readDataSets(dir, model, sets)) {
    // Element types Strata has no dtype for (float16, uint8, strings, ...).
    o.status = "SKIP";
    o.detail = "test data: " + *err;
    return o;
  }
  bool hasIntInputs = false;
  for (const auto &[name, c] : sets[0].inputs)
    hasIntInputs |= !c.isFloat;
  std::string modelPath = (dir / "model.onnx").string(), firstRefusal;
  // First every input as a graph input; then integer inputs (shapes, axes,
  // split sizes) as the constants a torch export has in their place.
  for (int attempt = 0; attempt < (hasIntInputs ? 2 : 1); ++attempt) {
    bool refused = false;
    for (const DataSet &set : sets) {
      std::string refusal;
      std::optional<std::string> err =
          runDataSet(modelPath, model, set, attempt == 1, ctx, refusal);
      if (!err) {
        if (firstRefusal.empty())
          firstRefusal = refusal;
        refused = true;
        break;
      }
      if (!err->empty()) {
        o.status = "FAIL";
        o.detail = *err;
        return o;
      }
    }
    if (!refused) {
      o.status = "PASS";
      if (attempt == 1)
        o.detail = "integer inputs bound as constants";
      return o;
    }
  }
  o.status = "SKIP";
  o.detail = firstRefusal;
  return o;
}

/// Whether every node of the model has a listed op type.
bool isListed(const onnx::ModelProto &m) {
  for (const onnx::NodeProto &n : m.graph().node())
    if (!kListedOps.count(n.op_type()))
      return false;
  return m.graph().node_size() > 0;
}

} // namespace

int main(int argc, char **argv) {
  if (argc < 2) {
    std::cerr << "usage: OnnxNodeTests DATA_DIR [--markdown FILE] "
                 "[--verbose]\n";
    return 2;
  }
  fs::path dataDir = argv[1];
  std::string markdown;
  bool verbose = false;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--markdown" && i + 1 < argc)
      markdown = argv[++i];
    else if (a == "--verbose")
      verbose = true;
  }
  if (!fs::is_directory(dataDir)) {
    std::cout << "SKIP: no ONNX node test data at " << dataDir
              << " (install libonnx-testdata)\n";
    return 77;
  }
  std::vector<fs::path> dirs;
  for (const fs::directory_entry &e : fs::directory_iterator(dataDir))
    if (e.is_directory() && fs::exists(e.path() / "model.onnx"))
      dirs.push_back(e.path());
  std::sort(dirs.begin(), dirs.end());

  mlir::DialectRegistry registry;
  registerImportDialects(registry);
  mlir::MLIRContext ctx(registry);
  ctx.printOpOnDiagnostic(false);
  // Verifier messages of refused graphs are the outcome, not noise.
  mlir::ScopedDiagnosticHandler quiet(
      &ctx, [](mlir::Diagnostic &) { return mlir::success(); });

  std::vector<Outcome> outcomes;
  int pass = 0, skip = 0, fail = 0;
  for (const fs::path &d : dirs) {
    onnx::ModelProto model;
    std::ifstream in(d / "model.onnx", std::ios::binary);
    if (!in || !model.ParseFromIstream(&in) || !isListed(model))
      continue;
    Outcome o = runTest(d, model, ctx);
    (o.status == "PASS" ? pass : o.status == "SKIP" ? skip : fail)++;
    if (o.status == "FAIL" || verbose)
      std::cout << o.status << "  " << o.test
                << (o.detail.empty() ? "" : ": " + o.detail) << "\n";
    outcomes.push_back(o);
  }
  std::cout << outcomes.size() << " node tests of the listed ops out of "
            << dirs.size() << ": " << pass << " passed, " << skip
            << " skipped (the importer refuses them, with the reason), " << fail
            << " failed\n";
  if (!markdown.empty()) {
    std::ofstream md(markdown);
    md << "| node test | result | why skipped |\n| --- | --- | --- |\n";
    for (const Outcome &o : outcomes) {
      std::string detail = o.detail;
      size_t list = detail.find("; supported: ");
      if (list != std::string::npos)
        detail.erase(list);
      // Paths differ between machines; the file name is the test's.
      size_t at = detail.find(dataDir.string());
      if (at != std::string::npos)
        detail.erase(at, dataDir.string().size() + 1);
      for (char &c : detail)
        if (c == '|')
          c = '/';
      md << "| `" << o.test << "` | " << o.status << " | " << detail << " |\n";
    }
  }
  return fail || pass == 0 ? 1 : 0;
}
