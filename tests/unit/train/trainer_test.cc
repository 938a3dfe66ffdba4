// Trainer tests: checkpoints (atomic, checksummed, exact resume), schedules, bad input.
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <dirent.h>

#include <fstream>
#include <map>
#include <random>

#include <gtest/gtest.h>

#include "graph/error.h"
#include "graph/file_util.h"
#include "graph/onnx_io.h"
#include "models/reference_models.h"
#include "train/checkpoint/checkpoint.h"
#include "train/recipe/lr_schedule.h"
#include "train/recipe/model_ema.h"
#include "train/trainer.h"
#include "train/training_session.h"

namespace ot {
namespace {

std::string FreshDir(const std::string& name) {
  std::string d = ::testing::TempDir() + "/trainer_test_" + std::to_string(::getpid()) + "_" + name;
  std::string cmd = "rm -rf '" + d + "'";
  EXPECT_EQ(std::system(cmd.c_str()), 0);
  return d;
}

Model SimpleNN(uint64_t seed = 1) {
  ReferenceModelOptions o;
  o.channels = 1;
  o.height = o.width = 28;
  o.seed = seed;
  return BuildSimpleNN(o);
}

TrainerOptions QuickRun(const std::string& dir) {
  TrainerOptions o;
  o.epochs = 3;
  o.batch = 32;
  o.max_steps_per_epoch = 40;
  o.schedule.base_lr = 0.05;
  o.schedule.kind = LrSchedule::Kind::kStep;
  o.schedule.step_size = 1;
  o.schedule.gamma = 0.5;
  o.optimizer.momentum = 0.9f;
  o.optimizer.weight_decay = 1e-4f;
  o.checkpoint_dir = dir;
  o.save_every = 1;
  o.quiet = true;
  o.seed = 11;
  o.threads = 2;
  return o;
}

TEST(LrSchedule, StepAndCosineFollowPyTorch) {
  LrSchedule s;
  s.kind = LrSchedule::Kind::kStep;
  s.base_lr = 0.1;
  s.step_size = 5;
  s.gamma = 0.1;
  EXPECT_DOUBLE_EQ(s.At(4), 0.1);
  EXPECT_NEAR(s.At(5), 0.01, 1e-12);
  EXPECT_NEAR(s.At(14), 0.001, 1e-12);
  s.kind = LrSchedule::Kind::kCosine;
  s.total_epochs = 10;
  EXPECT_DOUBLE_EQ(s.At(0), 0.1);
  EXPECT_NEAR(s.At(5), 0.05, 1e-12);
}

TEST(Checkpoint, RoundTripAndCorruptionIsDetected) {
  std::string dir = FreshDir("ckpt");
  PrepareCheckpointDir(dir);
  TrainingState s;
  s.epochs_done = 3;
  s.global_step = 1173;
  s.scalars["seed"] = "7";
  s.tensors.push_back(HostTensor::FromVector<float>({1.f, 2.f, 3.f}, {3}, "w"));
  const std::string path = dir + "/epoch_0003.state";
  WriteTrainingState(s, path);
  TrainingState back = ReadTrainingState(path);
  EXPECT_EQ(back.epochs_done, 3);
  EXPECT_EQ(back.global_step, 1173);
  EXPECT_EQ(back.scalars.at("seed"), "7");
  ASSERT_NE(back.FindTensor("w"), nullptr);
  EXPECT_EQ(back.FindTensor("w")->Data<float>()[2], 3.f);
  EXPECT_EQ(FindLatestCheckpoint(dir), path);

  // A flipped byte: checksum mismatch, and the latest *valid* checkpoint is chosen.
  WriteTrainingState(s, dir + "/epoch_0002.state");
  std::string bytes = ReadFileBytes(path);
  bytes[bytes.size() / 2] ^= 0x40;
  WriteFileAtomic(path, bytes);
  EXPECT_THROW(ReadTrainingState(path), Error);
  EXPECT_EQ(FindLatestCheckpoint(dir), dir + "/epoch_0002.state");
  // Truncated.
  WriteFileAtomic(path, bytes.substr(0, bytes.size() - 5));
  EXPECT_THROW(ReadTrainingState(path), Error);
  // A model whose state is missing (a save cut short) is named when resuming passes it over.
  WriteFileAtomic(dir + "/epoch_0004.onnx", "model");
  testing::internal::CaptureStderr();
  EXPECT_EQ(FindLatestCheckpoint(dir), dir + "/epoch_0002.state");
  const std::string warned = testing::internal::GetCapturedStderr();
  EXPECT_NE(warned.find("passing over " + dir + "/epoch_0004.onnx"), std::string::npos) << warned;
  EXPECT_NE(warned.find("epoch_0004.state is missing"), std::string::npos) << warned;
}

// The headline property: a run interrupted at an epoch boundary and resumed ends with
// bitwise the same weights (and optimizer state) as a run that never stopped.
TEST(Trainer, ResumedRunIsBitwiseEqualToAnUninterruptedOne) {
  const Model model = SimpleNN();
  TrainerOptions full = QuickRun(FreshDir("full"));
  TrainResult a = RunTraining(model, full);
  ASSERT_EQ(a.epochs_run, 3);

  TrainerOptions first = QuickRun(FreshDir("split"));
  first.epochs = 3;
  // Stop after one epoch by training a 1-epoch run, then resume the same 3-epoch run.
  TrainerOptions part = first;
  part.epochs = 1;
  part.schedule.total_epochs = first.schedule.total_epochs;
  RunTraining(model, part);
  TrainerOptions rest = first;
  rest.resume = "latest";
  TrainResult b = RunTraining(model, rest);
  EXPECT_EQ(b.epochs_run, 2);
  EXPECT_EQ(b.global_step, a.global_step);

  TrainingState sa = ReadTrainingState(a.last_checkpoint + ".state");
  TrainingState sb = ReadTrainingState(b.last_checkpoint + ".state");
  ASSERT_EQ(sa.tensors.size(), sb.tensors.size());
  for (size_t i = 0; i < sa.tensors.size(); ++i) {
    EXPECT_EQ(sa.tensors[i].name, sb.tensors[i].name);
    EXPECT_TRUE(sa.tensors[i].bytes == sb.tensors[i].bytes) << sa.tensors[i].name << " differs";
  }
  // The losses of the resumed epochs are the uninterrupted run's.
  ASSERT_EQ(b.step_losses.size(), 80u);
  for (size_t i = 0; i < b.step_losses.size(); ++i) EXPECT_EQ(b.step_losses[i], a.step_losses[40 + i]) << i;
  // The inference checkpoint is a valid ONNX model.
  EXPECT_NO_THROW(LoadModel(a.last_checkpoint + ".onnx"));
}

TEST(Trainer, LearnsFashionMnist) {
  TrainerOptions o = QuickRun(FreshDir("learn"));
  o.epochs = 1;
  o.max_steps_per_epoch = 300;
  o.schedule.kind = LrSchedule::Kind::kConstant;
  o.schedule.base_lr = 0.01;
  o.optimizer.momentum = 0.f;
  o.optimizer.weight_decay = 0.f;
  o.save_checkpoints = false;
  TrainResult r = RunTraining(SimpleNN(), o);
  // 300 plain-SGD steps of a linear model: well past chance (10%) on the 10,000 test images.
  EXPECT_GT(r.test_accuracy, 0.70) << r.test_accuracy;
  double head = 0, tail = 0;
  for (size_t i = 0; i < 20; ++i) {
    head += r.step_losses[i];
    tail += r.step_losses[r.step_losses.size() - 1 - i];
  }
  EXPECT_LT(tail, head * 0.5);
}

TEST(Trainer, BadInputGivesClearErrors) {
  // Fashion-MNIST's 1x28x28 images into a 4x32x32 model (grey adapts to 1 or 3 channels only;
  // a 3x32x32 model is fed by resizing and copying channels, see image_data_test.py).
  ReferenceModelOptions rgba;
  rgba.channels = 4;
  Model wrong = BuildSimpleNN(rgba);
  TrainerOptions o = QuickRun(FreshDir("bad"));
  o.save_checkpoints = false;
  try {
    RunTraining(wrong, o);
    FAIL();
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("4-channel"), std::string::npos) << msg;
  }
  // A checkpoint folder that cannot be created.
  o = QuickRun("/proc/onnx-train-cannot-write-here");
  EXPECT_THROW(RunTraining(SimpleNN(), o), Error);
  // Resuming a checkpoint of another model.
  TrainerOptions first = QuickRun(FreshDir("other"));
  first.epochs = 1;
  first.max_steps_per_epoch = 2;
  RunTraining(SimpleNN(), first);
  ReferenceModelOptions ten;
  ten.channels = 1;
  ten.height = ten.width = 28;
  ten.classes = 12;  // fits the data (10 classes) but is another model
  TrainerOptions again = first;
  again.epochs = 2;
  again.resume = "latest";
  try {
    RunTraining(BuildSimpleNN(ten), again);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("another model"), std::string::npos) << e.what();
  }
  // Resuming with another batch size would not continue the same run.
  again = first;
  again.epochs = 2;
  again.batch = 64;
  again.resume = "latest";
  EXPECT_THROW(RunTraining(SimpleNN(), again), Error);
}

