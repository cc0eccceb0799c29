//===- ClusterTest.cpp - Cluster presets, YAML errors, group spans --------===//

#include "compiler/planner/Cluster.h"

#include <gtest/gtest.h>

using namespace strata::planner;

TEST(Cluster, PresetsDescribeTheirHardware) {
  std::string err;
  bool isPreset = false;
  auto a100 = clusterPreset("dgx-a100:4", err, isPreset);
  ASSERT_TRUE(a100) << err;
  EXPECT_TRUE(isPreset);
  EXPECT_EQ(a100->numDevices(), 32);
  ASSERT_EQ(a100->levels.size(), 2u);
  EXPECT_EQ(a100->levels[0].size, 8);
  EXPECT_DOUBLE_EQ(a100->levels[0].bandwidth, 300e9); // 600 GB/s both ways
  EXPECT_DOUBLE_EQ(a100->levels[1].bandwidth, 25e9);  // 200 Gb/s HDR
  EXPECT_DOUBLE_EQ(a100->device.peakFor("bfloat16"), 312e12);

  auto h100 = clusterPreset("dgx-h100:2", err, isPreset);
  ASSERT_TRUE(h100);
  EXPECT_EQ(h100->numDevices(), 16);
  EXPECT_DOUBLE_EQ(h100->levels[1].bandwidth, 50e9); // 400 Gb/s NDR

  auto local = clusterPreset("local:4", err, isPreset);
  ASSERT_TRUE(local);
  EXPECT_EQ(local->device.kind, "cpu");
  EXPECT_EQ(local->numDevices(), 4);
  EXPECT_DOUBLE_EQ(local->device.peakFor("float32"), 150e9);
}

TEST(Cluster, GpuPresetsAreOneNvlinkDomainOfTheDgxGpu) {
  std::string err;
  bool isPreset = false;
  auto one = clusterPreset("h100:1", err, isPreset);
  ASSERT_TRUE(one) << err;
  EXPECT_TRUE(isPreset);
  EXPECT_EQ(one->name, "h100:1");
  EXPECT_EQ(one->numDevices(), 1);
  ASSERT_EQ(one->levels.size(), 1u); // No InfiniBand level.
  auto dgx = *clusterPreset("dgx-h100:1", err, isPreset);
  EXPECT_EQ(one->device.name, dgx.device.name);
  EXPECT_EQ(one->device.kind, "gpu");
  EXPECT_DOUBLE_EQ(one->device.peakFor("bfloat16"),
                   dgx.device.peakFor("bfloat16"));
  EXPECT_DOUBLE_EQ(one->device.memoryBytes, dgx.device.memoryBytes);

  auto four = clusterPreset("a100:4", err, isPreset);
  ASSERT_TRUE(four) << err;
  EXPECT_EQ(four->numDevices(), 4);
  EXPECT_EQ(four->device.name, "A100-SXM4-80GB");
  EXPECT_DOUBLE_EQ(four->levels[0].bandwidth, 300e9);

  EXPECT_FALSE(clusterPreset("h100:9", err, isPreset));
  EXPECT_TRUE(isPreset);
  EXPECT_NE(err.find("at most 8 GPUs"), std::string::npos) << err;
  EXPECT_NE(err.find("dgx-h100:NODES"), std::string::npos) << err;
  EXPECT_FALSE(clusterPreset("a100:0", err, isPreset));
  EXPECT_NE(err.find("number of GPUs"), std::string::npos) << err;
}

TEST(Cluster, BadPresetCountNamesTheFlag) {
  std::string err;
  bool isPreset = false;
  EXPECT_FALSE(clusterPreset("dgx-a100:zero", err, isPreset));
  EXPECT_TRUE(isPreset);
  EXPECT_NE(err.find("--cluster dgx-a100:zero"), std::string::npos) << err;
  EXPECT_FALSE(clusterPreset("mycluster.yaml", err, isPreset));
  EXPECT_FALSE(isPreset);
}

