// Bad-input tests of the onnx-train program: every user mistake (missing, corrupt,
// truncated or invalid model; unsupported ops; wrong input name, shape or type; broken or
// missing tensor file; bad command line) must end with exactly one "onnx-train: error:"
// line naming what is at fault and a non-zero exit status, never a crash or a hang.
// The models are built here through the IR, so the test needs no data files.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include "graph/error.h"
#include "graph/file_util.h"
#include "graph/onnx_io.h"
#include "graph/tensor_proto.h"
#include "runtime/core/kernel_registry.h"
#include "tests/common/test_util.h"
#include "runtime/core/device.h"

namespace ot {
namespace {

// What one run of the program did.
struct ProcessResult {
  int exit_code = -1;   // valid when the process exited normally
  int term_signal = 0;  // non-zero when a signal ended it
  bool timed_out = false;
  std::string out;
  std::string err;
};

// Reads both pipes until they close or the deadline passes.
void DrainPipes(int out_fd, int err_fd, std::chrono::steady_clock::time_point deadline, ProcessResult* r) {
  struct pollfd fds[2] = {{out_fd, POLLIN, 0}, {err_fd, POLLIN, 0}};
  std::string* sinks[2] = {&r->out, &r->err};
  int open_fds = 2;
  while (open_fds > 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      r->timed_out = true;
      return;
    }
    int ready = ::poll(fds, 2, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) continue;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[4096];
      ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
      if (n > 0) {
        sinks[i]->append(buf, static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
}

// Runs the onnx-train binary with `args`; kills it after timeout_s.
ProcessResult RunOnnxTrain(const std::vector<std::string>& args, int timeout_s = 120) {
  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0) throw Error("pipe failed");
  const std::string binary = testing::OnnxTrainBinary();
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(binary.c_str()));
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid < 0) throw Error("fork failed");
  if (pid == 0) {
    ::dup2(out_pipe[1], STDOUT_FILENO);
    ::dup2(err_pipe[1], STDERR_FILENO);
    ::execv(binary.c_str(), argv.data());
    ::_exit(127);
  }
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  ProcessResult r;
  DrainPipes(out_pipe[0], err_pipe[0], std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s), &r);
  if (r.timed_out) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  ::close(out_pipe[0]);
  ::close(err_pipe[0]);
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.term_signal = WTERMSIG(status);
  return r;
}

std::string Quote(const std::vector<std::string>& args) {
  std::string s = "onnx-train";
  for (const auto& a : args) s += " '" + a + "'";
  return s;
}

// Runs the program and checks it failed cleanly with one error line holding every fragment.
void ExpectOneErrorLine(const std::vector<std::string>& args, const std::vector<std::string>& fragments) {
  SCOPED_TRACE(Quote(args));
  ProcessResult r = RunOnnxTrain(args);
  ASSERT_FALSE(r.timed_out) << "hung; stderr so far: " << r.err;
  ASSERT_EQ(r.term_signal, 0) << "killed by signal " << r.term_signal << " (" << strsignal(r.term_signal)
                              << "); stderr: " << r.err;
  EXPECT_NE(r.exit_code, 0) << "succeeded; stdout: " << r.out;
  ASSERT_FALSE(r.err.empty()) << "no error message";
  EXPECT_EQ(r.err.back(), '\n') << "stderr: " << r.err;
  std::string line = r.err.substr(0, r.err.size() - (r.err.back() == '\n' ? 1 : 0));
  EXPECT_EQ(line.find('\n'), std::string::npos) << "more than one line on stderr:\n" << r.err;
  EXPECT_EQ(line.rfind("onnx-train: error: ", 0), 0u) << "stderr: " << r.err;
  for (const auto& f : fragments) EXPECT_NE(line.find(f), std::string::npos) << "'" << f << "' not named in: " << line;
}

