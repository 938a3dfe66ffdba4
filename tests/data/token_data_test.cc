// Language-model token data (train/data/token_dataset.h): windows and their one-token shift,
// uint16/uint32/int32 files and llm.c's header, the errors for bad files, seeded offsets that
// a restored sampler continues, consecutive validation windows, npz x/y [N, T].
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "graph/error.h"
#include "train/loader/batch_loader.h"
#include "train/data/data_for_model.h"
#include "train/data/image_dataset.h"
#include "train/loader/model_input_check.h"
#include "train/loader/sampler.h"
#include "train/data/token_dataset.h"

namespace ot {
namespace {

std::string TempPath(const std::string& name) {
  ::mkdir("token_data_test_tmp", 0755);
  return "token_data_test_tmp/" + name;
}

template <typename T>
std::string WriteTokens(const std::string& name, const std::vector<T>& tokens,
                        const std::vector<int32_t>& header = {}) {
  const std::string path = TempPath(name);
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!header.empty()) {
    std::vector<int32_t> h(256, 0);
    std::copy(header.begin(), header.end(), h.begin());
    f.write(reinterpret_cast<const char*>(h.data()), 1024);
  }
  f.write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * sizeof(T)));
  return path;
}

std::string WriteBytes(const std::string& name, size_t bytes) {
  const std::string path = TempPath(name);
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << std::string(bytes, '\x01');
  return path;
}

std::string ErrorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

bool Contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Tokens i -> (i * 7 + 3) mod 1000, so a window's place in the file is visible from its values.
std::vector<uint16_t> Ramp(size_t n) {
  std::vector<uint16_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = static_cast<uint16_t>((i * 7 + 3) % 1000);
  return t;
}

DataSourceOptions TokenOptions(int64_t seq_len, uint64_t seed = 0) {
  DataSourceOptions o;
  o.token_seq_len = seq_len;
  o.seed = seed;
  return o;
}

TEST(TokenDataTest, WindowsAndTheirShiftedTargets) {
  const std::vector<uint16_t> tokens = Ramp(1000);
  const std::string train = WriteTokens("ramp_train.bin", tokens);
  const std::string val = WriteTokens("ramp_val.bin", Ramp(101));
  ImageDataset ds = LoadImageDataset("tokens:" + train + "," + val, "train", TokenOptions(16, 5));
  EXPECT_EQ(ds.count, (1000 - 1) / 16);  // an epoch: (len - 1) / T samples
  ASSERT_EQ(ds.label_dims, std::vector<int64_t>{16});
  ASSERT_TRUE(ds.source && ds.source->MakesLabels());
  EXPECT_EQ(ds.source->SampleDims(), std::vector<int64_t>{16});
  EXPECT_EQ(ds.source->InputType(), DType::kInt64);
  const auto& windows = static_cast<const TokenWindowSource&>(*ds.source);
  std::vector<int64_t> idx;
  for (int64_t i = 0; i < ds.count; ++i) idx.push_back(i);
  for (int64_t epoch : {0, 3}) {
    const HostTensor x = ds.source->Inputs(idx, nullptr, epoch, 0);
    const HostTensor y = ds.source->Labels(idx, epoch);
    ASSERT_EQ(x.dims, (std::vector<int64_t>{ds.count, 16}));
    ASSERT_EQ(y.dims, x.dims);
    ASSERT_EQ(y.dtype, DType::kInt64);
    std::set<int64_t> offsets;
    for (int64_t i = 0; i < ds.count; ++i) {
      const int64_t o = windows.Offset(i, epoch);
      ASSERT_GE(o, 0);
      ASSERT_LE(o + 16, 999);  // the last target o + T is still in the file
      offsets.insert(o);
      for (int64_t k = 0; k < 16; ++k) {
        ASSERT_EQ(x.Data<int64_t>()[i * 16 + k], tokens[static_cast<size_t>(o + k)]) << "sample " << i << " pos " << k;
        ASSERT_EQ(y.Data<int64_t>()[i * 16 + k], tokens[static_cast<size_t>(o + k + 1)]);
      }
    }
    EXPECT_GT(offsets.size(), static_cast<size_t>(ds.count) * 9 / 10);  // random, not a fixed grid
    EXPECT_NE(offsets.count(windows.Offset(0, epoch)), 0u);
  }
  EXPECT_NE(windows.Offset(0, 0), windows.Offset(0, 1));  // each epoch draws anew
  // Validation: consecutive non-overlapping windows of VAL.bin, the same on every call.
  ImageDataset test = LoadImageDataset("tokens:" + train + "," + val, "test", TokenOptions(16, 5));
  EXPECT_EQ(test.count, (101 - 1) / 16);
  const HostTensor tx = test.Images({0, 1, 5});
  const HostTensor ty = test.Labels({0, 1, 5});
  const std::vector<uint16_t> v = Ramp(101);
  for (int64_t r = 0; r < 3; ++r) {
    const int64_t o = (r == 2 ? 5 : r) * 16;
    for (int64_t k = 0; k < 16; ++k) {
      EXPECT_EQ(tx.Data<int64_t>()[r * 16 + k], v[static_cast<size_t>(o + k)]);
      EXPECT_EQ(ty.Data<int64_t>()[r * 16 + k], v[static_cast<size_t>(o + k + 1)]);
    }
  }
}

