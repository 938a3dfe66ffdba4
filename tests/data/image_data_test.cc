// Tests of the real-data layer that need no Python: the .npy header reader and the .npy /
// .npz data sets (arrays written here byte by byte, or by EncodeNpy whose bytes are checked
// against the format), transforms on small hand-made images (values worked out here from
// torchvision's definitions), the worker pool, image folder scanning and its errors, the
// held-out split. Decoding and resampling against PIL/torchvision are in
// image_data_test.py.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "graph/error.h"
#include "train/loader/batch_loader.h"
#include "train/readers/image_decode.h"
#include "train/data/image_folder.h"
#include "train/data/image_source.h"
#include "train/readers/npy_reader.h"
#include "train/loader/transforms.h"
#include "train/loader/worker_pool.h"

namespace ot {
namespace {

std::string TempDir(const std::string& name) {
  const std::string dir = "image_data_test_tmp/" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(f.good()) << path;
}

template <typename Fn> std::string ErrorOf(Fn fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

bool Contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// A v1 .npy file with the given header dictionary text and data bytes.
std::string NpyWithHeader(const std::string& dict, const std::string& data) {
  std::string header = dict;
  while ((10 + header.size() + 1) % 64) header += ' ';
  header += '\n';
  std::string out("\x93NUMPY\x01\x00", 8);
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  return out + header + data;
}

ValueInfo Input(DType type, std::vector<int64_t> dims) {
  ValueInfo v;
  v.name = "input";
  v.dtype = type;
  v.has_shape = true;
  Dim batch;
  batch.param = "batch";
  v.dims.push_back(batch);
  for (int64_t d : dims) {
    Dim s;
    s.value = d;
    v.dims.push_back(s);
  }
  return v;
}

DecodedImage Ramp(int64_t h, int64_t w, int64_t c) {
  DecodedImage img;
  img.height = h;
  img.width = w;
  img.channels = c;
  for (int64_t i = 0; i < h * w * c; ++i) img.pixels.push_back(static_cast<uint8_t>((i * 37 + 11) % 256));
  return img;
}

// --- .npy reader ---

TEST(NpyReader, ParsesHeadersNumpyWrites) {
  const float values[6] = {1, 2, 3, 4, 5, 6};
  const std::string bytes =
      NpyWithHeader("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
                    std::string(reinterpret_cast<const char*>(values), sizeof(values)));
  NpyArray a = NpyArray::FromBytes(bytes, "a.npy");
  EXPECT_EQ(a.dtype(), DType::kFloat32);
  EXPECT_EQ(a.shape(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(a.header().data_offset % 64, 0u);
  EXPECT_EQ(reinterpret_cast<const float*>(a.data())[5], 6.f);
  // One-dimensional shapes, "L" suffixes of old numpy, double quotes, no trailing comma.
  const std::string b =
      NpyWithHeader("{\"shape\": (3L,), \"fortran_order\": False, \"descr\": \"<i8\"}", std::string(24, '\0'));
  NpyHeader h = ParseNpyHeader(reinterpret_cast<const uint8_t*>(b.data()), b.size(), "b.npy");
  EXPECT_EQ(h.shape, (std::vector<int64_t>{3}));
  EXPECT_EQ(h.dtype, DType::kInt64);
  // Scalars and uint8 with '|'.
  EXPECT_EQ(NpyArray::FromBytes(NpyWithHeader("{'descr': '|u1', 'fortran_order': False, 'shape': (), }", "x"), "c")
                .header()
                .NumElements(),
            1);
  // EncodeNpy writes what the parser (and numpy, in image_data_test.py) reads.
  const int64_t tokens[4] = {7, 8, 9, 10};
  NpyArray e = NpyArray::FromBytes(EncodeNpy(DType::kInt64, {2, 2}, tokens), "e");
  EXPECT_EQ(e.shape(), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(reinterpret_cast<const int64_t*>(e.data())[3], 10);
}

TEST(NpyReader, RefusesWhatItCannotRead) {
  auto err = [](const std::string& dict, const std::string& data = std::string(64, '\0')) {
    return ErrorOf([&] { NpyArray::FromBytes(NpyWithHeader(dict, data), "bad.npy"); });
  };
  EXPECT_TRUE(Contains(err("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }"), "big-endian"));
  EXPECT_TRUE(Contains(err("{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }"), "Fortran order"));
  EXPECT_TRUE(Contains(err("{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }"), "unsupported .npy dtype"));
  EXPECT_TRUE(Contains(err("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }"), "quoted string"));
  EXPECT_TRUE(Contains(err("{'descr': '<f4', 'shape': (2,), }"), "lacks 'fortran_order'"));
  EXPECT_TRUE(Contains(err("{'descr': '<f4', 'fortran_order': False, 'shape': (100,), }"), "truncated"));
  EXPECT_TRUE(Contains(err("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}"), "unknown key"));
  EXPECT_TRUE(Contains(err("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999, 99999999999), }"),
                       "too large"));
  EXPECT_TRUE(Contains(ErrorOf([] { NpyArray::FromBytes("PK\x03\x04 not npy", "zip.npy"); }), "\\x93NUMPY"));
  std::string truncated = NpyWithHeader("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", "");
  truncated.resize(20);
  EXPECT_TRUE(Contains(ErrorOf([&] { NpyArray::FromBytes(truncated, "t.npy"); }), "t.npy"));
  EXPECT_TRUE(Contains(ErrorOf([] { NpyArray::Open("image_data_test_tmp/missing.npy"); }), "missing.npy"));
}

// --- NumPy data sets ---

TEST(NumpyDataset, TokensLabelsAndErrors) {
  const std::string dir = TempDir("npy");
  std::vector<int64_t> x, y;
  for (int64_t i = 0; i < 20; ++i) {
    for (int64_t k = 0; k < 3; ++k) x.push_back(i * 3 + k);
    y.push_back(i % 4);
  }
  WriteBytes(dir + "/x.npy", EncodeNpy(DType::kInt64, {20, 3}, x.data()));
  WriteBytes(dir + "/y.npy", EncodeNpy(DType::kInt64, {20}, y.data()));
  const ValueInfo tokens = Input(DType::kInt64, {3});
  DataSourceOptions o;
  o.model_input = &tokens;
  o.model_classes = 4;
  o.val_fraction = 0.25;
  const std::string spec = "npy:" + dir + "/x.npy," + dir + "/y.npy";
  ImageDataset train = LoadImageDataset(spec, "train", o), test = LoadImageDataset(spec, "test", o);
  EXPECT_EQ(train.count, 15);
  EXPECT_EQ(test.count, 5);
  EXPECT_EQ(train.classes, 4);
  // Rows and labels stay together; the two splits partition the rows.
  std::set<int64_t> seen;
  for (const ImageDataset* ds : {&train, &test}) {
    for (int64_t i = 0; i < ds->count; ++i) {
      HostTensor row = ds->Images({i});
      ASSERT_EQ(row.dtype, DType::kInt64);
      ASSERT_EQ(row.dims, (std::vector<int64_t>{1, 3}));
      const int64_t first = row.Data<int64_t>()[0];
      EXPECT_EQ(first % 3, 0);
      EXPECT_EQ(ds->labels[static_cast<size_t>(i)], (first / 3) % 4);
      seen.insert(first / 3);
    }
  }
  EXPECT_EQ(seen.size(), 20u);
  // A float model cannot take token ids; a wrong row shape and out-of-range labels are named.
  const ValueInfo floats = Input(DType::kFloat32, {3});
  DataSourceOptions of = o;
  of.model_input = &floats;
  EXPECT_TRUE(Contains(ErrorOf([&] { LoadImageDataset(spec, "train", of); }), "x.npy' holds int64 values"));
  const ValueInfo wide = Input(DType::kInt64, {4});
  DataSourceOptions ow = o;
  ow.model_input = &wide;
  EXPECT_TRUE(Contains(ErrorOf([&] { LoadImageDataset(spec, "train", ow); }), "(20, 3)"));
  DataSourceOptions oc = o;
  oc.model_classes = 3;
  EXPECT_TRUE(Contains(ErrorOf([&] { LoadImageDataset(spec, "train", oc); }), "label 3 at index 3"));
  std::vector<float> fy(20, 1.f);
  WriteBytes(dir + "/fy.npy", EncodeNpy(DType::kFloat32, {20}, fy.data()));
  EXPECT_TRUE(Contains(ErrorOf([&] { LoadImageDataset("npy:" + dir + "/x.npy," + dir + "/fy.npy", "train", o); }),
                       "labels must be integers"));
  WriteBytes(dir + "/y19.npy", EncodeNpy(DType::kInt64, {19}, y.data()));
  EXPECT_TRUE(Contains(ErrorOf([&] { LoadImageDataset("npy:" + dir + "/x.npy," + dir + "/y19.npy", "train", o); }),
                       "one label per sample"));
  // uint8 images become x / 255 for a float model.
  std::vector<uint8_t> img(2 * 1 * 2 * 2);
  for (size_t i = 0; i < img.size(); ++i) img[i] = static_cast<uint8_t>(i * 30);
  WriteBytes(dir + "/img.npy", EncodeNpy(DType::kUInt8, {2, 1, 2, 2}, img.data()));
  WriteBytes(dir + "/imgy.npy", EncodeNpy(DType::kInt64, {2}, y.data()));
  const ValueInfo image = Input(DType::kFloat32, {1, 2, 2});
  DataSourceOptions oi;
  oi.model_input = &image;
  ImageDataset imgs = LoadImageDataset("npy:" + dir + "/img.npy," + dir + "/imgy.npy," + dir + "/img.npy," + dir +
                                           "/imgy.npy",
                                       "train", oi);
  HostTensor t = imgs.Images({1});
  EXPECT_FLOAT_EQ(t.Data<float>()[3], 210.f / 255.f);
}

// --- transforms ---

TEST(Transforms, ResizeKeepsConstantsAndMatchesHandValues) {
  DecodedImage flat;
  flat.height = 7;
  flat.width = 5;
  flat.channels = 3;
  flat.pixels.assign(7 * 5 * 3, 200);
  for (auto [h, w] : std::vector<std::pair<int64_t, int64_t>>{{3, 2}, {16, 9}, {7, 11}, {1, 1}}) {
    DecodedImage r = ResizeBilinear(flat, h, w);
    ASSERT_EQ(r.height, h);
    ASSERT_EQ(r.width, w);
    for (uint8_t p : r.pixels) ASSERT_EQ(p, 200);
  }
  // Doubling a 1x2 row [0, 255]: PIL's taps at centres 0.25 and 0.75 of each input pixel give
  // 0, 64, 191, 255 (weights 1; 0.75/0.25; 0.25/0.75; 1 after clamping at the edges).
  DecodedImage row;
  row.height = 1;
  row.width = 2;
  row.channels = 1;
  row.pixels = {0, 255};
  EXPECT_EQ(ResizeBilinear(row, 1, 4).pixels, (std::vector<uint8_t>{0, 64, 191, 255}));
  // Halving widens the triangle to 2 input pixels (antialiasing): output 0 has centre 1.0 and
  // taps at 0, 1, 2 of weight 0.75, 0.75, 0.25 (normalised by 1.75): (75 + 50) / 1.75 = 71.4;
  // output 1, centre 3.0, taps 1, 2, 3 of weight 0.25, 0.75, 0.75: (25 + 150 + 30) / 1.75 =
  // 117.1. PIL gives [71, 117].
  row.width = 4;
  row.pixels = {0, 100, 200, 40};
  EXPECT_EQ(ResizeBilinear(row, 1, 2).pixels, (std::vector<uint8_t>{71, 117}));
}

TEST(Transforms, ShorterSideCropsAndChannels) {
  const DecodedImage img = Ramp(30, 45, 3);
  const DecodedImage r = ResizeShorter(img, 20);
  EXPECT_EQ(r.height, 20);
  EXPECT_EQ(r.width, 30);  // int(20 * 45 / 30)
  EXPECT_EQ(ResizeShorter(Ramp(45, 31, 1), 10).height, 14);  // int(10 * 45 / 31) = 14
  // CenterCrop: the corner is round((30 - 7) / 2) = round(11.5) = 12 (halves to even) and
  // round((45 - 8) / 2) = round(18.5) = 18.
  const DecodedImage c = CenterCrop(img, 7, 8);
  ASSERT_EQ(c.height, 7);
  EXPECT_EQ(c.Row(0)[0], img.Row(12)[18 * 3]);
  // Larger than the image: zero padding around it.
  const DecodedImage p = CenterCrop(Ramp(2, 2, 1), 4, 4);
  EXPECT_EQ(p.pixels[0], 0);
  EXPECT_EQ(p.Row(1)[1], Ramp(2, 2, 1).pixels[0]);
  DecodedImage f = Ramp(2, 3, 2);
  FlipHorizontal(f);
  EXPECT_EQ(f.Row(1)[0], Ramp(2, 3, 2).Row(1)[4]);
  // PIL's L: (19595 R + 38470 G + 7471 B + 2^15) >> 16; pure red is 76.
  DecodedImage rgba;
  rgba.height = rgba.width = 1;
  rgba.channels = 4;
  rgba.pixels = {255, 0, 0, 9};
  EXPECT_EQ(ConvertChannels(rgba, 1).pixels, (std::vector<uint8_t>{76}));
  EXPECT_EQ(ConvertChannels(rgba, 3).pixels, (std::vector<uint8_t>{255, 0, 0}));
  DecodedImage grey;
  grey.height = grey.width = 1;
  grey.channels = 1;
  grey.pixels = {17};
  EXPECT_EQ(ConvertChannels(grey, 3).pixels, (std::vector<uint8_t>{17, 17, 17}));
}

TEST(Transforms, RandomResizedCropStaysInItsRanges) {
  std::mt19937_64 rng(5);
  double min_scale = 1, max_scale = 0;
  for (int i = 0; i < 2000; ++i) {
    const CropBox b = RandomResizedCropBox(64, 80, rng);
    ASSERT_GE(b.top, 0);
    ASSERT_GE(b.left, 0);
    ASSERT_LE(b.top + b.height, 64);
    ASSERT_LE(b.left + b.width, 80);
    const double scale = static_cast<double>(b.height * b.width) / (64.0 * 80.0);
    const double ratio = static_cast<double>(b.width) / static_cast<double>(b.height);
    // Rounding of h and w moves scale and ratio a little past the nominal bounds.
    ASSERT_GT(ratio, 0.75 * 0.8);
    ASSERT_LT(ratio, 4.0 / 3.0 * 1.25);
    min_scale = std::min(min_scale, scale);
    max_scale = std::max(max_scale, scale);
  }
  EXPECT_LT(min_scale, 0.12);
  EXPECT_GT(max_scale, 0.8);
  // A very long image takes the fallback: the central crop of ratio 4/3.
  std::mt19937_64 r2(1);
  const CropBox b = RandomResizedCropBox(4, 400, r2);
  EXPECT_EQ(b.height, 4);
  EXPECT_LE(b.width, 6);
}

TEST(Transforms, PipelineSizesAndAugmentationAreDeterministic) {
  TransformOptions t;
  ImagePipeline fit(t, 3, 16, 16, {0.5f}, {0.25f});
  std::vector<float> out(3 * 16 * 16);
  fit.Apply(Ramp(28, 28, 1), nullptr, nullptr, out.data(), "x");
  // Grey copied to the three channels.
  for (int p = 0; p < 256; ++p) {
    ASSERT_EQ(out[p], out[256 + p]);
    ASSERT_EQ(out[p], out[512 + p]);
  }
  t.center_crop = 12;
  ImagePipeline wrong(t, 1, 16, 16, {}, {});
  EXPECT_TRUE(Contains(ErrorOf([&] { wrong.Apply(Ramp(20, 20, 1), nullptr, nullptr, out.data(), "pic.png"); }),
                       "pic.png"));
  TransformOptions rr;
  rr.random_resized_crop = 16;
  rr.hflip = true;
  ImagePipeline aug(rr, 3, 16, 16, {}, {});
  AugmentOptions a;
  std::mt19937_64 r1(9), r2(9), r3(10);
  const DecodedImage img = Ramp(40, 50, 3);
  EXPECT_EQ(aug.Geometry(img, &a, &r1, "x").pixels, aug.Geometry(img, &a, &r2, "x").pixels);
  EXPECT_NE(aug.Geometry(img, &a, &r1, "x").pixels, aug.Geometry(img, &a, &r3, "x").pixels);
  // Evaluation: resize the shorter side to 16 and crop the centre.
  EXPECT_EQ(aug.Geometry(img, nullptr, nullptr, "x").pixels, CenterCrop(ResizeShorter(img, 16), 16, 16).pixels);
  EXPECT_TRUE(Contains(ErrorOf([] { ImagePipeline(TransformOptions{}, 4, 8, 8, {}, {}); }), "4-channel"));
  TransformOptions m;
  m.mean = {0.1f, 0.2f};
  EXPECT_TRUE(Contains(ErrorOf([&] { ImagePipeline(m, 3, 8, 8, {}, {}); }), "--mean has 2 values"));
}

// --- worker pool ---

TEST(WorkerPool, RunsEveryIterationOnceAndRethrowsTheFirstError) {
  WorkerPool pool(3);
  for (int round = 0; round < 20; ++round) {
    std::vector<std::atomic<int>> hits(101);
    pool.ParallelFor(101, [&](int64_t i) { hits[static_cast<size_t>(i)]++; });
    for (auto& h : hits) ASSERT_EQ(h.load(), 1);
  }
  const std::string e = ErrorOf([&] {
    pool.ParallelFor(50, [](int64_t i) {
      if (i == 7 || i == 30) throw Error("failed at " + std::to_string(i));
    });
  });
  EXPECT_EQ(e, "failed at 7");
}

// --- image folders ---

TEST(ImageFolder, ScanOrderAndErrors) {
  const std::string dir = TempDir("folder");
  // Signatures are enough for scanning; decoding is image_data_test.py's.
  const std::string png("\x89PNG\r\n\x1a\n", 8);
  WriteBytes(dir + "/b/2.png", png);
  WriteBytes(dir + "/b/10.PNG", png);
  WriteBytes(dir + "/b/sub/0.jpg", "\xff\xd8\xff");
  WriteBytes(dir + "/a/x.jpeg", "\xff\xd8\xff");
  WriteBytes(dir + "/a/readme.txt", "ignored");
  WriteBytes(dir + "/loose.png", png);  // not in a class folder: ignored
  const ImageFolderIndex index = ScanImageFolder(dir);
  EXPECT_EQ(index.classes, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(index.files, (std::vector<std::string>{dir + "/a/x.jpeg", dir + "/b/10.PNG", dir + "/b/2.png",
                                                   dir + "/b/sub/0.jpg"}));
  EXPECT_EQ(index.labels, (std::vector<int64_t>{0, 1, 1, 1}));
  std::filesystem::create_directories(dir + "/c_empty");
  EXPECT_TRUE(Contains(ErrorOf([&] { ScanImageFolder(dir); }), "c_empty' holds no .jpg"));
  std::filesystem::remove_all(dir + "/c_empty");
  EXPECT_TRUE(Contains(ErrorOf([&] { ScanImageFolder(dir + "/nope"); }), "does not exist"));
  EXPECT_TRUE(Contains(ErrorOf([&] { ScanImageFolder(dir + "/a/../a"); }), "no class folders"));
  // A file named .png that is no image is named before training starts.
  WriteBytes(dir + "/a/fake.png", "hello");
  const ValueInfo input = Input(DType::kFloat32, {3, 8, 8});
  DataSourceOptions o;
  o.model_input = &input;
  o.val_fraction = 0.4;
  EXPECT_TRUE(Contains(ErrorOf([&] { LoadImageDataset("imagefolder:" + dir, "train", o); }), "fake.png' is not a JPEG"));
  // With --skip-bad-images it is left out and listed (the signature-only files fail to decode too).
  o.skip_bad_images = true;
  o.val_fraction = 0.2;
  const std::string e = ErrorOf([&] { LoadImageDataset("imagefolder:" + dir, "train", o); });
  EXPECT_TRUE(Contains(e, "not a JPEG") || Contains(e, "no readable images left")) << e;
}

TEST(ImageFolder, HoldOutIsSeededAndPartitions) {
  auto [a, b] = HoldOut(100, 0.1, 3, "x");
  auto [c, d] = HoldOut(100, 0.1, 3, "x");
  auto [e, f] = HoldOut(100, 0.1, 4, "x");
  EXPECT_EQ(a, c);
  EXPECT_EQ(b, d);
  EXPECT_NE(b, f);
  EXPECT_EQ(a.size(), 90u);
  std::set<int64_t> all(a.begin(), a.end());
  all.insert(b.begin(), b.end());
  EXPECT_EQ(all.size(), 100u);
  EXPECT_TRUE(Contains(ErrorOf([] { HoldOut(5, 0.01, 0, "tiny"); }), "empty split"));
  EXPECT_TRUE(Contains(ErrorOf([] { HoldOut(5, 1.5, 0, "tiny"); }), "between 0 and 1"));
}

// --- decoding errors without an encoder: truncated signatures and garbage ---

TEST(ImageDecode, RefusesGarbageNamingTheFile) {
  const std::string png("\x89PNG\r\n\x1a\n\0\0\0\rIHDR", 16);
  EXPECT_TRUE(Contains(ErrorOf([&] {
                         DecodeImage(reinterpret_cast<const uint8_t*>(png.data()), png.size(), "cut.png");
                       }),
                       "'cut.png' is not a readable PNG"));
  const std::string jpg("\xff\xd8\xff\xe0\0\x10JFIF", 10);
  EXPECT_TRUE(Contains(ErrorOf([&] {
                         DecodeImage(reinterpret_cast<const uint8_t*>(jpg.data()), jpg.size(), "cut.jpg");
                       }),
                       "'cut.jpg' is not a readable JPEG"));
  EXPECT_TRUE(Contains(ErrorOf([] { DecodeImage(nullptr, 0, "empty.png"); }), "empty"));
}

}  // namespace
}  // namespace ot