// input x: float32[1, 4] -> Relu (node "relu0") -> output y.
Model ReluModel() {
  Model m;
  m.ir_version = 8;
  m.opsets[""] = 13;
  m.graph.name = "relu_graph";
  m.graph.inputs.push_back(ValueInfo{"x", DType::kFloat32, true, {Dim{1, ""}, Dim{4, ""}}});
  m.graph.outputs.push_back(ValueInfo{"y", DType::kFloat32, true, {Dim{1, ""}, Dim{4, ""}}});
  Node relu;
  relu.name = "relu0";
  relu.op_type = "Relu";
  relu.inputs = {"x"};
  relu.outputs = {"y"};
  m.graph.nodes.push_back(relu);
  return m;
}

Node ElementwiseNode(const std::string& name, const std::string& domain, const std::string& op,
                     const std::string& in, const std::string& out) {
  Node n;
  n.name = name;
  n.domain = domain;
  n.op_type = op;
  n.inputs = {in};
  n.outputs = {out};
  return n;
}

class CliErrorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/ot_cli_errors_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    model_ = dir_ + "/relu.onnx";
    SaveModel(ReluModel(), model_);
    good_input_ = dir_ + "/x.pb";
    WriteTensorFile(HostTensor::FromVector<float>({-1.f, 0.f, 1.f, 2.f}, {1, 4}, "x"), good_input_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Path(const std::string& name) const { return dir_ + "/" + name; }
  // infer MODEL --input x=INPUT -o DIR/out
  std::vector<std::string> Infer(const std::string& model, const std::string& input_arg) const {
    return {"infer", model, "--input", input_arg, "-o", Path("out")};
  }

  std::string dir_, model_, good_input_;
};

TEST_F(CliErrorsTest, ValidInvocationSucceeds) {
  ProcessResult r = RunOnnxTrain(Infer(model_, "x=" + good_input_));
  ASSERT_FALSE(r.timed_out);
  ASSERT_EQ(r.term_signal, 0);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  HostTensor y = ReadTensorFile(Path("out/y.pb"));
  EXPECT_EQ(testing::CompareTensors(HostTensor::FromVector<float>({0.f, 0.f, 1.f, 2.f}, {1, 4}), y, 0, 0), "");
}

TEST_F(CliErrorsTest, MissingModelFile) {
  ExpectOneErrorLine(Infer(Path("absent.onnx"), "x=" + good_input_), {"absent.onnx"});
}

TEST_F(CliErrorsTest, ModelIsNotProtobuf) {
  std::string text_file = Path("notes.onnx");
  WriteFileAtomic(text_file, "this is a text file, not an ONNX model\n");
  ExpectOneErrorLine(Infer(text_file, "x=" + good_input_), {"notes.onnx"});
  std::string binary_file = Path("noise.onnx");
  std::string noise;
  for (int i = 0; i < 4096; ++i) noise.push_back(static_cast<char>((i * 7919 + 13) & 0xff));
  WriteFileAtomic(binary_file, noise);
  ExpectOneErrorLine(Infer(binary_file, "x=" + good_input_), {"noise.onnx"});
}

// A model with an initializer, so that cuts land inside tensor bytes too.
std::string ModelWithInitializerBytes() {
  Model m = ReluModel();
  m.graph.initializers.push_back(HostTensor::FromVector<float>(std::vector<float>(64, 0.5f), {8, 8}, "unused_w"));
  onnx::ModelProto proto;
  ModelToProto(m, &proto);
  return proto.SerializeAsString();
}

TEST_F(CliErrorsTest, TruncatedModel) {
  const std::string full = ModelWithInitializerBytes();
  const size_t n = full.size();
  for (size_t len : {size_t{0}, size_t{1}, size_t{2}, size_t{7}, n / 4, n / 2, 3 * n / 4, n - 2, n - 1}) {
    std::string path = Path("cut_" + std::to_string(len) + ".onnx");
    WriteFileAtomic(path, full.substr(0, len));
    ExpectOneErrorLine(Infer(path, "x=" + good_input_), {"cut_" + std::to_string(len) + ".onnx"});
  }
}

