// Graph-layer tests: ONNX round trip, external data, IR < 4 models, symbolic dimensions,
// topological order, tensor files and their error messages.
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include "graph/error.h"
#include "graph/file_util.h"
#include "graph/onnx_io.h"
#include "graph/tensor_proto.h"

namespace ot {
namespace {

std::string TempDir() {
  std::string d = ::testing::TempDir() + "/graph_test_" + std::to_string(::getpid());
  ::mkdir(d.c_str(), 0755);
  return d;
}

// y = Relu(x + w), w an initializer; x [batch, 3].
Model SmallModel() {
  Model m;
  m.opsets[""] = 13;
  m.producer_name = "graph_test";
  ValueInfo x;
  x.name = "x";
  x.dtype = DType::kFloat32;
  x.has_shape = true;
  x.dims = {Dim{-1, "batch"}, Dim{3, ""}};
  m.graph.inputs.push_back(x);
  m.graph.initializers.push_back(HostTensor::FromVector<float>({1.f, -2.f, 3.f}, {3}, "w"));
  Node add;
  add.name = "add";
  add.op_type = "Add";
  add.inputs = {"x", "w"};
  add.outputs = {"s"};
  Node relu;
  relu.name = "relu";
  relu.op_type = "Relu";
  relu.inputs = {"s"};
  relu.outputs = {"y"};
  relu.SetFloat("unused_alpha_for_roundtrip", 0.5f);
  m.graph.nodes = {relu, add};  // out of order on purpose
  ValueInfo y;
  y.name = "y";
  y.dtype = DType::kFloat32;
  y.has_shape = true;
  y.dims = {Dim{-1, "batch"}, Dim{3, ""}};
  m.graph.outputs.push_back(y);
  return m;
}

TEST(Graph, TopologicalOrderPutsProducersFirst) {
  Model m = SmallModel();
  auto order = m.graph.TopologicalOrder();
  ASSERT_EQ(order.size(), 2u);
  EXPECT_EQ(m.graph.nodes[order[0]].name, "add");
  m.graph.nodes[0].inputs = {"nowhere"};
  try {
    m.graph.TopologicalOrder();
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'nowhere'"), std::string::npos) << e.what();
  }
}

TEST(Graph, SaveLoadRoundTripKeepsEverything) {
  Model m = SmallModel();
  m.graph.nodes[0].attrs.clear();  // the checker rejects unknown attributes
  std::string path = TempDir() + "/small.onnx";
  SaveModel(m, path);
  Model back = LoadModel(path);
  EXPECT_EQ(back.OpsetFor(""), 13);
  EXPECT_EQ(back.OpsetFor("ai.onnx"), 13);
  ASSERT_EQ(back.graph.inputs.size(), 1u);
  EXPECT_EQ(back.graph.inputs[0].dims[0].param, "batch");
  EXPECT_EQ(back.graph.inputs[0].dims[1].value, 3);
  ASSERT_EQ(back.graph.initializers.size(), 1u);
  EXPECT_EQ(back.graph.initializers[0].Data<float>()[1], -2.f);
  EXPECT_EQ(back.graph.nodes.size(), 2u);
  // Shape inference filled in the intermediate value with the symbolic batch.
  ASSERT_TRUE(back.graph.value_info.count("s"));
  EXPECT_EQ(back.graph.value_info["s"].ShapeString(), "[batch, 3]");
}

TEST(Graph, AttributesRoundTripThroughProto) {
  Model m = SmallModel();
  m.graph.nodes[0].SetInts("ints", {1, -2});
  m.graph.nodes[0].SetString("str", "hello");
  m.graph.nodes[0].SetTensor("t", HostTensor::FromVector<int64_t>({7}, {1}, "t"));
  onnx::ModelProto p;
  ModelToProto(m, &p);
  Model back = ModelFromProto(p, ".", "test");
  // Export writes nodes in topological order: relu now comes second.
  ASSERT_EQ(back.graph.nodes[1].name, "relu");
  const Node& n = back.graph.nodes[1];
  EXPECT_EQ(n.GetFloat("unused_alpha_for_roundtrip", 0), 0.5f);
  EXPECT_EQ(n.GetInts("ints"), (std::vector<int64_t>{1, -2}));
  EXPECT_EQ(n.GetString("str", ""), "hello");
  ASSERT_NE(n.GetTensor("t"), nullptr);
  EXPECT_EQ(n.GetTensor("t")->Data<int64_t>()[0], 7);
  EXPECT_THROW(n.GetInt("str", 0), Error);  // wrong attribute type is an error, not garbage
}

TEST(Graph, ExternalDataIsReadFromTheModelsFolder) {
  std::string dir = TempDir();
  Model m = SmallModel();
  m.graph.nodes[0].attrs.clear();
  onnx::ModelProto p;
  ModelToProto(m, &p);
  // Move w's bytes to a side file at offset 8.
  auto* w = p.mutable_graph()->mutable_initializer(0);
  std::string raw = w->raw_data();
  w->clear_raw_data();
  w->set_data_location(onnx::TensorProto::EXTERNAL);
  auto add_kv = [&](const char* k, const std::string& v) {
    auto* e = w->add_external_data();
    e->set_key(k);
    e->set_value(v);
  };
  add_kv("location", "weights.bin");
  add_kv("offset", "8");
  add_kv("length", std::to_string(raw.size()));
  std::ofstream(dir + "/weights.bin", std::ios::binary) << std::string(8, 'x') << raw;
  std::ofstream(dir + "/ext.onnx", std::ios::binary) << p.SerializeAsString();
  Model back = LoadModel(dir + "/ext.onnx");
  EXPECT_EQ(back.graph.initializers[0].Data<float>()[2], 3.f);

  // A truncated side file is an error naming it.
  std::ofstream(dir + "/weights.bin", std::ios::binary | std::ios::trunc) << std::string(10, 'x');
  try {
    LoadModel(dir + "/ext.onnx");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("weights.bin"), std::string::npos) << e.what();
  }
}

// A model over the external-data threshold (protobuf's 2 GB limit in real use; a few
// bytes here) is written as model + "<name>.data"; it loads back whole, and a short data
// file names the file, the tensor and the offset.
TEST(Graph, LargeModelsAreSavedWithExternalData) {
  std::string dir = TempDir();
  Model m = SmallModel();
  m.graph.nodes[0].attrs.clear();
  HostTensor big(DType::kFloat32, {300}, "big");
  for (int i = 0; i < 300; ++i) big.Data<float>()[i] = 0.5f * static_cast<float>(i);
  m.graph.initializers.push_back(big);
  SaveOptions opts;
  opts.external_above_bytes = 100;
  opts.min_external_bytes = 16;
  SaveModel(m, dir + "/big.onnx", opts);
  struct stat st {};
  ASSERT_EQ(::stat((dir + "/big.onnx.data").c_str(), &st), 0) << "no external data file written";
  EXPECT_GE(st.st_size, 1200);
  onnx::ModelProto p;
  std::ifstream in(dir + "/big.onnx", std::ios::binary);
  ASSERT_TRUE(p.ParseFromIstream(&in));
  int external = 0;
  for (const auto& t : p.graph().initializer()) external += t.data_location() == onnx::TensorProto::EXTERNAL;
  EXPECT_GE(external, 1);
  Model back = LoadModel(dir + "/big.onnx");
  const HostTensor* b = back.graph.FindInitializer("big");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->bytes, big.bytes);
  EXPECT_EQ(back.graph.FindInitializer("w")->bytes, m.graph.FindInitializer("w")->bytes);