std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.') names.push_back(e->d_name);
    closedir(d);
  }
  std::sort(names.begin(), names.end());
  return names;
}

// Disk full while saving: simulated with a file-size limit (RLIMIT_FSIZE), under which a
// write past the limit fails (EFBIG; SIGXFSZ ignored) as it would with ENOSPC. The save of
// epoch 2 fails with a clear error; epoch 1's checkpoint survives intact, no temporary
// file is left behind, and a later run resumes from it.
TEST(Trainer, DiskFullWhileSavingKeepsThePreviousCheckpoint) {
  const std::string dir = FreshDir("diskfull");
  TrainerOptions first = QuickRun(dir);
  first.epochs = 1;
  first.max_steps_per_epoch = 5;
  RunTraining(SimpleNN(), first);
  const std::vector<std::string> before = ListDir(dir);
  ASSERT_EQ(before, (std::vector<std::string>{"epoch_0001.onnx", "epoch_0001.state"}));
  const TrainingState good = ReadTrainingState(dir + "/epoch_0001.state");

  TrainerOptions more = first;
  more.epochs = 2;
  more.resume = "latest";
  rlimit old_limit{};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  rlimit small = old_limit;
  small.rlim_cur = 4096;  // far below a checkpoint (the model alone is ~30 KiB)
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  std::string message;
  try {
    RunTraining(SimpleNN(), more);
  } catch (const Error& e) {
    message = e.what();
  }
  setrlimit(RLIMIT_FSIZE, &old_limit);
  std::signal(SIGXFSZ, old_handler);
  ASSERT_FALSE(message.empty()) << "saving past the size limit did not fail";
  EXPECT_NE(message.find("epoch_0002"), std::string::npos) << message;
  EXPECT_NE(message.find("previous file is kept"), std::string::npos) << message;

  // Nothing of the failed save remains that a resume could take for a checkpoint.
  for (const auto& name : ListDir(dir)) {
    EXPECT_EQ(name.find(".tmp"), std::string::npos) << name;
    EXPECT_NE(name, "epoch_0002.state") << "the failed save left a state file";
  }
  const TrainingState still = ReadTrainingState(dir + "/epoch_0001.state");
  ASSERT_EQ(still.tensors.size(), good.tensors.size());
  for (size_t i = 0; i < good.tensors.size(); ++i) EXPECT_TRUE(still.tensors[i].bytes == good.tensors[i].bytes);
  EXPECT_NO_THROW(LoadModel(dir + "/epoch_0001.onnx"));
  // With room again, the same command resumes from epoch 1 and finishes.
  TrainResult r = RunTraining(SimpleNN(), more);
  EXPECT_EQ(r.epochs_run, 1);
}