// Every prefix of a valid model is refused with ot::Error (in process: fast enough for all cuts).
TEST(ModelLoaderTest, EveryTruncationIsAnError) {
  const std::string full = ModelWithInitializerBytes();
  ASSERT_NO_THROW(LoadModelFromBytes(full, "full", "/nonexistent"));
  for (size_t len = 0; len < full.size(); ++len) {
    SCOPED_TRACE("cut at " + std::to_string(len) + " of " + std::to_string(full.size()));
    EXPECT_THROW(LoadModelFromBytes(full.substr(0, len), "cut", "/nonexistent"), Error);
  }
}

TEST_F(CliErrorsTest, ModelFailsChecker) {
  Model m = ReluModel();
  m.graph.nodes[0].SetInt("bogus_attribute", 1);  // Relu has no attributes
  std::string path = Path("bad_attr.onnx");
  SaveModel(m, path);
  ExpectOneErrorLine(Infer(path, "x=" + good_input_), {"bad_attr.onnx", "relu0", "bogus_attribute"});
}

TEST_F(CliErrorsTest, UnsupportedOpsAreAllListed) {
  Model m = ReluModel();
  m.opsets["ai.example"] = 3;
  m.graph.nodes[0].outputs = {"a"};
  m.graph.nodes.push_back(ElementwiseNode("odd_one", "ai.example", "Frobnicate", "a", "b"));
  m.graph.nodes.push_back(ElementwiseNode("hard_one", "", "Hardmax", "b", "c"));
  m.graph.nodes.push_back(ElementwiseNode("odd_two", "ai.example", "Twiddle", "c", "d"));
  m.graph.nodes.push_back(ElementwiseNode("celu_one", "", "Celu", "d", "y"));
  std::string path = Path("exotic.onnx");
  SaveModel(m, path);
  // Expect every node that has no CPU kernel today (the ONNX ones may gain kernels later).
  std::vector<std::string> fragments;
  int missing = 0;
  for (const auto& n : m.graph.nodes) {
    int64_t opset = m.OpsetFor(n.domain);
    if (KernelRegistry::Global().Find(n.domain, n.op_type, opset, DeviceType::kCPU)) continue;
    // Grouped by op type and opset, each node named.
    fragments.push_back((n.domain.empty() ? "" : n.domain + ".") + n.op_type + " (opset " + std::to_string(opset) + ")");
    fragments.push_back("'" + n.name + "'");
    ++missing;
  }
  ASSERT_GE(missing, 2);
  fragments.push_back(std::to_string(missing) + " node(s)");
  ExpectOneErrorLine(Infer(path, "x=" + good_input_), fragments);
}

TEST_F(CliErrorsTest, WrongInputName) {
  // Only a wrong name: the unknown name is reported with the model's real inputs.
  ExpectOneErrorLine(Infer(model_, "nope=" + good_input_), {"'nope'", "x"});
  // The right input plus an unknown one: the unknown one is named, with the model's inputs.
  ExpectOneErrorLine({"infer", model_, "--input", "x=" + good_input_, "--input", "nope=" + good_input_, "-o",
                      Path("out")},
                     {"'nope'", "x"});
}

TEST_F(CliErrorsTest, WrongInputShape) {
  std::string path = Path("x_2x4.pb");
  WriteTensorFile(HostTensor::FromVector<float>(std::vector<float>(8, 1.f), {2, 4}, "x"), path);
  ExpectOneErrorLine(Infer(model_, "x=" + path), {"'x'", "[1, 4]", "[2, 4]"});
  std::string rank_path = Path("x_4.pb");
  WriteTensorFile(HostTensor::FromVector<float>(std::vector<float>(4, 1.f), {4}, "x"), rank_path);
  ExpectOneErrorLine(Infer(model_, "x=" + rank_path), {"'x'", "rank"});
}

TEST_F(CliErrorsTest, WrongInputType) {
  std::string path = Path("x_int64.pb");
  WriteTensorFile(HostTensor::FromVector<int64_t>({1, 2, 3, 4}, {1, 4}, "x"), path);
  ExpectOneErrorLine(Infer(model_, "x=" + path), {"'x'", "float", "int64"});
}

