// Tests of the data pipeline: IDX and CIFAR-10 readers (real Fashion-MNIST, and small files
// written here in the real formats, also truncated or corrupt), synthetic data, the
// distributed sampler, augmentation, the background batch loader and the data/model shape
// checks.
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "graph/error.h"
#include "tests/common/test_util.h"
#include "train/loader/augment.h"
#include "train/recipe/mix_batch.h"
#include "train/loader/batch_loader.h"
#include "train/readers/cifar10_reader.h"
#include "train/readers/data_random.h"
#include "train/readers/idx_reader.h"
#include "train/data/image_dataset.h"
#include "train/loader/model_input_check.h"
#include "train/loader/sampler.h"

namespace ot {
namespace {

// ---------------------------------------------------------------------------------------
// Helpers

// A fresh empty folder under the test's working directory.
std::string TempDir(const std::string& name) {
  const std::string dir = "data_test_tmp/" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(f.good()) << path;
}

void WriteGzip(const std::string& path, const std::string& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())), static_cast<int>(bytes.size()));
  gzclose(f);
}

std::string ReadBytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// An IDX file of unsigned bytes with the given dims and data.
std::string IdxBytes(const std::vector<uint32_t>& dims, const std::string& data) {
  std::string s = {0, 0, 8, static_cast<char>(dims.size())};
  for (uint32_t d : dims)
    for (int shift = 24; shift >= 0; shift -= 8) s.push_back(static_cast<char>((d >> shift) & 0xff));
  return s + data;
}