TEST(Cluster, QuantitiesWithUnits) {
  EXPECT_DOUBLE_EQ(*parseQuantity("200 Gb/s", "bandwidth"), 25e9);
  EXPECT_DOUBLE_EQ(*parseQuantity("2039 GB/s", "bandwidth"), 2039e9);
  EXPECT_DOUBLE_EQ(*parseQuantity("80 GiB", "bytes"), 80.0 * (1 << 30));
  EXPECT_DOUBLE_EQ(*parseQuantity("5 us", "time"), 5e-6);
  EXPECT_DOUBLE_EQ(*parseQuantity("312 TFLOP/s", "flops"), 312e12);
  EXPECT_DOUBLE_EQ(*parseQuantity("0.8", "fraction"), 0.8);
  EXPECT_FALSE(parseQuantity("80 parsecs", "bytes"));
  EXPECT_FALSE(parseQuantity("fast", "bandwidth"));
}

static const char *goodSpec = R"(name: two-nodes
device:
  name: A100
  kind: gpu
  memory: 80 GiB
  memory_bandwidth: 2039 GB/s
  peak_flops: {bfloat16: 312 TFLOP/s, float32: 19.5 TFLOP/s}
  compute_units: 108
  efficiency: {gemm: 0.7, gemm_rows_half: 48, memory: 0.8, attention: 0.35, kernel_overhead: 4 us}
topology:
  - {name: nvlink, size: 8, bandwidth: 300 GB/s, latency: 3 us}
  - {name: ib, size: 2, bandwidth: 200 Gb/s, latency: 5 us, oversubscription: 2}
)";

TEST(Cluster, YamlSpecParses) {
  std::vector<PlannerDiag> diags;
  std::string text = goodSpec;
  auto c = loadClusterSpec("two.yaml", diags, &text);
  ASSERT_TRUE(c) << (diags.empty() ? "" : diags[0].str());
  EXPECT_EQ(c->name, "two-nodes");
  EXPECT_EQ(c->numDevices(), 16);
  EXPECT_DOUBLE_EQ(c->device.gemmEfficiency, 0.7);
  EXPECT_DOUBLE_EQ(c->device.kernelOverheadS, 4e-6);
  EXPECT_DOUBLE_EQ(c->device.gemmRowsHalf, 48);
  EXPECT_DOUBLE_EQ(c->device.attentionEfficiency, 0.35);
  EXPECT_DOUBLE_EQ(c->levels[1].bandwidth, 25e9);
  EXPECT_DOUBLE_EQ(c->levels[1].oversubscription, 2.0);
}

TEST(Cluster, YamlWithoutEfficienciesGetsThePresetsNumbers) {
  // The dgx-a100 preset written out by hand, efficiencies left out: the
  // device must be the preset's, so both predict the same.
  const char *gpuText = R"(
device:
  kind: gpu
  memory: 80 GiB
  reserved_memory: 1 GiB
  memory_bandwidth: 2039 GB/s
  peak_flops: {bfloat16: 312 TFLOP/s, float16: 312 TFLOP/s, float32: 19.5 TFLOP/s}
  compute_units: 108
topology:
  - {name: nvlink, size: 8, bandwidth: 300 GB/s, latency: 3 us}
)";
  std::vector<PlannerDiag> diags;
  std::string text = gpuText;
  auto yaml = loadClusterSpec("a100.yaml", diags, &text);
  ASSERT_TRUE(yaml) << (diags.empty() ? "" : diags[0].str());
  std::string err;
  bool isPreset = false;
  auto preset = clusterPreset("dgx-a100:1", err, isPreset);
  ASSERT_TRUE(preset) << err;
  for (const DeviceSpec *d : {&yaml->device, &preset->device}) {
    EXPECT_DOUBLE_EQ(d->gemmEfficiency, 0.72);
    EXPECT_DOUBLE_EQ(d->memoryEfficiency, 0.8);
    EXPECT_DOUBLE_EQ(d->kernelOverheadS, 5e-6);
    EXPECT_DOUBLE_EQ(d->gemmDepthHalf, 128);
  }
  // H100 presets: A100's 0.72 scaled by the measured matmul ratio
  // (792.1/989) / (267.9/312) = 0.93275 -> 0.67158 (H100 SXM at 700 W, not
  // the GH200's 821.0 of the same table).
  for (const char *name : {"dgx-h100:1", "h100:8"}) {
    auto h100 = clusterPreset(name, err, isPreset);
    ASSERT_TRUE(h100) << err;
    EXPECT_NEAR(h100->device.gemmEfficiency, 0.67158, 5e-5) << name;
    EXPECT_DOUBLE_EQ(h100->device.gemmEfficiency, h100GemmEfficiency());
    // K 1/2 scaled by the per-SM tensor rate: 128 x (989/132)/(312/108).
    EXPECT_NEAR(h100->device.gemmDepthHalf, 331.97, 0.01) << name;
  }
  // A CPU device gets the local:N preset's numbers.
  text = "device: {kind: cpu, memory: 4 GiB, memory_bandwidth: 20 GB/s, "
         "peak_flops: {float32: 150 GFLOP/s}}\n"
         "topology: [{name: shm, size: 2, bandwidth: 5 GB/s, latency: 1 us}]\n";
  auto cpu = loadClusterSpec("cpu.yaml", diags, &text);
  ASSERT_TRUE(cpu) << (diags.empty() ? "" : diags[0].str());
  auto local = clusterPreset("local:2", err, isPreset);
  ASSERT_TRUE(local) << err;
  EXPECT_DOUBLE_EQ(cpu->device.gemmEfficiency, local->device.gemmEfficiency);
  EXPECT_DOUBLE_EQ(cpu->device.memoryEfficiency,
                   local->device.memoryEfficiency);
  EXPECT_DOUBLE_EQ(cpu->device.kernelOverheadS, local->device.kernelOverheadS);
  EXPECT_DOUBLE_EQ(cpu->sharedHostMemoryBytes, 0);
  EXPECT_GT(local->sharedHostMemoryBytes, 0);
}