  // Saved again under the threshold: one file, and the stale data file is gone.
  SaveModel(m, dir + "/big.onnx");
  EXPECT_NE(::stat((dir + "/big.onnx.data").c_str(), &st), 0);
  EXPECT_EQ(LoadModel(dir + "/big.onnx").graph.FindInitializer("big")->bytes, big.bytes);

  SaveModel(m, dir + "/big.onnx", opts);
  ASSERT_EQ(::truncate((dir + "/big.onnx.data").c_str(), 100), 0);
  try {
    LoadModel(dir + "/big.onnx");
    FAIL() << "a short data file must be an error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("big.onnx.data"), std::string::npos) << what;
    EXPECT_NE(what.find("'big'"), std::string::npos) << what;
    EXPECT_NE(what.find("truncated"), std::string::npos) << what;
  }
}

// A model newer than the ONNX library we build (1.19.1: opset 24, IR 12) is refused in one
// line naming both versions and what to do, not with the checker's own words.
TEST(Graph, NewerIrOrOpsetThanTheLibraryIsRefusedNamingBoth) {
  std::string dir = TempDir();
  Model m = SmallModel();
  m.graph.nodes[0].attrs.clear();
  onnx::ModelProto p;
  ModelToProto(m, &p);
  p.mutable_opset_import(0)->set_version(99);
  std::ofstream(dir + "/opset99.onnx", std::ios::binary) << p.SerializeAsString();
  try {
    LoadModel(dir + "/opset99.onnx");
    FAIL() << "opset 99 must be refused";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("opset 99"), std::string::npos) << what;
    EXPECT_NE(what.find("24"), std::string::npos) << what;
    EXPECT_NE(what.find("opset_version"), std::string::npos) << what;
  }
  ModelToProto(m, &p);
  p.set_ir_version(99);
  std::ofstream(dir + "/ir99.onnx", std::ios::binary) << p.SerializeAsString();
  try {
    LoadModel(dir + "/ir99.onnx");
    FAIL() << "IR 99 must be refused";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("IR version 99"), std::string::npos) << what;
    EXPECT_NE(what.find("1.19.1"), std::string::npos) << what;
  }
}