TEST(TokenDataTest, HeldOutTailWithoutValFile) {
  const std::string train = WriteTokens("ramp_only.bin", Ramp(1000));
  DataSourceOptions o = TokenOptions(10);
  o.val_fraction = 0.2;
  ImageDataset tr = LoadImageDataset("tokens:" + train, "train", o);
  ImageDataset te = LoadImageDataset("tokens:" + train, "test", o);
  EXPECT_EQ(tr.count, (800 - 1) / 10);
  EXPECT_EQ(te.count, (200 - 1) / 10);
  const auto& w = static_cast<const TokenWindowSource&>(*tr.source);
  for (int64_t i = 0; i < tr.count; ++i) EXPECT_LE(w.Offset(i, 0) + 10, 799);  // never reads the held-out tail
  EXPECT_EQ(te.Images({0}).Data<int64_t>()[0], Ramp(1000)[800]);
}

TEST(TokenDataTest, TokenTypesAndLlmcHeader) {
  const std::vector<uint32_t> big = {70000, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  const std::vector<int32_t> small = {5, 4, 3, 2, 1, 0, 1, 2, 3, 4};
  auto first_window = [](const std::string& spec, DataSourceOptions o) {
    o.val_fraction = 0.5;
    ImageDataset ds = LoadImageDataset(spec, "test", o);  // consecutive: window 0 starts at the split
    return ds.Images({0}).AsInt64s();
  };
  DataSourceOptions o = TokenOptions(3);
  o.token_dtype = DType::kUInt32;
  EXPECT_EQ(first_window("tokens:" + WriteTokens("u32.bin", big), o), (std::vector<int64_t>{5, 6, 7}));
  o.token_dtype = DType::kInt32;
  EXPECT_EQ(first_window("tokens:" + WriteTokens("i32.bin", small), o), (std::vector<int64_t>{0, 1, 2}));
  // llm.c: version 1 holds uint16 tokens, version 2 uint32; the header sets the type.
  auto v1 = TokenFile::Open(WriteTokens("llmc1.bin", Ramp(50), {20240520, 1, 50}), DType::kUInt32);
  EXPECT_EQ(v1->header_version(), 1);
  EXPECT_EQ(v1->dtype(), DType::kUInt16);
  EXPECT_EQ(v1->size(), 50);
  EXPECT_EQ(v1->At(0), 3);
  EXPECT_EQ(v1->At(49), (49 * 7 + 3) % 1000);
  auto v2 = TokenFile::Open(WriteTokens("llmc2.bin", big, {20240520, 2, 10}), DType::kUInt16);
  EXPECT_EQ(v2->dtype(), DType::kUInt32);
  EXPECT_EQ(v2->size(), 10);
  EXPECT_EQ(v2->At(0), 70000);
  // Raw files: the flag's type.
  auto raw = TokenFile::Open(WriteTokens("raw16.bin", Ramp(50)), DType::kUInt16);
  EXPECT_EQ(raw->header_version(), 0);
  EXPECT_EQ(raw->size(), 50);
  EXPECT_EQ(ParseTokenDType("int32"), DType::kInt32);
  EXPECT_TRUE(Contains(ErrorOf([] { ParseTokenDType("int64"); }), "--token-dtype 'int64'"));
}

TEST(TokenDataTest, BadFilesSayWhatIsWrong) {
  // Missing.
  std::string e = ErrorOf([] { TokenFile::Open(TempPath("no_such.bin"), DType::kUInt16); });
  EXPECT_TRUE(Contains(e, "no_such.bin")) << e;
  EXPECT_TRUE(Contains(e, "No such file")) << e;
  // Empty.
  e = ErrorOf([] { TokenFile::Open(WriteBytes("empty.bin", 0), DType::kUInt16); });
  EXPECT_TRUE(Contains(e, "empty.bin") && Contains(e, "is empty")) << e;
  // A size that is not a whole number of tokens.
  e = ErrorOf([] { TokenFile::Open(WriteBytes("odd.bin", 1001), DType::kUInt16); });
  EXPECT_TRUE(Contains(e, "odd.bin") && Contains(e, "1001 bytes") && Contains(e, "--token-dtype")) << e;
  e = ErrorOf([] { TokenFile::Open(WriteBytes("six.bin", 6), DType::kInt32); });
  EXPECT_TRUE(Contains(e, "6 bytes") && Contains(e, "int32")) << e;
  EXPECT_EQ(ErrorOf([] { TokenFile::Open(WriteBytes("six16.bin", 6), DType::kUInt16); }), "");
  // llm.c header whose count disagrees with the size.
  e = ErrorOf([] { TokenFile::Open(WriteTokens("llmc_short.bin", Ramp(40), {20240520, 1, 50}), DType::kUInt16); });
  EXPECT_TRUE(Contains(e, "llmc_short.bin") && Contains(e, "says 50 tokens (100 bytes)") &&
              Contains(e, "80 bytes follow")) << e;
  e = ErrorOf([] { TokenFile::Open(WriteTokens("llmc_v9.bin", Ramp(4), {20240520, 9, 4}), DType::kUInt16); });
  EXPECT_TRUE(Contains(e, "version 9")) << e;
  // Fewer tokens than a window and its next token.
  e = ErrorOf([&] { LoadImageDataset("tokens:" + WriteTokens("tiny.bin", Ramp(8)), "train", TokenOptions(8)); });
  EXPECT_TRUE(Contains(e, "tiny.bin") && Contains(e, "--seq-len 8")) << e;
  // No --seq-len.
  e = ErrorOf([&] { LoadImageDataset("tokens:" + WriteTokens("t.bin", Ramp(80)), "train", DataSourceOptions{}); });
  EXPECT_TRUE(Contains(e, "--seq-len")) << e;
  // Ids beyond the embedding: named at batch time with the file and position.
  DataSourceOptions o = TokenOptions(4);
  o.token_vocabulary = 500;
  o.token_vocabulary_source = "the embedding 'wte'";
  ImageDataset ds = LoadImageDataset("tokens:" + WriteTokens("ramp_v.bin", Ramp(1000)), "train", o);
  std::vector<int64_t> all;
  for (int64_t i = 0; i < ds.count; ++i) all.push_back(i);
  e = ErrorOf([&] { ds.source->Inputs(all, nullptr, 0, 0); });
  EXPECT_TRUE(Contains(e, "ramp_v.bin") && Contains(e, "outside [0, 500)") && Contains(e, "'wte'")) << e;
}

TEST(TokenDataTest, SeededBatchesAndResumeContinueTheSequence) {
  const std::string spec = "tokens:" + WriteTokens("resume.bin", Ramp(5000));
  ImageDataset a = LoadImageDataset(spec, "train", TokenOptions(8, 11));
  ImageDataset b = LoadImageDataset(spec, "train", TokenOptions(8, 11));
  ImageDataset c = LoadImageDataset(spec, "train", TokenOptions(8, 12));
  SamplerOptions so;
  so.dataset_size = a.count;
  so.batch_size = 4;
  so.seed = 11;
  auto batches = [&](const ImageDataset& ds, SamplerState from, int n) {
    DistributedSampler s(so);
    s.Restore(from);
    std::vector<std::vector<int64_t>> out;
    for (int k = 0; k < n; ++k) {
      const SamplerState at = s.State();
      Batch batch = PrepareBatch(ds, s.NextBatch(), AugmentOptions{}, at.epoch, at.position);
      out.push_back(batch.images.AsInt64s());
      std::vector<int64_t> y = batch.labels.AsInt64s();
      out.back().insert(out.back().end(), y.begin(), y.end());
    }
    return out;
  };
  const int per_epoch = static_cast<int>(DistributedSampler(so).BatchesPerEpoch());
  const auto full = batches(a, {0, 0}, per_epoch + 5);  // into the second epoch
  EXPECT_EQ(full, batches(b, {0, 0}, per_epoch + 5));   // same seed: same batches
  EXPECT_NE(full, batches(c, {0, 0}, per_epoch + 5));   // another seed: others
  // A sampler restored to a saved state (mid-epoch, and at the next epoch's start) makes the
  // batches the uninterrupted run made from there.
  for (SamplerState at : {SamplerState{0, 7}, SamplerState{1, 0}, SamplerState{1, 2}}) {
    const auto rest = batches(b, at, 3);
    const size_t from = static_cast<size_t>(at.epoch * per_epoch + at.position);
    for (size_t k = 0; k < rest.size(); ++k) EXPECT_EQ(rest[k], full[from + k]) << "batch " << from + k;
  }
}

TEST(TokenDataTest, ModelFittingAndOutputCheck) {
  // A model whose input [N, 12] takes int64 ids into a 300-row embedding.
  Model m;
  ValueInfo in;
  in.name = "idx";
  in.dtype = DType::kInt64;
  in.has_shape = true;
  in.dims = {Dim{-1, "N"}, Dim{12, ""}};
  m.graph.inputs.push_back(in);
  HostTensor table(DType::kFloat32, {300, 4}, "wte.weight");
  m.graph.initializers.push_back(table);
  Node gather;
  gather.op_type = "Gather";
  gather.inputs = {"wte.weight", "idx"};
  gather.outputs = {"emb"};
  m.graph.nodes.push_back(gather);
  ValueInfo out;
  out.name = "logits";
  out.dtype = DType::kFloat32;
  out.has_shape = true;
  out.dims = {Dim{-1, "N"}, Dim{12, ""}, Dim{300, ""}};
  m.graph.outputs.push_back(out);
  const std::string spec = "tokens:" + WriteTokens("fit.bin", Ramp(400));
  DataSourceOptions o = DataSourceForModel(m, spec, 3);
  EXPECT_EQ(o.token_seq_len, 12);  // the input's length
  EXPECT_EQ(o.token_vocabulary, 300);
  EXPECT_TRUE(Contains(o.token_vocabulary_source, "wte.weight"));
  ImageDataset ds = LoadImageDataset(spec, "train", o);
  EXPECT_EQ(ErrorOf([&] { CheckDataFitsInput(m.graph.inputs[0], ds); }), "");
  EXPECT_EQ(ErrorOf([&] { CheckLabelsFitOutput(m.graph.outputs[0], ds); }), "");
  // Ramp's ids reach 997: beyond the 300 rows, named when a batch is made.
  EXPECT_TRUE(
      Contains(ErrorOf([&] { ds.source->Inputs({0, 1, 2, 3, 4, 5, 6, 7}, nullptr, 0, 0); }), "outside [0, 300)"));
  // --seq-len other than the model's fixed length: the input check names it.
  DataSourceOptions flags;
  flags.token_seq_len = 10;
  DataSourceOptions o10 = DataSourceForModel(m, spec, 3, flags);
  ImageDataset ds10 = LoadImageDataset(spec, "train", o10);
  EXPECT_TRUE(Contains(ErrorOf([&] { CheckDataFitsInput(m.graph.inputs[0], ds10); }), "'idx'"));
  // Scores [N, V, T] fit labels [N, T] with the classes on axis 1 (PyTorch's reading of a
  // Conv1d's [N, C, L]); [N, V, 11] fits neither way, [N, V] not at all.
  ValueInfo wrong = out;
  wrong.dims = {Dim{-1, "N"}, Dim{300, ""}, Dim{10, ""}};
  EXPECT_EQ(ErrorOf([&] { CheckLabelsFitOutput(wrong, ds10); }), "");
  wrong.dims = {Dim{-1, "N"}, Dim{300, ""}, Dim{11, ""}};
  EXPECT_TRUE(Contains(ErrorOf([&] { CheckLabelsFitOutput(wrong, ds10); }), "[N, d..., V]"));
  EXPECT_TRUE(Contains(ErrorOf([&] { CheckLabelsFitOutput(wrong, ds10); }), "--seq-len"));
  wrong.dims = {Dim{-1, "N"}, Dim{300, ""}};
  EXPECT_TRUE(Contains(ErrorOf([&] { CheckLabelsFitOutput(wrong, ds10); }), "per-position labels"));
  // A model with a dynamic sequence length needs --seq-len.
  m.graph.inputs[0].dims[1] = Dim{-1, "T"};
  EXPECT_TRUE(Contains(ErrorOf([&] { DataSourceForModel(m, spec, 3); }), "needs --seq-len"));
}

}  // namespace
}  // namespace ot