TEST(Cluster, YamlErrorsAreLocated) {
  std::vector<PlannerDiag> diags;
  std::string text =
      std::string(goodSpec) +
      "  - {name: x, size: 2, bandwith: 1 GB/s, latency: 1 us}\n";
  EXPECT_FALSE(loadClusterSpec("bad.yaml", diags, &text));
  ASSERT_FALSE(diags.empty());
  bool sawTypo = false, sawMissing = false;
  for (auto &d : diags) {
    if (d.message.find("unknown key 'bandwith'") != std::string::npos) {
      sawTypo = true;
      EXPECT_EQ(d.line, 13);
      EXPECT_GT(d.col, 1);
      EXPECT_EQ(d.str().rfind("bad.yaml:13:", 0), 0u) << d.str();
    }
    if (d.message.find("missing 'bandwidth'") != std::string::npos)
      sawMissing = true;
  }
  EXPECT_TRUE(sawTypo);
  EXPECT_TRUE(sawMissing);

  diags.clear();
  std::string units =
      "device:\n  memory: 80 parsecs\n  memory_bandwidth: 1 GB/s\n"
      "  peak_flops: {float32: 1 TFLOP/s}\ntopology:\n"
      "  - {size: 2, bandwidth: 1 GB/s, latency: 1 us}\n";
  EXPECT_FALSE(loadClusterSpec("u.yaml", diags, &units));
  ASSERT_FALSE(diags.empty());
  EXPECT_EQ(diags[0].line, 2);
  EXPECT_NE(diags[0].message.find("80 GiB"), std::string::npos);

  // A count out of range is an error at its line, not a cast (the fuzzer
  // found `collective_units: .43648e12`).
  diags.clear();
  std::string huge =
      "device:\n  memory: 80 GiB\n  memory_bandwidth: 1 GB/s\n"
      "  peak_flops: {float32: 1 TFLOP/s}\n  collective_units: .43648e12\n"
      "topology:\n  - {size: 2, bandwidth: 1 GB/s, latency: 1 us}\n";
  EXPECT_FALSE(loadClusterSpec("h.yaml", diags, &huge));
  ASSERT_FALSE(diags.empty());
  EXPECT_EQ(diags[0].line, 5);
  EXPECT_NE(diags[0].message.find("'collective_units' must be a whole number"),
            std::string::npos)
      << diags[0].str();

  diags.clear();
  std::string broken = "device: [unclosed\n";
  EXPECT_FALSE(loadClusterSpec("b.yaml", diags, &broken));
  ASSERT_FALSE(diags.empty());
  EXPECT_GT(diags[0].line, 0);

  diags.clear();
  EXPECT_FALSE(resolveCluster("/nonexistent/cluster.yaml", diags));
  ASSERT_FALSE(diags.empty());
  EXPECT_NE(diags[0].message.find("preset"), std::string::npos);
}