TEST(Graph, OldIrVersionModelsListInitializersAsInputs) {
  Model m = SmallModel();
  m.graph.nodes[0].attrs.clear();
  m.ir_version = 3;
  m.opsets[""] = 8;
  onnx::ModelProto p;
  ModelToProto(m, &p);
  EXPECT_EQ(p.graph().input_size(), 2);
  std::string path = TempDir() + "/ir3.onnx";
  std::ofstream(path, std::ios::binary) << p.SerializeAsString();
  Model back = LoadModel(path);
  EXPECT_EQ(back.graph.inputs.size(), 1u);  // w is an initializer, not a real input
}

TEST(Graph, CorruptFilesGiveClearErrors) {
  std::string dir = TempDir();
  EXPECT_THROW(LoadModel(dir + "/missing.onnx"), Error);
  std::ofstream(dir + "/text.onnx") << "this is not a model";
  try {
    LoadModel(dir + "/text.onnx");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("text.onnx"), std::string::npos) << e.what();
  }
}

TEST(TensorFiles, RoundTripAndSizeMismatch) {
  std::string dir = TempDir();
  HostTensor t = HostTensor::FromVector<int64_t>({1, 2, 3, 4, 5, 6}, {2, 3}, "labels");
  WriteTensorFile(t, dir + "/t.pb");
  HostTensor back = ReadTensorFile(dir + "/t.pb");
  EXPECT_EQ(back.name, "labels");
  EXPECT_EQ(back.dims, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(back.Data<int64_t>()[5], 6);

  onnx::TensorProto p;
  TensorToProto(t, &p);
  p.set_raw_data(p.raw_data().substr(0, 20));
  std::ofstream(dir + "/bad.pb", std::ios::binary) << p.SerializeAsString();
  try {
    ReadTensorFile(dir + "/bad.pb");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bad.pb"), std::string::npos) << e.what();
  }
  // Typed fields (not raw_data) are read too.
  onnx::TensorProto f;
  f.set_data_type(onnx::TensorProto::FLOAT);
  f.add_dims(2);
  f.add_float_data(1.5f);
  f.add_float_data(-1.f);
  HostTensor ft = TensorFromProto(f, ".", "test");
  EXPECT_EQ(ft.Data<float>()[0], 1.5f);
  f.add_dims(2);  // now claims 4 values but holds 2
  EXPECT_THROW(TensorFromProto(f, ".", "test"), Error);
}

TEST(FileUtil, AtomicWriteReplacesWholeFile) {
  std::string path = TempDir() + "/atomic.bin";
  WriteFileAtomic(path, "first version");
  WriteFileAtomic(path, "second");
  EXPECT_EQ(ReadFileBytes(path), "second");
  EXPECT_THROW(WriteFileAtomic("/nonexistent-dir/x.bin", "x"), Error);
}

}  // namespace
}  // namespace ot