// Plain SGD (momentum 0) keeps no momentum buffer: W' = W - lr * (G + weight_decay * W),
// with G from the training graph without an optimizer. Momentum 0.9 keeps one per weight.
TEST(TrainingSession, PlainSgdHasNoMomentumState) {
  ReferenceModelOptions shape{1, 6, 6, 4, 0};
  Model model = BuildReferenceModel("simplenn", shape);
  HostTensor x(DType::kFloat32, {5, 1, 6, 6});
  std::mt19937 rng(9);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (int64_t i = 0; i < x.NumElements(); ++i) x.Data<float>()[i] = nd(rng);
  HostTensor y = HostTensor::FromVector<int64_t>({0, 3, 1, 2, 3}, {5});
  for (float momentum : {0.f, 0.9f}) {
    TrainingConfig config;
    config.optimizer.momentum = momentum;
    config.optimizer.weight_decay = 0.1f;
    TrainingSession session(model, config);
    int buffers = 0;
    for (const auto& [name, t] : session.StateTensors()) buffers += name.find("/momentum") != std::string::npos;
    EXPECT_EQ(buffers, momentum == 0.f ? 0 : static_cast<int>(session.graph().params.size()));
    if (momentum != 0.f) continue;
    int sgd_nodes = 0;
    for (const auto& n : session.graph().model.graph.nodes) {
      EXPECT_NE(n.op_type, "Momentum");
      sgd_nodes += n.op_type == "SGD";
    }
    EXPECT_EQ(sgd_nodes, static_cast<int>(session.graph().params.size()));
    TrainingGraph plain = BuildTrainingGraph(model);
    Executor grads_exec(plain.model);
    std::map<std::string, Tensor> feeds = {{plain.labels, Tensor::FromHost(y)}, {session.input_name(), Tensor::FromHost(x)}};
    std::vector<Tensor> grads = grads_exec.Run(feeds, plain.grads);
    session.Step(Tensor::FromHost(x), Tensor::FromHost(y), 0.5f);
    std::map<std::string, Tensor*> state;
    for (const auto& [name, t] : session.StateTensors()) state[name] = t;
    for (size_t i = 0; i < plain.params.size(); ++i) {
      const HostTensor* w0 = model.graph.FindInitializer(plain.params[i]);
      HostTensor w1 = state.at(plain.params[i])->ToHost(), g = grads[i].ToHost();
      for (int64_t k = 0; k < w1.NumElements(); ++k) {
        const float w = w0->Data<float>()[k];
        EXPECT_NEAR(w1.Data<float>()[k], w - 0.5f * (g.Data<float>()[k] + 0.1f * w), 1e-6f) << plain.params[i] << "[" << k << "]";
      }
    }
  }
}