TEST(Cluster, GroupSpansFollowRankLayout) {
  std::string err;
  bool isPreset;
  auto c = *clusterPreset("dgx-a100:4", err, isPreset);
  GroupSpan tpInNode = spanOf(c, 1, 8);
  EXPECT_EQ(tpInNode.members, (std::vector<int64_t>{8, 8}));
  EXPECT_EQ(tpInNode.outermostLevel(), 0u);
  GroupSpan dpAcross = spanOf(c, 8, 4);
  EXPECT_EQ(dpAcross.members, (std::vector<int64_t>{1, 4}));
  EXPECT_EQ(dpAcross.outermostLevel(), 1u);
  GroupSpan mixed = spanOf(c, 2, 16); // 4 per node over 4 nodes
  EXPECT_EQ(mixed.members, (std::vector<int64_t>{4, 16}));
}

TEST(Cluster, CollectiveKeysParse) {
  // The keys of the NCCL model: the library, the compute units its
  // kernels take, the softmax exponential rate and NVLS.
  std::string text = R"(
collectives: alpha-beta
device:
  kind: gpu
  memory: 80 GiB
  memory_bandwidth: 3350 GB/s
  peak_flops: {bfloat16: 989 TFLOP/s}
  compute_units: 132
  collective_units: 24
  exp_rate: 3.86496e12
topology:
  - {name: nvlink, size: 8, bandwidth: 450 GB/s, latency: 3 us, nvls_bus_bandwidth: 480 GB/s}
)";
  std::vector<PlannerDiag> diags;
  auto c = loadClusterSpec("h100.yaml", diags, &text);
  ASSERT_TRUE(c) << (diags.empty() ? "" : diags[0].str());
  EXPECT_EQ(c->collectives, "alpha-beta");
  EXPECT_EQ(c->device.collectiveUnits, 24);
  EXPECT_DOUBLE_EQ(c->device.expRate, 3.86496e12);
  EXPECT_DOUBLE_EQ(c->levels[0].nvlsBusBandwidth, 480e9);
  // A GPU without collective_units takes the preset's 16.
  std::string err;
  bool isPreset = false;
  EXPECT_EQ(clusterPreset("dgx-h100:1", err, isPreset)->device.collectiveUnits,
            16);
  text = "collectives: mpi\n" + text.substr(text.find("device:"));
  diags.clear();
  EXPECT_FALSE(loadClusterSpec("bad.yaml", diags, &text));
  ASSERT_FALSE(diags.empty());
  EXPECT_NE(diags[0].str().find("'nccl' or 'alpha-beta'"), std::string::npos);
}

TEST(Cluster, AttentionKernelNamesAMeasuredKernel) {
  // `attention_kernel` picks measured rates by sequence length for a device
  // the name identifies (AttentionKernels.h); an unknown kernel is an error
  // at its line that lists the known ones. The A100 presets run
  // FlashAttention-2, the H100 presets cuDNN's scalar rates.
  const char *text = R"(
device:
  name: A100-SXM4-80GB
  kind: gpu
  memory: 80 GiB
  memory_bandwidth: 2039 GB/s
  peak_flops: {bfloat16: 312 TFLOP/s}
  compute_units: 108
  attention_kernel: flash-attn-triton
topology:
  - {name: nvlink, size: 8, bandwidth: 300 GB/s, latency: 3 us}
)";
  std::vector<PlannerDiag> diags;
  std::string yaml = text;
  auto c = loadClusterSpec("a100.yaml", diags, &yaml);
  ASSERT_TRUE(c) << (diags.empty() ? "" : diags[0].str());
  EXPECT_EQ(c->device.attentionKernel, "flash-attn-triton");
  std::string bad = yaml;
  bad.replace(bad.find("flash-attn-triton"), 17, "flash-attn-9");
  diags.clear();
  EXPECT_FALSE(loadClusterSpec("bad.yaml", diags, &bad));
  ASSERT_FALSE(diags.empty());
  EXPECT_NE(diags[0].str().find("bad.yaml:9:"), std::string::npos)
      << diags[0].str();
  EXPECT_NE(diags[0].str().find("unknown attention_kernel 'flash-attn-9'; "
                                "use one of: flash-attn-2, flash-attn-triton"),
            std::string::npos)
      << diags[0].str();
  std::string err;
  bool isPreset = false;
  EXPECT_EQ(clusterPreset("dgx-a100:1", err, isPreset)->device.attentionKernel,
            "flash-attn-2");
  EXPECT_EQ(clusterPreset("a100:8", err, isPreset)->device.attentionKernel,
            "flash-attn-2");
  EXPECT_EQ(clusterPreset("dgx-h100:1", err, isPreset)->device.attentionKernel,
            "");
}