TEST_F(CliErrorsTest, TensorFileSizeMismatch) {
  onnx::TensorProto p;
  p.set_name("x");
  p.set_data_type(onnx::TensorProto::FLOAT);
  p.add_dims(1);
  p.add_dims(4);
  p.set_raw_data(std::string(12, '\0'));  // 3 floats for 4 elements
  std::string path = Path("short.pb");
  WriteFileAtomic(path, p.SerializeAsString());
  ExpectOneErrorLine(Infer(model_, "x=" + path), {"short.pb", "12 bytes", "16"});
}

TEST_F(CliErrorsTest, TensorFileHugeDims) {
  onnx::TensorProto p;
  p.set_name("x");
  p.set_data_type(onnx::TensorProto::FLOAT);
  for (int i = 0; i < 4; ++i) p.add_dims(int64_t{1} << 12);  // 2^48 elements
  p.add_float_data(1.f);
  std::string path = Path("huge.pb");
  WriteFileAtomic(path, p.SerializeAsString());
  ExpectOneErrorLine(Infer(model_, "x=" + path), {"huge.pb"});
}

// Size fields alone must never make the reader allocate: shapes whose element count
// overflows int64, or that claim far more values than the proto holds, are refused.
TEST(TensorReaderTest, SizeFieldsAreCheckedBeforeAllocating) {
  auto float_proto = [](std::vector<int64_t> dims) {
    onnx::TensorProto p;
    p.set_name("t");
    p.set_data_type(onnx::TensorProto::FLOAT);
    for (int64_t d : dims) p.add_dims(d);
    return p;
  };
  onnx::TensorProto overflowing = float_proto({int64_t{1} << 39, int64_t{1} << 39});  // 2^78 wraps to 0
  overflowing.set_raw_data("");
  EXPECT_THROW(TensorFromProto(overflowing, "/nonexistent", "test"), Error);
  onnx::TensorProto claims_a_terabyte = float_proto({int64_t{1} << 19, int64_t{1} << 19});
  claims_a_terabyte.add_float_data(1.f);
  EXPECT_THROW(TensorFromProto(claims_a_terabyte, "/nonexistent", "test"), Error);
  onnx::TensorProto external = float_proto({int64_t{1} << 19, int64_t{1} << 19});
  external.set_data_location(onnx::TensorProto::EXTERNAL);
  auto* location = external.add_external_data();
  location->set_key("location");
  location->set_value("cli_errors_test.cc");  // a small file that exists
  auto* offset = external.add_external_data();
  offset->set_key("offset");
  offset->set_value("9223372036854775807");
  EXPECT_THROW(TensorFromProto(external, testing::SourceDir() + "/tests/cli", "test"), Error);
  offset->set_value("-5");
  EXPECT_THROW(TensorFromProto(external, testing::SourceDir() + "/tests/cli", "test"), Error);
}

TEST_F(CliErrorsTest, TensorFileMissingOrCorrupt) {
  ExpectOneErrorLine(Infer(model_, "x=" + Path("absent.pb")), {"absent.pb"});
  std::string garbage = Path("garbage.pb");
  WriteFileAtomic(garbage, "\xff\xff\xff\xff not a tensor");
  ExpectOneErrorLine(Infer(model_, "x=" + garbage), {"garbage.pb"});
}

TEST_F(CliErrorsTest, CommandLineMistakes) {
  ExpectOneErrorLine({"infer", model_, "--input", "x=" + good_input_}, {"-o"});
  ExpectOneErrorLine({"infer", model_, "--input", "x=" + good_input_, "-o", Path("out"), "--bogus"}, {"--bogus"});
  ExpectOneErrorLine({"frobnicate", model_}, {"'frobnicate'"});
  ExpectOneErrorLine({"infer", "--input", "x=" + good_input_, "-o", Path("out")}, {"MODEL.onnx"});
  ExpectOneErrorLine({"infer", model_, "--input", "x" + good_input_, "-o", Path("out")}, {"--input"});
  ExpectOneErrorLine({"infer", model_, "--input", "x=" + good_input_, "-o", Path("out"), "--threads", "two"},
                     {"--threads", "'two'"});
  ExpectOneErrorLine({"infer", model_, "--input"}, {"--input"});
}