// The message of the ot::Error that fn throws ("" when it throws nothing).
template <typename Fn> std::string ErrorOf(Fn fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A CIFAR-10 record: label, then 3072 pixel bytes derived from (seed, i).
std::string CifarRecord(int label, int seed) {
  std::string r(1, static_cast<char>(label));
  for (int i = 0; i < kCifar10ImageBytes; ++i) r.push_back(static_cast<char>((seed * 31 + i * 7) & 0xff));
  return r;
}

// Writes a fake split of `records` records per file; record k of file f has label
// (f*records + k) % 10 and pixels from seed f*records + k.
void WriteFakeCifar(const std::string& dir, const std::string& split, int records) {
  std::vector<std::string> names;
  if (split == "test") names = {"test_batch.bin"};
  else for (int i = 1; i <= 5; ++i) names.push_back("data_batch_" + std::to_string(i) + ".bin");
  for (size_t f = 0; f < names.size(); ++f) {
    std::string bytes;
    for (int k = 0; k < records; ++k) {
      const int id = static_cast<int>(f) * records + k;
      bytes += CifarRecord(id % 10, id);
    }
    WriteBytes(dir + "/" + names[f], bytes);
  }
}

bool Contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// ---------------------------------------------------------------------------------------
// IDX: real Fashion-MNIST and broken files

TEST(IdxTest, RealFashionMnist) {
  if (ReadBytes(std::string(kFashionMnistDir) + "/train-labels-idx1-ubyte.gz").empty())
    GTEST_SKIP() << "Debian's dataset-fashion-mnist is not installed";
  ImageDataset train = LoadImageDataset("fashion-mnist", "train");
  ImageDataset test = LoadImageDataset("fashion-mnist:" + std::string(kFashionMnistDir), "test");
  EXPECT_EQ(train.count, 60000);
  EXPECT_EQ(test.count, 10000);
  for (const ImageDataset* ds : {&train, &test}) {
    EXPECT_EQ(ds->ImageShapeString(), "1x28x28");
    EXPECT_EQ(ds->classes, 10);
    EXPECT_EQ(ds->pixels.size(), static_cast<size_t>(ds->count * 28 * 28));
    std::map<int64_t, int64_t> histogram;
    for (int64_t l : ds->labels) ++histogram[l];
    ASSERT_EQ(histogram.size(), 10u);
    for (auto& [label, n] : histogram) EXPECT_EQ(n, ds->count / 10) << "label " << label;
  }
  // The mean pixel is what the recipe's normalisation assumes (0.2860 on the train split).
  double sum = 0;
  for (uint8_t p : train.pixels) sum += p;
  EXPECT_NEAR(sum / train.pixels.size() / 255.0, 0.2860, 1e-3);
  HostTensor x = train.Images({0, 59999});
  EXPECT_EQ(x.dims, (std::vector<int64_t>{2, 1, 28, 28}));
  EXPECT_FLOAT_EQ(x.Data<float>()[0], (train.pixels[0] / 255.f - 0.2860f) / 0.3530f);
}

TEST(IdxTest, BrokenFiles) {
  const std::string dir = TempDir("idx");
  const std::string data(12, '\x05');
  // Header promises 3x2x2 = 12 bytes, the file holds 10.
  WriteBytes(dir + "/short", IdxBytes({3, 2, 2}, data.substr(0, 10)));
  EXPECT_TRUE(Contains(ErrorOf([&] { ReadIdxFile(dir + "/short"); }), "wrong size")) << ErrorOf([&] {
    ReadIdxFile(dir + "/short");
  });
  // Header cut short.
  WriteBytes(dir + "/header", IdxBytes({3, 2, 2}, "").substr(0, 9));
  EXPECT_TRUE(Contains(ErrorOf([&] { ReadIdxFile(dir + "/header"); }), "truncated"));
  // Bad magic and unsupported element type.
  WriteBytes(dir + "/magic", "\x01\x02\x08\x01\x00\x00\x00\x01x");
  EXPECT_TRUE(Contains(ErrorOf([&] { ReadIdxFile(dir + "/magic"); }), "magic"));
  std::string floats = IdxBytes({1}, "abcd");
  floats[2] = 0x0d;
  WriteBytes(dir + "/float", floats);
  EXPECT_TRUE(Contains(ErrorOf([&] { ReadIdxFile(dir + "/float"); }), "0x0d"));
  // A good gzip file reads; the same file cut short is reported as corrupt or truncated.
  WriteGzip(dir + "/good.gz", IdxBytes({3, 2, 2}, data));
  EXPECT_EQ(ReadIdxFile(dir + "/good.gz").dims, (std::vector<int64_t>{3, 2, 2}));
  const std::string gz = ReadBytes(dir + "/good.gz");
  WriteBytes(dir + "/cut.gz", gz.substr(0, gz.size() - 6));
  const std::string cut = ErrorOf([&] { ReadIdxFile(dir + "/cut.gz"); });
  EXPECT_TRUE(Contains(cut, "cut.gz") && Contains(cut, "corrupt or truncated")) << cut;
  std::string flipped = gz;
  flipped[flipped.size() / 2] ^= 0x5a;
  WriteBytes(dir + "/corrupt.gz", flipped);
  EXPECT_FALSE(ErrorOf([&] { ReadIdxFile(dir + "/corrupt.gz"); }).empty());
  // Missing file.
  EXPECT_TRUE(Contains(ErrorOf([&] { ReadIdxFile(dir + "/nothing"); }), "nothing"));
}

TEST(IdxTest, MnistFolderChecks) {
  const std::string dir = TempDir("mnist");
  WriteBytes(dir + "/t10k-images-idx3-ubyte", IdxBytes({2, 2, 2}, std::string(8, '\x07')));
  WriteBytes(dir + "/t10k-labels-idx1-ubyte", IdxBytes({3}, std::string("\x01\x02\x03", 3)));
  EXPECT_TRUE(Contains(ErrorOf([&] { LoadImageDataset("mnist:" + dir, "test"); }), "holds 3 labels"));
  WriteBytes(dir + "/t10k-labels-idx1-ubyte", IdxBytes({2}, std::string("\x01\x0a", 2)));
  const std::string bad_label = ErrorOf([&] { LoadImageDataset("mnist:" + dir, "test"); });
  EXPECT_TRUE(Contains(bad_label, "label 10 at index 1")) << bad_label;
  WriteBytes(dir + "/t10k-labels-idx1-ubyte", IdxBytes({2}, std::string("\x01\x09", 2)));
  ImageDataset ds = LoadImageDataset("mnist:" + dir, "test");
  EXPECT_EQ(ds.count, 2);
  EXPECT_EQ(ds.labels, (std::vector<int64_t>{1, 9}));
  EXPECT_TRUE(Contains(ErrorOf([&] { LoadImageDataset("mnist:" + dir, "train"); }), "train-images-idx3-ubyte"));
  EXPECT_TRUE(Contains(ErrorOf([&] { LoadImageDataset("mnist", "train"); }), "mnist:DIR"));
  EXPECT_TRUE(Contains(ErrorOf([&] { LoadImageDataset("imagenet", "train"); }), "unknown data set 'imagenet'"));
  EXPECT_TRUE(Contains(ErrorOf([&] { LoadImageDataset("mnist:" + dir, "valid"); }), "unknown split"));
}

// ---------------------------------------------------------------------------------------
// CIFAR-10

TEST(Cifar10Test, ReadsRecordsInOrder) {
  const std::string dir = TempDir("cifar");
  WriteFakeCifar(dir, "train", 3);
  WriteFakeCifar(dir, "test", 4);
  ImageDataset train = ReadCifar10(dir, "train", 3);
  ASSERT_EQ(train.count, 15);
  EXPECT_EQ(train.ImageShapeString(), "3x32x32");
  EXPECT_EQ(train.name, "cifar10");
  for (int id = 0; id < 15; ++id) {
    EXPECT_EQ(train.labels[id], id % 10);
    const std::string rec = CifarRecord(id % 10, id);
    ASSERT_EQ(0, std::memcmp(train.pixels.data() + id * kCifar10ImageBytes, rec.data() + 1, kCifar10ImageBytes))
        << "record " << id;
  }
  ImageDataset test = ReadCifar10(dir, "test", 4);
  EXPECT_EQ(test.count, 4);
  // Channel planes: pixel (c, y, x) is byte 1 + c*1024 + y*32 + x of the record.
  HostTensor x = test.Images({2});
  const std::string rec = CifarRecord(2, 2);
  const int c = 1, y = 5, xx = 7;
  const float raw = static_cast<uint8_t>(rec[1 + c * 1024 + y * 32 + xx]);
  EXPECT_FLOAT_EQ(x.Data<float>()[c * 1024 + y * 32 + xx], (raw / 255.f - 0.4822f) / 0.2435f);
}

TEST(Cifar10Test, MissingTruncatedAndBadLabels) {
  const std::string dir = TempDir("cifar_bad");
  WriteFakeCifar(dir, "train", 2);
  std::remove((dir + "/data_batch_3.bin").c_str());
  std::string e = ErrorOf([&] { ReadCifar10(dir, "train", 2); });
  EXPECT_TRUE(Contains(e, "data_batch_3.bin") && Contains(e, "missing") && Contains(e, "6146 bytes")) << e;

  WriteFakeCifar(dir, "train", 2);
  const std::string full = ReadBytes(dir + "/data_batch_4.bin");
  WriteBytes(dir + "/data_batch_4.bin", full.substr(0, full.size() - 100));
  e = ErrorOf([&] { ReadCifar10(dir, "train", 2); });
  EXPECT_TRUE(Contains(e, "data_batch_4.bin") && Contains(e, "has 6046 bytes") && Contains(e, "expected 6146"))
      << e;

  WriteFakeCifar(dir, "train", 2);
  std::string bad = ReadBytes(dir + "/data_batch_2.bin");
  bad[kCifar10RecordBytes] = 10;  // label of record 1
  WriteBytes(dir + "/data_batch_2.bin", bad);
  e = ErrorOf([&] { ReadCifar10(dir, "train", 2); });
  EXPECT_TRUE(Contains(e, "data_batch_2.bin") && Contains(e, "label 10 of record 1")) << e;

  // Through the spec: the real files hold 10000 records each, small ones are wrongly sized.
  e = ErrorOf([&] { LoadImageDataset("cifar10:" + dir, "train"); });
  EXPECT_TRUE(Contains(e, "data_batch_1.bin") && Contains(e, "30730000 bytes")) << e;
  EXPECT_TRUE(Contains(ErrorOf([&] { LoadImageDataset("cifar10", "train"); }), "cifar10:DIR"));
}

TEST(Cifar10Test, FullSizeTestSplitThroughSpec) {
  const std::string dir = TempDir("cifar_full");
  WriteFakeCifar(dir, "test", static_cast<int>(kCifar10RecordsPerFile));
  ImageDataset ds = LoadImageDataset("cifar10:" + dir, "test");
  EXPECT_EQ(ds.count, 10000);
  EXPECT_EQ(ds.labels[9999], 9999 % 10);
  EXPECT_EQ(ds.mean, (std::vector<float>{0.4914f, 0.4822f, 0.4465f}));
  EXPECT_EQ(ds.stddev, (std::vector<float>{0.2470f, 0.2435f, 0.2616f}));
}

// ---------------------------------------------------------------------------------------
// Synthetic data

TEST(SyntheticTest, DeterministicAndShaped) {
  SyntheticDataOptions o;
  o.count = 50;
  o.seed = 7;
  ImageDataset a = MakeSyntheticDataset(o), b = MakeSyntheticDataset(o);
  EXPECT_EQ(a.pixels, b.pixels);
  EXPECT_EQ(a.labels, b.labels);
  EXPECT_EQ(a.ImageShapeString(), "3x32x32");
  o.seed = 8;
  EXPECT_NE(MakeSyntheticDataset(o).pixels, a.pixels);
  std::set<int64_t> seen(a.labels.begin(), a.labels.end());
  EXPECT_GT(seen.size(), 5u);
  EXPECT_GE(*seen.begin(), 0);
  EXPECT_LT(*seen.rbegin(), 10);

  DataSourceOptions src;
  src.synthetic.channels = 1;
  src.synthetic.height = 28;
  src.synthetic.width = 28;
  src.synthetic.classes = 4;
  ImageDataset model_shaped = LoadImageDataset("synthetic:20", "train", src);
  EXPECT_EQ(model_shaped.count, 20);
  EXPECT_EQ(model_shaped.ImageShapeString(), "1x28x28");
  for (int64_t l : model_shaped.labels) EXPECT_LT(l, 4);
  EXPECT_NE(LoadImageDataset("synthetic:20", "test", src).pixels, model_shaped.pixels);
  ImageDataset spec_shaped = LoadImageDataset("synthetic:6:2x5x7", "train");
  EXPECT_EQ(spec_shaped.ImageShapeString(), "2x5x7");
  EXPECT_EQ(spec_shaped.pixels.size(), 6u * 70u);
  EXPECT_EQ(LoadImageDataset("synthetic", "train").count, 1024);
  EXPECT_TRUE(Contains(ErrorOf([] { LoadImageDataset("synthetic:ten", "train"); }), "'ten'"));
  EXPECT_TRUE(Contains(ErrorOf([] { LoadImageDataset("synthetic:10:3x32", "train"); }), "CxHxW"));
  EXPECT_TRUE(Contains(ErrorOf([] { LoadImageDataset("synthetic:0", "train"); }), "positive"));
}

// The labels of synthetic data must be learnable from the pixels (so that `onnx-train MODEL
// --data synthetic` shows a falling loss), and the test split must hold other samples of
// the same class patterns: a nearest-class-mean classifier fitted on the train split
// classifies the test split. Random labels would leave it near 1/classes.
TEST(SyntheticTest, LabelsLearnableFromPixels) {
  struct Case { int64_t c, h, w, classes; };
  for (const Case& cs : {Case{1, 28, 28, 10}, Case{3, 8, 8, 7}, Case{3, 32, 32, 10}, Case{2, 5, 3, 3}}) {
    DataSourceOptions src;
    src.synthetic.channels = cs.c;
    src.synthetic.height = cs.h;
    src.synthetic.width = cs.w;
    src.synthetic.classes = cs.classes;
    src.synthetic.seed = 11;
    ImageDataset train = LoadImageDataset("synthetic:600", "train", src);
    ImageDataset test = LoadImageDataset("synthetic:300", "test", src);
    const int64_t n = train.ImageBytes();
    std::vector<int64_t> all(static_cast<size_t>(train.count));
    for (int64_t i = 0; i < train.count; ++i) all[static_cast<size_t>(i)] = i;
    HostTensor x = train.Images(all);
    const float* px = x.Data<float>();
    // Normalised pixels: mean near 0, standard deviation near 1.
    double sum = 0, sum_sq = 0;
    for (int64_t i = 0; i < train.count * n; ++i) {
      sum += px[i];
      sum_sq += double(px[i]) * px[i];
    }
    const double mean = sum / double(train.count * n), sd = std::sqrt(sum_sq / double(train.count * n) - mean * mean);
    EXPECT_LT(std::abs(mean), 0.35) << train.ImageShapeString();
    EXPECT_GT(sd, 0.7) << train.ImageShapeString();
    EXPECT_LT(sd, 1.3) << train.ImageShapeString();
    // Class means of the train split; every class present.
    std::vector<double> centre(static_cast<size_t>(cs.classes * n), 0.0);
    std::vector<int64_t> members(static_cast<size_t>(cs.classes), 0);
    for (int64_t i = 0; i < train.count; ++i) {
      const int64_t k = train.labels[static_cast<size_t>(i)];
      ++members[static_cast<size_t>(k)];
      for (int64_t p = 0; p < n; ++p) centre[static_cast<size_t>(k * n + p)] += px[i * n + p];
    }
    for (int64_t k = 0; k < cs.classes; ++k) {
      ASSERT_GT(members[static_cast<size_t>(k)], train.count / cs.classes / 3) << "class " << k;
      for (int64_t p = 0; p < n; ++p) centre[static_cast<size_t>(k * n + p)] /= double(members[static_cast<size_t>(k)]);
    }
    std::vector<int64_t> test_all(static_cast<size_t>(test.count));
    for (int64_t i = 0; i < test.count; ++i) test_all[static_cast<size_t>(i)] = i;
    HostTensor tx = test.Images(test_all);
    const float* tp = tx.Data<float>();
    EXPECT_NE(test.pixels, std::vector<uint8_t>(train.pixels.begin(), train.pixels.begin() + test.count * n));
    int64_t right = 0;
    for (int64_t i = 0; i < test.count; ++i) {
      int64_t best = -1;
      double best_d = 0;
      for (int64_t k = 0; k < cs.classes; ++k) {
        double d = 0;
        for (int64_t p = 0; p < n; ++p) {
          const double e = tp[i * n + p] - centre[static_cast<size_t>(k * n + p)];
          d += e * e;
        }
        if (best < 0 || d < best_d) best = k, best_d = d;
      }
      right += best == test.labels[static_cast<size_t>(i)];
    }
    EXPECT_GT(double(right) / double(test.count), 0.9) << train.ImageShapeString() << ", " << cs.classes << " classes";
  }
}

TEST(RandomTest, FixedBitsAndUniformRange) {
  // std::mt19937_64's sequence is fixed by the standard (its 10000th value from the default
  // seed is given there); our shuffle, seeds and sampler order on top of it are pinned
  // here, so that a checkpoint resumes the same order on any platform.
  std::mt19937_64 standard;
  standard.discard(9999);
  EXPECT_EQ(standard(), 9981545732273789042ull);
  EXPECT_EQ(StreamSeed(1, 2, 3), 15020427595393229491ull);
  std::mt19937_64 pinned(42);
  std::vector<int64_t> order(10);
  std::iota(order.begin(), order.end(), 0);
  ShuffleInPlace(order, pinned);
  EXPECT_EQ(order, (std::vector<int64_t>{1, 7, 9, 0, 3, 8, 4, 2, 5, 6}));
  SamplerOptions so;
  so.dataset_size = 10;
  so.batch_size = 3;
  so.rank = 1;
  so.world_size = 3;
  so.seed = 5;
  EXPECT_EQ(DistributedSampler(so).EpochOrder(2), (std::vector<int64_t>{7, 3, 8, 0}));

  std::mt19937_64 rng(42);
  std::vector<int64_t> v(10);
  std::iota(v.begin(), v.end(), 0);
  ShuffleInPlace(v, rng);
  std::vector<int64_t> sorted = v;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_NE(v, sorted);
  std::vector<int> counts(3);
  for (int i = 0; i < 30000; ++i) ++counts[UniformBelow(rng, 3)];
  for (int c : counts) EXPECT_NEAR(c, 10000, 400);
  EXPECT_NE(StreamSeed(1, 2, 3), StreamSeed(1, 3, 2));
  EXPECT_EQ(StreamSeed(1, 2, 3), StreamSeed(1, 2, 3));
}

// UniformBelow's draws are the plain rejection rule's (2^64 mod n computed for every draw),
// also for ranges where draws are often rejected (n just above 2^63: about half of them), so
// shuffles, and with them every run's batch order, stay what they were.
TEST(DataRandom, UniformBelowIsThePlainRejectionRule) {
  auto plain = [](std::mt19937_64& rng, uint64_t n) {
    const uint64_t excess = (UINT64_MAX % n + 1) % n;
    uint64_t x = rng();
    while (x > UINT64_MAX - excess) x = rng();
    return x % n;
  };
  for (const uint64_t n : {uint64_t{1}, uint64_t{2}, uint64_t{3}, uint64_t{10}, uint64_t{60000}, uint64_t{1} << 32,
                           (uint64_t{1} << 63) + 1, (uint64_t{1} << 63) + 12345, UINT64_MAX - 1, UINT64_MAX}) {
    std::mt19937_64 a(7), b(7);
    for (int i = 0; i < 2000; ++i) ASSERT_EQ(UniformBelow(a, n), plain(b, n)) << "n " << n << " draw " << i;
    EXPECT_EQ(a(), b()) << "n " << n << ": the same draws were taken from the stream";
  }
}

// ---------------------------------------------------------------------------------------
// Sampler

SamplerOptions Sampling(int64_t n, int64_t batch, int64_t rank = 0, int64_t world = 1, bool shuffle = true,
                        uint64_t seed = 1) {
  SamplerOptions o;
  o.dataset_size = n;
  o.batch_size = batch;
  o.rank = rank;
  o.world_size = world;
  o.shuffle = shuffle;
  o.seed = seed;
  return o;
}

TEST(SamplerTest, OneRankEveryIndexOncePerEpoch) {
  DistributedSampler s(Sampling(1000, 64));
  std::vector<int64_t> e0 = s.EpochOrder(0), e1 = s.EpochOrder(1);
  for (const auto* order : {&e0, &e1}) {
    std::vector<int64_t> sorted = *order;
    std::sort(sorted.begin(), sorted.end());
    std::vector<int64_t> all(1000);
    std::iota(all.begin(), all.end(), 0);
    EXPECT_EQ(sorted, all);
  }
  EXPECT_NE(e0, e1);
  EXPECT_EQ(DistributedSampler(Sampling(1000, 64)).EpochOrder(0), e0);
  EXPECT_NE(DistributedSampler(Sampling(1000, 64, 0, 1, true, 2)).EpochOrder(0), e0);
  // Unshuffled: the data set's order.
  std::vector<int64_t> plain = DistributedSampler(Sampling(5, 2, 0, 1, false)).EpochOrder(3);
  EXPECT_EQ(plain, (std::vector<int64_t>{0, 1, 2, 3, 4}));
}

TEST(SamplerTest, LastPartialBatchKept) {
  DistributedSampler s(Sampling(50000, 128));
  EXPECT_EQ(s.BatchesPerEpoch(), 391);
  std::vector<int64_t> order = s.EpochOrder(0);
  EXPECT_EQ(s.BatchOf(order, 390).size(), 50000u - 390u * 128u);
  EXPECT_EQ(s.BatchOf(order, 0).size(), 128u);
  EXPECT_FALSE(ErrorOf([&] { s.BatchOf(order, 391); }).empty());
}

TEST(SamplerTest, ShardsDisjointCoveringWithPadding) {
  for (int64_t n : {10, 12, 3}) {
    const int64_t world = 4;
    const std::vector<int64_t> whole = DistributedSampler(Sampling(n, 2)).EpochOrder(5);  // same shuffle
    std::vector<int64_t> real, padding;
    int64_t per_rank = -1;
    for (int64_t r = 0; r < world; ++r) {
      DistributedSampler s(Sampling(n, 2, r, world));
      std::vector<int64_t> mine = s.EpochOrder(5);
      if (per_rank < 0) per_rank = static_cast<int64_t>(mine.size());
      EXPECT_EQ(static_cast<int64_t>(mine.size()), per_rank) << "equal length on every rank";
      EXPECT_EQ(per_rank, (n + world - 1) / world);
      for (int64_t k = 0; k < per_rank; ++k) {
        // Round-robin over the padded epoch order.
        const int64_t pos = r + k * world;
        EXPECT_EQ(mine[k], whole[pos % n]) << "n " << n << " rank " << r << " k " << k;
        (pos < n ? real : padding).push_back(mine[k]);
      }
      int64_t real_here = 0;
      for (int64_t k = 0; k < per_rank; ++k) real_here += r + k * world < n;
      EXPECT_EQ(s.RealSamplesPerRank(), real_here);
    }
    std::vector<int64_t> sorted = real;
    std::sort(sorted.begin(), sorted.end());
    std::vector<int64_t> all(n);
    std::iota(all.begin(), all.end(), 0);
    EXPECT_EQ(sorted, all) << "real samples of all ranks: each index once";
    // Padding repeats the first indices of the epoch's order.
    for (size_t i = 0; i < padding.size(); ++i) EXPECT_EQ(padding[i], whole[i % n]);
  }
}

TEST(SamplerTest, RealSamplesInBatchMarksPadding) {
  // 10 samples on 4 ranks: 3 each, ranks 2 and 3 end with one padding sample.
  DistributedSampler r1(Sampling(10, 2, 1, 4)), r3(Sampling(10, 2, 3, 4));
  EXPECT_EQ(r1.RealSamplesPerRank(), 3);
  EXPECT_EQ(r3.RealSamplesPerRank(), 2);
  EXPECT_EQ(r3.RealSamplesInBatch(0), 2);
  EXPECT_EQ(r3.RealSamplesInBatch(1), 0);
  EXPECT_EQ(r1.RealSamplesInBatch(1), 1);
}

TEST(SamplerTest, StateResumesExactly) {
  DistributedSampler a(Sampling(23, 5, 1, 2));  // 12 per rank, 3 batches per epoch
  ASSERT_EQ(a.BatchesPerEpoch(), 3);
  std::vector<std::vector<int64_t>> stream;
  SamplerState saved;
  for (int i = 0; i < 8; ++i) {
    if (i == 4) saved = a.State();
    stream.push_back(a.NextBatch());
  }
  EXPECT_EQ(saved.epoch, 1);
  EXPECT_EQ(saved.position, 1);
  EXPECT_EQ(a.State().epoch, 2);
  EXPECT_EQ(a.State().position, 2);
  // Epoch by epoch, the stream is the epoch order.
  std::vector<int64_t> e1 = a.EpochOrder(1);
  EXPECT_EQ(stream[3], a.BatchOf(e1, 0));
  EXPECT_EQ(stream[5].size(), 2u);
  DistributedSampler b(Sampling(23, 5, 1, 2));
  b.Restore(saved);
  for (int i = 4; i < 8; ++i) EXPECT_EQ(b.NextBatch(), stream[i]) << "batch " << i;
  b.Restore({4, 3});  // end of epoch 4 = start of epoch 5
  EXPECT_EQ(b.State(), (SamplerState{5, 0}));
  EXPECT_TRUE(Contains(ErrorOf([&] { b.Restore({0, 4}); }), "batch size"));
  EXPECT_FALSE(ErrorOf([] { DistributedSampler(Sampling(0, 5)); }).empty());
  EXPECT_FALSE(ErrorOf([] { DistributedSampler(Sampling(5, 5, 2, 2)); }).empty());
}

// ---------------------------------------------------------------------------------------
// Augmentation

// Reference: pad with zeros explicitly, crop at (dy, dx), then flip.
std::vector<uint8_t> PadCropFlip(const std::vector<uint8_t>& img, int64_t c, int64_t h, int64_t w, int64_t pad,
                                 const SampleAugmentation& a) {
  const int64_t ph = h + 2 * pad, pw = w + 2 * pad;
  std::vector<uint8_t> padded(c * ph * pw, 0), out(c * h * w);
  for (int64_t ch = 0; ch < c; ++ch)
    for (int64_t y = 0; y < h; ++y)
      for (int64_t x = 0; x < w; ++x) padded[(ch * ph + y + pad) * pw + x + pad] = img[(ch * h + y) * w + x];
  for (int64_t ch = 0; ch < c; ++ch)
    for (int64_t y = 0; y < h; ++y)
      for (int64_t x = 0; x < w; ++x) {
        const int64_t cx = a.flip ? w - 1 - x : x;
        out[(ch * h + y) * w + x] = padded[(ch * ph + y + a.dy) * pw + cx + a.dx];
      }
  return out;
}

TEST(AugmentTest, CropAndFlipOnTinyImage) {
  const int64_t n = 64, c = 2, h = 3, w = 4, image = c * h * w;
  std::vector<uint8_t> one(image);
  std::iota(one.begin(), one.end(), uint8_t{1});
  HostTensor batch(DType::kUInt8, {n, c, h, w});
  for (int64_t i = 0; i < n; ++i) std::copy(one.begin(), one.end(), batch.Data<uint8_t>() + i * image);
  AugmentOptions o;
  o.random_crop = true;
  o.crop_padding = 1;
  o.horizontal_flip = true;
  o.seed = 3;
  const HostTensor before = batch;
  AugmentBatch(batch, o, 2, 5);
  const std::vector<SampleAugmentation> choices = DrawAugmentations(o, n, 2, 5);
  std::set<std::tuple<int64_t, int64_t, bool>> kinds;
  for (int64_t i = 0; i < n; ++i) {
    const SampleAugmentation& a = choices[i];
    kinds.insert({a.dy, a.dx, a.flip});
    std::vector<uint8_t> got(batch.Data<uint8_t>() + i * image, batch.Data<uint8_t>() + (i + 1) * image);
    EXPECT_EQ(got, PadCropFlip(one, c, h, w, 1, a)) << "sample " << i << " dy " << a.dy << " dx " << a.dx;
  }
  EXPECT_GT(kinds.size(), 12u) << "crops over 3x3 offsets and both flips should all occur";
  // A known case by hand: dy = 0, dx = 2, flipped, on the 3x4 first channel 1..12:
  //   padded row y=-1 is zeros; out[y][x] = img[y-1][(3-x)+1], zero where outside.
  std::vector<uint8_t> expect_ch0 = {0, 0, 0, 0, 0, 4, 3, 2, 0, 8, 7, 6};
  std::vector<uint8_t> hand = PadCropFlip(one, c, h, w, 1, {0, 2, true});
  EXPECT_EQ(std::vector<uint8_t>(hand.begin(), hand.begin() + 12), expect_ch0);

  // Reproducible, and different for another batch index.
  HostTensor again = before;
  AugmentBatch(again, o, 2, 5);
  EXPECT_EQ(again.bytes, batch.bytes);
  HostTensor other = before;
  AugmentBatch(other, o, 2, 6);
  EXPECT_NE(other.bytes, batch.bytes);
  // Off by default: nothing changes.
  HostTensor untouched = before;
  AugmentBatch(untouched, AugmentOptions{}, 2, 5);
  EXPECT_EQ(untouched.bytes, before.bytes);
  // Float batches get the same geometry.
  HostTensor f(DType::kFloat32, {n, c, h, w});
  for (int64_t i = 0; i < n * image; ++i) f.Data<float>()[i] = before.Data<uint8_t>()[i];
  AugmentBatch(f, o, 2, 5);
  for (int64_t i = 0; i < n * image; ++i) ASSERT_EQ(f.Data<float>()[i], batch.Data<uint8_t>()[i]);
}

TEST(AugmentTest, FlipOnlyKeepsPlace) {
  AugmentOptions o;
  o.horizontal_flip = true;
  for (const SampleAugmentation& a : DrawAugmentations(o, 20, 0, 0)) {
    EXPECT_EQ(a.dy, o.crop_padding);
    EXPECT_EQ(a.dx, o.crop_padding);
  }
  HostTensor t(DType::kUInt8, {1, 1, 1, 3});
  t.Data<uint8_t>()[0] = 1;
  t.Data<uint8_t>()[1] = 2;
  t.Data<uint8_t>()[2] = 3;
  const bool flip = DrawAugmentations(o, 1, 0, 9)[0].flip;
  AugmentBatch(t, o, 0, 9);
  EXPECT_EQ(t.Data<uint8_t>()[0], flip ? 3 : 1);
  EXPECT_EQ(t.Data<uint8_t>()[1], 2);
}

// ---------------------------------------------------------------------------------------
// BatchLoader

ImageDataset SmallSynthetic(int64_t count) {
  SyntheticDataOptions o;
  o.count = count;
  o.channels = 3;
  o.height = 8;
  o.width = 8;
  return MakeSyntheticDataset(o);
}

TEST(BatchLoaderTest, SameBatchesAsDirectComputation) {
  const ImageDataset ds = SmallSynthetic(103);
  const SamplerOptions sampling = Sampling(103, 10, 1, 2);  // 52 per rank, 6 batches per epoch
  BatchLoaderOptions lo;
  lo.end_epoch = 3;
  lo.augment.random_crop = true;
  lo.augment.horizontal_flip = true;
  lo.augment.seed = 11;
  DistributedSampler direct(sampling);
  BatchLoader loader(ds, DistributedSampler(sampling), lo);
  Batch b;
  int64_t served = 0;
  while (loader.Next(&b)) {
    const SamplerState at = direct.State();
    Batch want = PrepareBatch(ds, direct.NextBatch(), lo.augment, at.epoch, at.position);
    ASSERT_EQ(b.epoch, at.epoch);
    ASSERT_EQ(b.index, at.position);
    ASSERT_EQ(b.samples, want.samples);
    ASSERT_EQ(b.images.dims, want.images.dims);
    ASSERT_EQ(b.images.bytes, want.images.bytes) << "batch " << served;
    ASSERT_EQ(b.labels.bytes, want.labels.bytes);
    EXPECT_EQ(b.next, direct.State());
    EXPECT_EQ(b.real_count, direct.RealSamplesInBatch(at.position));
    ++served;
  }
  EXPECT_EQ(served, 3 * 6);
  EXPECT_FALSE(loader.Next(&b)) << "stays finished";

  // Without augmentation the images are the data set's own normalised images.
  DistributedSampler plain(Sampling(103, 10));
  BatchLoader plain_loader(ds, plain, BatchLoaderOptions{});
  ASSERT_TRUE(plain_loader.Next(&b));
  const std::vector<int64_t> first = plain.BatchOf(plain.EpochOrder(0), 0);
  EXPECT_EQ(b.images.bytes, ds.Images(first).bytes);
  EXPECT_EQ(b.labels.bytes, ds.Labels(first).bytes);
}

TEST(BatchLoaderTest, ResumesFromSamplerState) {
  const ImageDataset ds = SmallSynthetic(40);
  DistributedSampler s(Sampling(40, 8));
  BatchLoaderOptions lo;
  lo.end_epoch = 2;
  std::vector<Batch> all;
  {
    BatchLoader loader(ds, s, lo);
    Batch b;
    while (loader.Next(&b)) all.push_back(b);
  }
  ASSERT_EQ(all.size(), 10u);
  s.Restore(all[6].next);  // as a checkpoint after batch 6 would
  BatchLoader resumed(ds, s, lo);
  Batch b;
  for (size_t i = 7; i < all.size(); ++i) {
    ASSERT_TRUE(resumed.Next(&b));
    EXPECT_EQ(b.images.bytes, all[i].images.bytes);
    EXPECT_EQ(b.epoch, all[i].epoch);
    EXPECT_EQ(b.index, all[i].index);
  }
  EXPECT_FALSE(resumed.Next(&b));
}

TEST(BatchLoaderTest, StopsCleanlyMidEpoch) {
  const ImageDataset ds = SmallSynthetic(5000);
  BatchLoaderOptions lo;
  lo.end_epoch = 1000;  // far more than will be read
  lo.queue_depth = 3;
  const auto start = std::chrono::steady_clock::now();
  for (int round = 0; round < 20; ++round) {
    BatchLoader loader(ds, DistributedSampler(Sampling(5000, 16)), lo);
    Batch b;
    for (int i = 0; i < round % 4; ++i) ASSERT_TRUE(loader.Next(&b));
  }  // each destructor joins a thread that is blocked on a full queue (or still working)
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

TEST(BatchLoaderTest, LoaderErrorsReachTheConsumer) {
  const ImageDataset ds = SmallSynthetic(20);
  BatchLoaderOptions lo;
  lo.augment.random_crop = true;
  lo.augment.crop_padding = -1;  // rejected when the first batch is made, on the loader thread
  BatchLoader loader(ds, DistributedSampler(Sampling(20, 4)), lo);
  Batch b;
  const std::string e = ErrorOf([&] { loader.Next(&b); });
  EXPECT_TRUE(Contains(e, "crop padding -1")) << e;
  BatchLoaderOptions no_room;
  no_room.queue_depth = 0;
  EXPECT_FALSE(ErrorOf([&] { BatchLoader(ds, DistributedSampler(Sampling(20, 4)), no_room); }).empty());
}

// ---------------------------------------------------------------------------------------
// Data set / model fit

ValueInfo Input(const std::string& name, std::vector<Dim> dims, DType dtype = DType::kFloat32) {
  ValueInfo v;
  v.name = name;
  v.dtype = dtype;
  v.has_shape = true;
  v.dims = std::move(dims);
  return v;
}

TEST(ModelInputCheckTest, NamesBothShapes) {
  const ValueInfo cifar_input = Input("input", {{-1, "batch"}, {3, ""}, {32, ""}, {32, ""}});
  EXPECT_EQ(ErrorOf([&] { CheckImagesFitInput(cifar_input, "fashion-mnist", 1, 28, 28); }),
            "data set fashion-mnist has images 1x28x28 but the model's input 'input' expects [batch, 3, 32, 32]");
  EXPECT_EQ(ErrorOf([&] { CheckImagesFitInput(cifar_input, "cifar10", 3, 32, 32); }), "");
  // Fixed batch dimension and symbolic image dimensions are fine.
  EXPECT_EQ(ErrorOf([&] {
              CheckImagesFitInput(Input("x", {{64, ""}, {1, ""}, {-1, "h"}, {-1, "w"}}), "mnist", 1, 28, 28);
            }),
            "");
  const std::string flat = ErrorOf([&] { CheckImagesFitInput(Input("x", {{-1, "N"}, {784, ""}}), "mnist", 1, 28, 28); });
  EXPECT_TRUE(Contains(flat, "expects [N, 784]")) << flat;
  const std::string dtype = ErrorOf(
      [&] { CheckImagesFitInput(Input("ids", {{-1, "N"}, {1, ""}, {28, ""}, {28, ""}}, DType::kInt64), "m", 1, 28, 28); });
  EXPECT_TRUE(Contains(dtype, "'ids' expects int64")) << dtype;
  ValueInfo unknown;
  unknown.name = "x";
  EXPECT_EQ(ErrorOf([&] { CheckImagesFitInput(unknown, "mnist", 1, 28, 28); }), "");

  EXPECT_EQ(ImageShapeOfInput(cifar_input), (std::vector<int64_t>{3, 32, 32}));
  EXPECT_TRUE(Contains(ErrorOf([] { ImageShapeOfInput(Input("x", {{-1, "N"}, {1, ""}, {-1, "h"}, {28, ""}})); }),
                       "[N, 1, h, 28]"));

  const ValueInfo logits = Input("logits", {{-1, "batch"}, {5, ""}});
  EXPECT_EQ(ErrorOf([&] { CheckClassesFitOutput(logits, "cifar10", 10); }),
            "data set cifar10 has 10 classes but the model's output 'logits' scores only 5 ([batch, 5])");
  EXPECT_EQ(ErrorOf([&] { CheckClassesFitOutput(logits, "synthetic", 5); }), "");
}


// Random erasing against torchvision's RandomErasing (scale 0.02-0.33, ratio 0.3-3.3,
// value 0): on 28x28 images torchvision erases a mean fraction 0.1746 of the image (20000
// draws of torchvision 0.14 RandomErasing(p=1) on ones(1, 28, 28): mean 0.17462, standard
// deviation 0.0890, never nothing); each box obeys the scale and ratio ranges up to
// rounding; p is the share of images erased; the rest of the batch is untouched.
TEST(AugmentTest, RandomErasingAsTorchvision) {
  const int64_t n = 8000, c = 2, h = 28, w = 28;
  AugmentOptions o;
  o.random_erase = 0.5f;
  o.seed = 11;
  HostTensor batch(DType::kFloat32, {n, c, h, w});
  for (int64_t i = 0; i < batch.NumElements(); ++i) batch.Data<float>()[i] = 1.f + static_cast<float>(i % 7);
  const HostTensor before = batch;
  EraseBatch(batch, o, 1, 4);
  const std::vector<EraseBox> boxes = DrawEraseBoxes(o, n, h, w, 1, 4);
  int64_t erased = 0;
  double fraction_sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    const EraseBox& b = boxes[i];
    if (b.h == 0) continue;
    ++erased;
    const double area = static_cast<double>(h * w);
    fraction_sum += static_cast<double>(b.h * b.w) / area;
    ASSERT_LT(b.h, h);
    ASSERT_LT(b.w, w);
    ASSERT_GE(b.top, 0);
    ASSERT_LE(b.top + b.h, h);
    ASSERT_LE(b.left + b.w, w);
    // h = round(sqrt(a * r)), w = round(sqrt(a / r)): a within the scale range up to rounding.
    EXPECT_LE((b.h - 0.5) * (b.w - 0.5), 0.33 * area) << "image " << i;
    EXPECT_GE((b.h + 0.5) * (b.w + 0.5), 0.02 * area) << "image " << i;
    EXPECT_LE((b.h - 0.5) / (b.w + 0.5), 3.3) << "image " << i;
    EXPECT_GE((b.h + 0.5) / (b.w - 0.5), 0.3) << "image " << i;
  }
  EXPECT_NEAR(static_cast<double>(erased) / n, 0.5, 0.025);
  EXPECT_NEAR(fraction_sum / static_cast<double>(erased), 0.1746, 0.006);
  // The boxes are 0 in every channel, everything else as it was.
  for (int64_t i = 0; i < n; ++i)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t y = 0; y < h; ++y)
        for (int64_t x = 0; x < w; ++x) {
          const EraseBox& b = boxes[i];
          const bool in = y >= b.top && y < b.top + b.h && x >= b.left && x < b.left + b.w;
          const int64_t k = ((i * c + ch) * h + y) * w + x;
          ASSERT_EQ(batch.Data<float>()[k], in ? 0.f : before.Data<float>()[k]) << "image " << i;
        }
  // Seeded by (seed, epoch, batch index): the same again, another batch differs; off by default.
  HostTensor again = before;
  EraseBatch(again, o, 1, 4);
  EXPECT_EQ(again.bytes, batch.bytes);
  HostTensor other = before;
  EraseBatch(other, o, 1, 5);
  EXPECT_NE(other.bytes, batch.bytes);
  HostTensor untouched = before;
  EraseBatch(untouched, AugmentOptions{}, 1, 4);
  EXPECT_EQ(untouched.bytes, before.bytes);
}

