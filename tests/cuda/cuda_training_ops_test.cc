// The CUDA kernels that complete the zoo's training graphs on the GPU (runtime/cuda/tensor/,
// norm/, attention/, elementwise/, conv/ and RMSprop in loss_optimizer.cu) against the CPU runtime
// as the oracle: each test runs one node on the CPU and on cuda:0 with the same inputs
// (tests/cuda_node_case.h) and compares every output. The shared per-element formulas
// (runtime/ops/*_math.h) are the CPU kernels' too, so the CPU tests check them without a
// GPU; these tests check the launches, the indexing and the reductions around them. Every
// test skips, with the reason, on a machine without a usable CUDA device.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "graph/op_domains.h"
#include "tests/cuda/cuda_node_case.h"
#include "tests/cuda/cuda_test_util.h"

namespace ot {
namespace {

using namespace cuda_case;  // NOLINT: RandomTensor, NodeSpec, ExpectSameOnCuda

HostTensor Int64s(const std::vector<int64_t>& v) { return HostTensor::FromVector(v, {static_cast<int64_t>(v.size())}); }
HostTensor Scalar(float v) { return HostTensor::FromVector(std::vector<float>{v}, {}); }
HostTensor ScalarInt64(int64_t v) { return HostTensor::FromVector(std::vector<int64_t>{v}, {}); }

class CudaTrainingOps : public ::testing::Test {
 protected:
  void SetUp() override { OT_REQUIRE_GPU(); }
};

// ---- index gradients (runtime/cuda/tensor/index_grad.cu) ----
TEST_F(CudaTrainingOps, SliceGradStepsAndNegativeAxes) {
  // data [4, 6, 5]; slice axis 1 from 1 by 2 (3 positions), axis -1 from 4 down by -2 (3).
  NodeSpec s{"SliceGrad", 17, [](Node& n) { n.SetInt("forward_opset", 13); }, {true}, kGradDomain};
  ExpectSameOnCuda(s, {RandomTensor({4, 3, 3}, 1), Int64s({1, 4}), Int64s({6, -7}), Int64s({1, -1}), Int64s({2, -2}),
                       Int64s({4, 6, 5})});
}

TEST_F(CudaTrainingOps, GatherGradAddsRepeatedAndNegativeIndices) {
  // An embedding's gradient: rows 2 and -1 (= 4) appear twice each.
  HostTensor idx = HostTensor::FromVector(std::vector<int64_t>{2, 0, -1, 2, 4, 1}, {2, 3});
  NodeSpec s{"GatherGrad", 17, [](Node& n) { n.SetInt("axis", 0); }, {true}, kGradDomain};
  ExpectSameOnCuda(s, {RandomTensor({2, 3, 7}, 2), Int64s({5, 7}), idx});
  NodeSpec inner{"GatherGrad", 17, [](Node& n) { n.SetInt("axis", 1); }, {true}, kGradDomain};
  ExpectSameOnCuda(inner, {RandomTensor({3, 4, 2}, 3), Int64s({3, 6, 2}),
                           HostTensor::FromVector(std::vector<int32_t>{5, -6, 3, 5}, {4})});
}

TEST_F(CudaTrainingOps, ScatterNDReplacesSlices) {
  HostTensor idx = HostTensor::FromVector(std::vector<int64_t>{0, 2, 1, -1, 2, 0}, {3, 2});
  ExpectSameOnCuda(NodeSpec{"ScatterND", 16}, {RandomTensor({3, 4, 5}, 4), idx, RandomTensor({3, 5}, 5)});
}

TEST_F(CudaTrainingOps, GatherNDWithBatchDims) {
  HostTensor idx = HostTensor::FromVector(std::vector<int64_t>{1, -1, 0, 2, -2, 3}, {3, 1, 2});
  NodeSpec batched{"GatherND", 13, [](Node& n) { n.SetInt("batch_dims", 1); }};
  ExpectSameOnCuda(batched, {RandomTensor({3, 2, 4, 5}, 82), idx});
  ExpectSameOnCuda(NodeSpec{"GatherND", 13}, {RandomTensor({3, 4, 5}, 83),
                                              HostTensor::FromVector(std::vector<int32_t>{2, 1, 0, -4}, {2, 2})});
}

// ---- opset 18 forms the dynamo exporter writes (registrations of existing CUDA kernels) ----
TEST_F(CudaTrainingOps, Opset18AxesAndNumOutputsInputs) {
  ExpectSameOnCuda(NodeSpec{"ReduceMean", 18, [](Node& n) { n.SetInt("keepdims", 0); }},
                   {RandomTensor({2, 3, 4}, 84), Int64s({-1, 0})});
  ExpectSameOnCuda(NodeSpec{"Split", 18, [](Node& n) {
                              n.SetInt("axis", 1);
                              n.SetInt("num_outputs", 3);
                            },
                            {true, true, true}},
                   {RandomTensor({2, 7, 3}, 85)});
  ExpectSameOnCuda(NodeSpec{"Pad", 18}, {RandomTensor({2, 3, 4}, 86), Int64s({1, 2, 0, 3}), HostTensor(), Int64s({2, -2})});
}

// ---- row normalisations (runtime/cuda/norm/row_norm.cu) ----
TEST_F(CudaTrainingOps, LayerNormalizationWithStatistics) {
  NodeSpec s{"LayerNormalization", 17, [](Node& n) { n.SetInt("axis", -1); }, {true, true, true}};
  ExpectSameOnCuda(s, {RandomTensor({3, 5, 300}, 6), RandomTensor({300}, 7), RandomTensor({300}, 8)});
  // Two normalised axes, a Scale that broadcasts over the first of them, no B.
  NodeSpec two{"LayerNormalization", 17, [](Node& n) { n.SetInt("axis", 1); n.SetFloat("epsilon", 1e-3f); }, {true}};
  ExpectSameOnCuda(two, {RandomTensor({4, 3, 10}, 9), RandomTensor({1, 10}, 10)});
}

TEST_F(CudaTrainingOps, LayerNormalizationGrad) {
  NodeSpec s{"LayerNormalizationGrad", 17, [](Node& n) { n.SetInt("axis", -1); }, {true, true, true}, kGradDomain};
  ExpectSameOnCuda(s, {RandomTensor({6, 7, 48}, 11), RandomTensor({6, 7, 48}, 12), RandomTensor({48}, 13)}, 1e-4, 1e-4);
  NodeSpec dx_only{"LayerNormalizationGrad", 17, [](Node& n) { n.SetInt("axis", 1); }, {true, false, false},
                   kGradDomain};
  ExpectSameOnCuda(dx_only, {RandomTensor({5, 2, 9}, 14), RandomTensor({5, 2, 9}, 15), RandomTensor({9}, 16)}, 1e-4,
                   1e-4);
}

TEST_F(CudaTrainingOps, InstanceNormalizationAndGrad) {
  ExpectSameOnCuda(NodeSpec{"InstanceNormalization", 17},
                   {RandomTensor({2, 3, 50}, 17), RandomTensor({3}, 18), RandomTensor({3}, 19)});
  NodeSpec grad{"InstanceNormalizationGrad", 17, [](Node&) {}, {true, true, true}, kGradDomain};
  ExpectSameOnCuda(grad, {RandomTensor({3, 4, 6, 5}, 20), RandomTensor({3, 4, 6, 5}, 21), RandomTensor({4}, 22)}, 1e-4,
                   1e-4);
}

// ---- attention (runtime/cuda/attention/) ----
TEST_F(CudaTrainingOps, AttentionCausalGroupedQueryWithMask) {
  // 4D: batch 2, 4 query heads over 2 key/value heads, 5 queries, 5 keys, head sizes 8 and 6.
  NodeSpec s{"Attention", 23, [](Node& n) { n.SetInt("is_causal", 1); }};
  ExpectSameOnCuda(s, {RandomTensor({2, 4, 5, 8}, 23), RandomTensor({2, 2, 5, 8}, 24), RandomTensor({2, 2, 5, 6}, 25),
                       RandomTensor({5, 5}, 26)});
}

TEST_F(CudaTrainingOps, Attention3dWithSoftcap) {
  NodeSpec s{"Attention", 23, [](Node& n) {
               n.SetInt("q_num_heads", 2);
               n.SetInt("kv_num_heads", 2);
               n.SetFloat("softcap", 2.f);
             }};
  ExpectSameOnCuda(s, {RandomTensor({3, 4, 8}, 27), RandomTensor({3, 6, 8}, 28), RandomTensor({3, 6, 8}, 29)});
}

TEST_F(CudaTrainingOps, AttentionGradAllOutputs) {
  NodeSpec s{"AttentionGrad", 23, [](Node& n) { n.SetInt("is_causal", 1); }, {true, true, true, true}, kGradDomain};
  ExpectSameOnCuda(s, {RandomTensor({2, 4, 5, 6}, 30), RandomTensor({2, 4, 5, 8}, 31), RandomTensor({2, 2, 5, 8}, 32),
                       RandomTensor({2, 2, 5, 6}, 33), RandomTensor({2, 1, 5, 5}, 34)},
                   1e-4, 1e-4);
  NodeSpec capped{"AttentionGrad", 23, [](Node& n) {
                    n.SetInt("q_num_heads", 2);
                    n.SetInt("kv_num_heads", 1);
                    n.SetFloat("softcap", 3.f);
                  },
                  {true, true, true}, kGradDomain};
  ExpectSameOnCuda(capped, {RandomTensor({2, 4, 16}, 35), RandomTensor({2, 4, 16}, 36), RandomTensor({2, 7, 8}, 37),
                            RandomTensor({2, 7, 8}, 38)},
                   1e-4, 1e-4);
}

// ---- elementwise (runtime/cuda/elementwise/shared_math.cu) ----
TEST_F(CudaTrainingOps, PReluAndGradWithChannelSlope) {
  ExpectSameOnCuda(NodeSpec{"PRelu", 16}, {RandomTensor({2, 3, 4, 4}, 39), RandomTensor({3, 1, 1}, 40)});
  NodeSpec grad{"PReluGrad", 16, [](Node&) {}, {true, true}, kGradDomain};
  ExpectSameOnCuda(grad, {RandomTensor({2, 3, 4, 4}, 41), RandomTensor({2, 3, 4, 4}, 42), RandomTensor({3, 1, 1}, 43)},
                   1e-4, 1e-5);
}

TEST_F(CudaTrainingOps, PowGradBroadcastExponents) {
  NodeSpec s{"PowGrad", 17, [](Node&) {}, {true, true}, kGradDomain};
  ExpectSameOnCuda(s, {RandomTensor({3, 4}, 87), RandomTensor({3, 4}, 88, 0.1f, 2.f), RandomTensor({4}, 89, -2.f, 3.f)},
                   1e-4, 1e-5);
  NodeSpec base_only{"PowGrad", 17, [](Node&) {}, {true, false}, kGradDomain};
  ExpectSameOnCuda(base_only, {RandomTensor({2, 5}, 90), RandomTensor({2, 5}, 91), ScalarInt64(3)});
}

TEST_F(CudaTrainingOps, ModNotAndRange) {
  HostTensor a = HostTensor::FromVector(std::vector<int64_t>{7, -7, 7, -7, 0, 13}, {2, 3});
  HostTensor b = HostTensor::FromVector(std::vector<int64_t>{3, 3, -3}, {3});
  ExpectSameOnCuda(NodeSpec{"Mod", 13}, {a, b});
  ExpectSameOnCuda(NodeSpec{"Mod", 13, [](Node& n) { n.SetInt("fmod", 1); }}, {a, b});
  ExpectSameOnCuda(NodeSpec{"Mod", 13, [](Node& n) { n.SetInt("fmod", 1); }},
                   {RandomTensor({4, 5}, 44, -5.f, 5.f), RandomTensor({5}, 45, 0.5f, 2.f)});
  HostTensor flags = HostTensor::FromVector(std::vector<uint8_t>{1, 0, 0, 1, 1}, {5});
  flags.dtype = DType::kBool;
  ExpectSameOnCuda(NodeSpec{"Not", 13}, {flags});
  ExpectSameOnCuda(NodeSpec{"Range", 13}, {ScalarInt64(-3), ScalarInt64(14), ScalarInt64(4)});
  ExpectSameOnCuda(NodeSpec{"Range", 13}, {Scalar(1.5f), Scalar(-2.f), Scalar(-0.25f)});
}

// ---- Resize (runtime/cuda/tensor/resize.cu) and ConvTranspose (runtime/cuda/conv/) ----
TEST_F(CudaTrainingOps, ResizeLinearAndNearestWithGrad) {
  const HostTensor scales = HostTensor::FromVector(std::vector<float>{1.f, 1.f, 2.f, 1.5f}, {4});
  const HostTensor none;
  for (const char* mode : {"linear", "nearest", "cubic"}) {
    NodeSpec fwd{"Resize", 13, [mode](Node& n) { n.SetString("mode", mode); }};
    ExpectSameOnCuda(fwd, {RandomTensor({2, 3, 5, 6}, 54), none, scales});
    NodeSpec grad{"ResizeGrad", 13, [mode](Node& n) {
                    n.SetString("mode", mode);
                    n.SetString("forward_op", "Resize");
                    n.SetInt("forward_opset", 13);
                  },
                  {true}, kGradDomain};
    ExpectSameOnCuda(grad, {RandomTensor({2, 3, 10, 9}, 55), none, scales, none, Int64s({2, 3, 5, 6})}, 1e-4, 1e-5);
  }
}

TEST_F(CudaTrainingOps, ConvTransposeStridedGroupedWithBias) {
  NodeSpec plain{"ConvTranspose", 17, [](Node& n) { n.SetInts("strides", {2, 2}); }};
  ExpectSameOnCuda(plain, {RandomTensor({2, 4, 5, 5}, 56), RandomTensor({4, 3, 2, 2}, 57), RandomTensor({3}, 58)});
  NodeSpec grouped{"ConvTranspose", 17, [](Node& n) {
                     n.SetInt("group", 2);
                     n.SetInts("pads", {1, 1, 1, 1});
                     n.SetInts("dilations", {1, 2});
                   }};
  ExpectSameOnCuda(grouped, {RandomTensor({1, 4, 6, 5}, 59), RandomTensor({4, 2, 3, 3}, 60), RandomTensor({4}, 61)});
  NodeSpec one_d{"ConvTranspose", 17, [](Node& n) { n.SetInts("strides", {3}); }};
  ExpectSameOnCuda(one_d, {RandomTensor({2, 3, 7}, 62), RandomTensor({3, 2, 4}, 63)});
}

TEST_F(CudaTrainingOps, ConvTransposeGradAllOutputs) {
  NodeSpec s{"ConvTransposeGrad", 17, [](Node& n) { n.SetInts("strides", {2, 2}); }, {true, true, true}, kGradDomain};
  ExpectSameOnCuda(s, {RandomTensor({2, 3, 10, 10}, 64), RandomTensor({2, 4, 5, 5}, 65), RandomTensor({4, 3, 2, 2}, 66)},
                   1e-4, 1e-4);
  NodeSpec grouped{"ConvTransposeGrad", 17, [](Node& n) {
                     n.SetInt("group", 2);
                     n.SetInts("pads", {1, 1, 1, 1});
                   },
                   {true, true, false}, kGradDomain};
  ExpectSameOnCuda(grouped, {RandomTensor({1, 4, 6, 5}, 67), RandomTensor({1, 4, 6, 5}, 68), RandomTensor({4, 2, 3, 3}, 69)},
                   1e-4, 1e-4);
}

TEST_F(CudaTrainingOps, LrnGradOddAndEvenWindows) {
  for (int64_t size : {3, 4}) {
    NodeSpec s{"LRNGrad", 13, [size](Node& n) {
                 n.SetInt("size", size);
                 n.SetFloat("alpha", 0.02f);
                 n.SetFloat("beta", 0.75f);
                 n.SetFloat("bias", 2.f);
               },
               {true}, kGradDomain};
    ExpectSameOnCuda(s, {RandomTensor({2, 7, 3, 4}, 80), RandomTensor({2, 7, 3, 4}, 81)}, 1e-4, 1e-6);
  }
}

// ---- synchronised batch normalization, one replica (runtime/cuda/norm/sync_batch_norm_ops.cc) ----
TEST_F(CudaTrainingOps, SyncBatchNormTrainingAllOutputs) {
  NodeSpec s{"SyncBatchNormTraining", 17, [](Node& n) {
               n.SetFloat("momentum", 0.8f);
               n.SetInt("unbiased_running_var", 1);
             },
             {true, true, true, true, true}, kGradDomain};
  ExpectSameOnCuda(s, {RandomTensor({4, 3, 5, 6}, 70, -2.f, 3.f), RandomTensor({3}, 71), RandomTensor({3}, 72),
                       RandomTensor({3}, 73), RandomTensor({3}, 74, 0.5f, 2.f)},
                   1e-4, 1e-5);
}

TEST_F(CudaTrainingOps, SyncBatchNormalizationGrad) {
  NodeSpec s{"SyncBatchNormalizationGrad", 17, [](Node&) {}, {true, true, true}, kGradDomain};
  ExpectSameOnCuda(s, {RandomTensor({4, 3, 7}, 75), RandomTensor({4, 3, 7}, 76), RandomTensor({3}, 77),
                       RandomTensor({3}, 78, -0.2f, 0.2f), RandomTensor({3}, 79, 0.5f, 1.5f)},
                   1e-4, 1e-5);
}

// ---- RMSprop (loss_optimizer.cu on runtime/ops/math/optimizer_math.h) ----
TEST_F(CudaTrainingOps, RmspropCenteredWithMomentumAndDecay) {
  // One tensor: inputs R, T, X, G, S, A, B; outputs X', S', A', B'.
  NodeSpec s{"RMSprop", 17, [](Node& n) {
               n.SetFloat("alpha", 0.9f);
               n.SetFloat("momentum", 0.8f);
               n.SetFloat("weight_decay", 0.05f);
               n.SetInt("centered", 1);
             },
             {true, true, true, true}, kGradDomain};
  ExpectSameOnCuda(s, {Scalar(0.01f), ScalarInt64(3), RandomTensor({1000}, 46), RandomTensor({1000}, 47),
                       RandomTensor({1000}, 48, 0.5f, 1.f), RandomTensor({1000}, 49, -0.1f, 0.1f),
                       RandomTensor({1000}, 50)});
  NodeSpec plain{"RMSprop", 17, [](Node&) {}, {true, true}, kGradDomain};
  ExpectSameOnCuda(plain, {Scalar(0.01f), ScalarInt64(1), RandomTensor({77}, 51), RandomTensor({77}, 52),
                           RandomTensor({77}, 53, 0.f, 1.f)});
}

}  // namespace
}  // namespace ot
