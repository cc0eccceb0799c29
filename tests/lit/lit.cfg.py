# lit configuration for Strata's IR, pass and frontend tests.
import os

import lit.formats

config.name = "strata"
config.test_format = lit.formats.ShTest(True)
config.suffixes = [".mlir", ".test"]
config.excludes = ["Inputs", "lit.cfg.py", "lit.site.cfg.py", "CMakeLists.txt"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.strata_obj_root, "tests", "lit")

# Tools first: ours, then FileCheck/not/count from LLVM 19.
path = os.pathsep.join([config.strata_tools_dir, config.filecheck_dir,
                        config.environment.get("PATH", os.environ.get("PATH", ""))])
config.environment["PATH"] = path
config.environment["FILECHECK_OPTS"] = "-enable-var-scope"

config.substitutions.append(("%examples", os.path.join(config.strata_src_root, "examples")))
config.substitutions.append(("%python", config.python_executable))

# ONNX import (built only with libonnx-dev): tests say `REQUIRES: onnx` and
# write their models as text protos that %onnx-encode turns into .onnx files.
if getattr(config, "strata_onnx", "OFF") == "ON":
    config.available_features.add("onnx")
    config.substitutions.append(
        ("%onnx-encode", "protoc --encode=onnx.ModelProto -I%s onnx/onnx.proto"
         % config.onnx_include_dir))
