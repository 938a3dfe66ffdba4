// data_pipeline_tool: the data layer on its own, for image_data_test.py and
// benchmarks/data_pipeline.py.
//
//   data_pipeline_tool dump  --data SPEC --input CxHxW [--split train|test] [--count N]
//                            [--train-batch EPOCH,INDEX --seed S] [transform flags] --o X.npy
//       writes the float32 batch the model would get for samples 0..N-1 (evaluation
//       transforms, or a training batch's augmentation) and their labels as X.npy.labels.npy
//   data_pipeline_tool bench --data SPEC --input CxHxW [--batch B] [--epochs E] [--train]
//                            [--data-workers N] [transform flags]
//       decodes and transforms every sample E times in batches of B; prints "images N seconds S
//       images_per_second R"
//
// Transform flags: --resize N --center-crop N --random-resized-crop N --hflip --mean a,b,c
// --std a,b,c --data-workers N --val-fraction F --skip-bad-images.
#include <chrono>
#include <cstdio>
#include <iostream>

#include "graph/error.h"
#include "graph/file_util.h"
#include "tools/args.h"
#include "tools/cli_util.h"
#include "train/data/image_dataset.h"
#include "train/readers/npy_reader.h"

namespace ot {
namespace {

ValueInfo ParseInput(const std::string& text) {
  ValueInfo v;
  v.name = "input";
  v.dtype = DType::kFloat32;
  v.has_shape = true;
  v.dims.emplace_back();
  v.dims.back().param = "batch";
  size_t start = 0;
  for (;;) {
    const size_t x = text.find('x', start);
    Dim d;
    d.value = std::stoll(text.substr(start, x - start));
    v.dims.push_back(d);
    if (x == std::string::npos) break;
    start = x + 1;
  }
  OT_CHECK(v.dims.size() == 4, "--input CxHxW, got '%s'", text.c_str());
  return v;
}

int Main(const std::vector<std::string>& argv) {
  OT_CHECK(!argv.empty() && (argv[0] == "dump" || argv[0] == "bench"), "usage: data_pipeline_tool dump|bench ...");
  Args args(std::vector<std::string>(argv.begin() + 1, argv.end()),
            {"data", "input", "split", "count", "train-batch", "seed", "o", "batch", "epochs", "resize", "center-crop",
             "random-resized-crop", "mean", "std", "data-workers", "val-fraction"},
            {"hflip", "train", "skip-bad-images"});
  const ValueInfo input = ParseInput(args.Get("input"));
  DataSourceOptions o;
  o.model_input = &input;
  o.transforms.resize = args.GetInt("resize", 0);
  o.transforms.center_crop = args.GetInt("center-crop", 0);
  o.transforms.random_resized_crop = args.GetInt("random-resized-crop", 0);
  o.transforms.hflip = args.Has("hflip");
  if (args.Has("mean")) o.transforms.mean = ParseFloatList(args.Get("mean"), "--mean");
  if (args.Has("std")) o.transforms.stddev = ParseFloatList(args.Get("std"), "--std");
  o.data_workers = static_cast<int>(args.GetInt("data-workers", 1));
  o.val_fraction = args.GetDouble("val-fraction", 0.1);
  o.skip_bad_images = args.Has("skip-bad-images");
  o.seed = static_cast<uint64_t>(args.GetInt("seed", 0));
  const auto t0 = std::chrono::steady_clock::now();
  ImageDataset ds = LoadImageDataset(args.Get("data"), args.Get("split", "train"), o);
  for (const std::string& note : ds.notes) std::cerr << note << "\n";
  AugmentOptions augment;
  augment.seed = o.seed;
  if (argv[0] == "dump") {
    const int64_t n = std::min(ds.count, args.GetInt("count", ds.count));
    std::vector<int64_t> idx;
    for (int64_t i = 0; i < n; ++i) idx.push_back(i);
    HostTensor x;
    if (args.Has("train-batch")) {
      const std::vector<std::string> eb = SplitList(args.Get("train-batch"));
      OT_CHECK(eb.size() == 2 && ds.source, "--train-batch EPOCH,INDEX needs a data set made on demand");
      x = ds.source->Inputs(idx, &augment, std::stoll(eb[0]), std::stoll(eb[1]));
    } else {
      x = ds.Images(idx);
    }
    HostTensor y = ds.Labels(idx);
    const std::string out = args.Get("o");
    WriteFileAtomic(out, EncodeNpy(x.dtype, x.dims, x.bytes.data()));
    WriteFileAtomic(out + ".labels.npy", EncodeNpy(y.dtype, y.dims, y.bytes.data()));
    std::cout << "wrote " << n << " samples to " << out << "\n";
    return 0;
  }
  OT_CHECK(ds.source, "bench needs a data set made on demand (imagefolder, or images adapted to --input)");
  const int64_t batch = args.GetInt("batch", 64), epochs = args.GetInt("epochs", 1);
  const bool train = args.Has("train");
  const auto t1 = std::chrono::steady_clock::now();
  int64_t images = 0;
  for (int64_t e = 0; e < epochs; ++e) {
    for (int64_t start = 0, b = 0; start < ds.count; start += batch, ++b) {
      std::vector<int64_t> idx;
      for (int64_t i = start; i < std::min(ds.count, start + batch); ++i) idx.push_back(i);
      HostTensor x = ds.source->Inputs(idx, train ? &augment : nullptr, e, b);
      images += static_cast<int64_t>(idx.size());
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  const double scan = std::chrono::duration<double>(t1 - t0).count();
  std::printf("images %lld seconds %.4f images_per_second %.1f scan_seconds %.3f\n", (long long)images, secs,
              static_cast<double>(images) / secs, scan);
  return 0;
}

}  // namespace
}  // namespace ot

int main(int argc, char** argv) {
  try {
    return ot::Main(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "data_pipeline_tool: error: %s\n", e.what());
    return 1;
  }
}