// The recipe flags of issue 17 (optimizers, schedules, clipping, accumulation).
TEST_F(CliErrorsTest, RecipeFlagMistakes) {
  const std::string model = Path("simplenn.onnx");
  ASSERT_EQ(RunOnnxTrain({"make-model", "simplenn", "-o", model}).exit_code, 0);
  auto train = [&](std::vector<std::string> flags) {
    std::vector<std::string> args = {"train", model, "--data", "synthetic:96", "--no-checkpoints", "--quiet"};
    args.insert(args.end(), flags.begin(), flags.end());
    return args;
  };
  ExpectOneErrorLine(train({"--accumulate", "0"}), {"--accumulate", "0"});
  ExpectOneErrorLine(train({"--accumulate", "2.5"}), {"--accumulate", "2.5"});
  // 96 samples at batch 32: 3 batches an epoch, which 2 micro-batches a step do not divide.
  ExpectOneErrorLine(train({"--accumulate", "2", "--batch", "32"}), {"--accumulate 2", "3"});
  ExpectOneErrorLine(train({"--epochs", "3", "--lr-warmup-epochs", "3"}), {"--lr-warmup-epochs 3", "--epochs 3"});
  ExpectOneErrorLine(train({"--lr-warmup-method", "cubic"}), {"'cubic'", "linear"});
  ExpectOneErrorLine(train({"--opt", "lamb"}), {"'lamb'", "adamw", "rmsprop"});
  ExpectOneErrorLine(train({"--lr-scheduler", "onecycle"}), {"'onecycle'", "cosineannealinglr"});
  ExpectOneErrorLine(train({"--clip-grad-norm", "-1"}), {"--clip-grad-norm", "-1"});
  ExpectOneErrorLine(train({"--norm-weight-decay", "-0.1"}), {"--norm-weight-decay"});
  ExpectOneErrorLine(train({"--centered"}), {"--centered", "rmsprop"});
}

}  // namespace
}  // namespace ot

namespace ot {
namespace {

// --device cuda:K beyond the device count (or any CUDA device where there is no GPU, or
// in a build without CUDA) and CUDA-only flags on the CPU: one error line, never a crash.
TEST(CliCudaErrorsTest, MissingCudaDeviceIsOneErrorLine) {
  char tmpl[] = "/tmp/ot_cli_cuda_XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  const std::string model = dir + "/relu.onnx", input = dir + "/x.pb";
  SaveModel(ReluModel(), model);
  WriteTensorFile(HostTensor::FromVector<float>({-1.f, 0.f, 1.f, 2.f}, {1, 4}, "x"), input);
  const std::vector<std::string> infer = {"infer", model, "--input", "x=" + input, "-o", dir + "/out"};
  auto with = [&infer](std::vector<std::string> extra) {
    std::vector<std::string> args = infer;
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  };
  ExpectOneErrorLine(with({"--device", "cuda:97"}), {"CUDA"});
  ExpectOneErrorLine(with({"--tf32"}), {"--tf32"});
  ExpectOneErrorLine({"train", model, "--cuda-graphs", "--data", "synthetic"}, {"--cuda-graphs"});
  bool no_gpu = true;
  try {
    no_gpu = ot::BackendFor(ot::DeviceType::kCUDA).DeviceCount() == 0;
  } catch (const ot::Error&) {  // no CUDA in this build, or its libraries cannot load
  }
  if (no_gpu) {
    ExpectOneErrorLine(with({"--device", "cuda"}), {"CUDA", "--device cpu"});
    ExpectOneErrorLine(with({"--device", "cuda:0", "--tf32"}), {"CUDA"});
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ot