// torchvision's train.py: alpha = min(1, (1 - decay) * world * batch * steps / epochs),
// decay used = 1 - alpha. By hand: 2e-5 * 1 * 32 * 32 / 5 = 0.004096; 2e-5 * 8 * 128 * 32 / 1
// = 0.65536; 0.01 * 1 * 64 * 32 / 1 > 1 gives 0.
TEST(ModelEmaTest, AdjustedDecayAsTorchvision) {
  EXPECT_NEAR(AdjustedEmaDecay(0.99998, 32, 1, 32, 5), 1 - 0.004096, 1e-12);
  EXPECT_NEAR(AdjustedEmaDecay(0.99998, 128, 8, 32, 1), 1 - 0.65536, 1e-12);
  EXPECT_EQ(AdjustedEmaDecay(0.99, 64, 1, 32, 1), 0.0);
  EXPECT_THROW(AdjustedEmaDecay(1.0, 32, 1, 32, 5), Error);
  EXPECT_THROW(AdjustedEmaDecay(0.0, 32, 1, 32, 5), Error);
}

// The first update copies (AveragedModel's n_averaged == 0), later ones blend in float32,
// ResetCount (the warmup rule) makes the next one copy again; integer initializers are left
// as they are; Restore takes the "ema/<name>" tensors of a checkpoint.
TEST(ModelEmaTest, CopyThenBlendThenResetAndRestore) {
  auto model_with = [](float a, float b) {
    Model m;
    m.graph.initializers.push_back(HostTensor::FromVector<float>({a, b}, {2}, "w"));
    m.graph.initializers.push_back(HostTensor::FromVector<int64_t>({7}, {1}, "count"));
    return m;
  };
  const Model start = model_with(0.f, 0.f);
  ModelEma ema(start, 0.75);
  ASSERT_EQ(ema.tensors().size(), 1u);
  ema.Update(model_with(4.f, 8.f));
  EXPECT_EQ(ema.tensors()[0].Data<float>()[0], 4.f);
  EXPECT_EQ(ema.tensors()[0].Data<float>()[1], 8.f);
  ema.Update(model_with(0.f, 4.f));  // 0.75 * (4, 8) + 0.25 * (0, 4)
  EXPECT_EQ(ema.tensors()[0].Data<float>()[0], 3.f);
  EXPECT_EQ(ema.tensors()[0].Data<float>()[1], 7.f);
  EXPECT_EQ(ema.updates(), 2);
  ema.ResetCount();
  ema.Update(model_with(1.f, 2.f));
  EXPECT_EQ(ema.tensors()[0].Data<float>()[0], 1.f);
  const Model averaged = ema.AveragedModel(start);
  EXPECT_EQ(averaged.graph.FindInitializer("w")->Data<float>()[1], 2.f);
  EXPECT_EQ(averaged.graph.FindInitializer("count")->Data<int64_t>()[0], 7);
  ModelEma restored(start, 0.75);
  restored.Restore({HostTensor::FromVector<float>({5.f, 6.f}, {2}, ModelEma::StateName("w"))}, 9);
  EXPECT_EQ(restored.updates(), 9);
  EXPECT_EQ(restored.tensors()[0].Data<float>()[1], 6.f);
  EXPECT_EQ(restored.tensors()[0].name, "w");
  EXPECT_THROW(restored.Restore({}, 1), Error);
}

}  // namespace
}  // namespace ot