// Mixup/CutMix draws: lambda ~ Beta(alpha, alpha) (mean 1/2, variance 1 / (4 (2 alpha + 1))),
// one of the two kinds with probability 1/2 when both are on, a CutMix lambda is the share
// of the image outside its box, and the draws are fixed by (seed, epoch, batch).
TEST(MixTest, BetaLambdasAndBoxes) {
  for (double alpha : {0.2, 1.0, 4.0}) {
    MixOptions o;
    o.mixup_alpha = alpha;
    o.seed = 9;
    const int n = 20000;
    double sum = 0, sq = 0;
    for (int i = 0; i < n; ++i) {
      const MixDraw d = DrawMix(o, 28, 28, 0, i);
      ASSERT_FALSE(d.cutmix);
      ASSERT_GE(d.lambda, 0.0);
      ASSERT_LE(d.lambda, 1.0);
      sum += d.lambda;
      sq += d.lambda * d.lambda;
    }
    const double mean = sum / n, var = sq / n - mean * mean, want = 1.0 / (4.0 * (2.0 * alpha + 1.0));
    EXPECT_NEAR(mean, 0.5, 4 * std::sqrt(want / n)) << "alpha " << alpha;
    EXPECT_NEAR(var, want, 0.05 * want) << "alpha " << alpha;
  }
  MixOptions both;
  both.mixup_alpha = 0.2;
  both.cutmix_alpha = 1.0;
  int cut = 0;
  for (int i = 0; i < 4000; ++i) {
    const MixDraw d = DrawMix(both, 20, 30, 3, i);
    if (!d.cutmix) continue;
    ++cut;
    ASSERT_TRUE(0 <= d.y1 && d.y1 <= d.y2 && d.y2 <= 20 && 0 <= d.x1 && d.x1 <= d.x2 && d.x2 <= 30);
    ASSERT_DOUBLE_EQ(d.lambda, 1.0 - static_cast<double>((d.y2 - d.y1) * (d.x2 - d.x1)) / 600.0);
  }
  EXPECT_NEAR(cut / 4000.0, 0.5, 0.03);
  const MixDraw a = DrawMix(both, 20, 30, 3, 7), b = DrawMix(both, 20, 30, 3, 7), c = DrawMix(both, 20, 30, 3, 8);
  EXPECT_EQ(a.lambda, b.lambda);
  EXPECT_NE(a.lambda, c.lambda);
}

}  // namespace
}  // namespace ot
