// Image folder scanning, splits and the data set over its files.
#include "train/data/image_folder.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

#include "graph/error.h"
#include "train/readers/data_random.h"
#include "train/readers/image_decode.h"
#include "train/data/image_source.h"
#include "train/loader/model_input_check.h"
#include "train/loader/worker_pool.h"

namespace ot {

bool IsDir(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// Sorted entry names of a folder (no . and ..).
std::vector<std::string> ListDir(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  OT_CHECK(d, "cannot read the folder '%s'", dir.c_str());
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n != "." && n != "..") names.push_back(n);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

bool HasImageExtension(const std::string& name) {
  const size_t dot = name.rfind('.');
  if (dot == std::string::npos) return false;
  std::string ext = name.substr(dot + 1);
  for (char& ch : ext) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return ext == "jpg" || ext == "jpeg" || ext == "png";
}

namespace {

// Image files under dir, recursively, in os.walk's sorted order (files of a folder, then its
// sub-folders).
void CollectImages(const std::string& dir, std::vector<std::string>& out, int depth) {
  OT_CHECK(depth < 32, "'%s': folders nested too deeply", dir.c_str());
  std::vector<std::string> subdirs;
  for (const std::string& n : ListDir(dir)) {
    const std::string p = dir + "/" + n;
    if (IsDir(p)) subdirs.push_back(p);
    else if (HasImageExtension(n)) out.push_back(p);
  }
  for (const std::string& s : subdirs) CollectImages(s, out, depth + 1);
}

// Reads the first bytes: a file named .jpg/.png that is no image is found here, before training.
void CheckSignature(const std::string& path) {
  uint8_t head[8] = {0};
  size_t got = 0;
  if (FILE* f = std::fopen(path.c_str(), "rb")) {
    got = std::fread(head, 1, sizeof(head), f);
    std::fclose(f);
  } else {
    throw Error("cannot open the image '" + path + "'");
  }
  OT_CHECK(DetectImageFormat(head, got) != ImageFormat::kUnknown,
           "'%s' is not a JPEG or PNG image (%s); remove it or pass --skip-bad-images", path.c_str(),
           got == 0 ? "the file is empty" : "its first bytes are no image signature");
}

}  // namespace

ImageFolderIndex ScanImageFolder(const std::string& root) {
  OT_CHECK(IsDir(root), "image folder '%s' does not exist (or is not a folder)", root.c_str());
  ImageFolderIndex index;
  for (const std::string& n : ListDir(root))
    if (IsDir(root + "/" + n)) index.classes.push_back(n);
  OT_CHECK(!index.classes.empty(),
           "image folder '%s' has no class folders; lay it out as %s/<class>/<image>.jpg (or .png)", root.c_str(),
           root.c_str());
  for (size_t c = 0; c < index.classes.size(); ++c) {
    const std::string dir = root + "/" + index.classes[c];
    const size_t before = index.files.size();
    CollectImages(dir, index.files, 0);
    OT_CHECK(index.files.size() > before, "class folder '%s' holds no .jpg, .jpeg or .png files", dir.c_str());
    index.labels.resize(index.files.size(), static_cast<int64_t>(c));
  }
  return index;
}

std::pair<std::vector<int64_t>, std::vector<int64_t>> HoldOut(int64_t count, double fraction, uint64_t seed,
                                                              const std::string& what) {
  OT_CHECK(fraction > 0 && fraction < 1, "--val-fraction must lie between 0 and 1 (got %g)", fraction);
  const int64_t held = static_cast<int64_t>(std::llround(static_cast<double>(count) * fraction));
  OT_CHECK(held >= 1 && held < count,
           "%s: --val-fraction %g of %lld samples leaves an empty split; give a test split or another fraction",
           what.c_str(), fraction, (long long)count);
  std::vector<int64_t> order(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) order[static_cast<size_t>(i)] = i;
  std::mt19937_64 rng(StreamSeed(seed, 0x401du));
  ShuffleInPlace(order, rng);
  std::vector<int64_t> train(order.begin(), order.end() - held), test(order.end() - held, order.end());
  std::sort(train.begin(), train.end());
  std::sort(test.begin(), test.end());
  return {train, test};
}

ImageDataset LoadImageFolder(const std::string& dir, const std::string& split, const DataSourceOptions& options) {
  OT_CHECK(options.model_input,
           "imagefolder:%s needs the model's input shape to size its images (train and eval take it from the model)",
           dir.c_str());
  const std::vector<int64_t> chw = ImageShapeOfInput(*options.model_input);
  // The folders of the two splits; a held-out share when there is no test folder.
  std::string train_dir = dir, test_dir;
  if (IsDir(dir + "/train")) {
    train_dir = dir + "/train";
    if (IsDir(dir + "/val")) test_dir = dir + "/val";
    else if (IsDir(dir + "/test")) test_dir = dir + "/test";
  }
  const ImageFolderIndex train_index = ScanImageFolder(train_dir);
  ImageFolderIndex index;
  std::vector<int64_t> rows;
  std::string where = train_dir;
  if (split == "test" && !test_dir.empty()) {
    index = ScanImageFolder(test_dir);
    where = test_dir;
    // Labels by the training split's class list.
    std::vector<int64_t> remap;
    for (const std::string& c : index.classes) {
      auto it = std::find(train_index.classes.begin(), train_index.classes.end(), c);
      OT_CHECK(it != train_index.classes.end(), "class folder '%s/%s' has no counterpart in '%s'", test_dir.c_str(),
               c.c_str(), train_dir.c_str());
      remap.push_back(it - train_index.classes.begin());
    }
    for (int64_t& l : index.labels) l = remap[static_cast<size_t>(l)];
    index.classes = train_index.classes;
    for (int64_t i = 0; i < static_cast<int64_t>(index.files.size()); ++i) rows.push_back(i);
  } else {
    index = train_index;
    if (test_dir.empty()) {
      auto parts = HoldOut(static_cast<int64_t>(index.files.size()), options.val_fraction, options.seed, train_dir);
      rows = split == "train" ? parts.first : parts.second;
      where += StrFormat(" (%s share of --val-fraction %g)", split == "train" ? "training" : "held-out",
                         options.val_fraction);
    } else {
      for (int64_t i = 0; i < static_cast<int64_t>(index.files.size()); ++i) rows.push_back(i);
    }
  }
  {  // signatures of all files, on the worker threads (the first bad file in order is named)
    WorkerPool pool(std::max(1, options.data_workers));
    pool.ParallelFor(static_cast<int64_t>(rows.size()), [&](int64_t i) {
      if (!options.skip_bad_images) CheckSignature(index.files[static_cast<size_t>(rows[static_cast<size_t>(i)])]);
    });
  }

  ImageDataset ds;
  ds.name = "imagefolder:" + dir;
  ds.classes = static_cast<int64_t>(index.classes.size());
  ds.class_names = index.classes;
  ImagePipeline pipeline(options.transforms, chw[0], chw[1], chw[2], {}, {});
  if (options.skip_bad_images) {
    // Decode every file once; the bad ones are left out and listed.
    std::vector<std::string> errors(rows.size());
    WorkerPool pool(std::max(1, options.data_workers));
    pool.ParallelFor(static_cast<int64_t>(rows.size()), [&](int64_t i) {
      try {
        DecodeImageFile(index.files[static_cast<size_t>(rows[static_cast<size_t>(i)])]);
      } catch (const Error& e) {
        errors[static_cast<size_t>(i)] = e.what();
      }
    });
    std::vector<int64_t> kept;
    std::vector<std::string> bad;
    for (size_t i = 0; i < rows.size(); ++i) {
      if (errors[i].empty()) kept.push_back(rows[i]);
      else bad.push_back(errors[i]);
    }
    if (!bad.empty()) {
      std::string list;
      for (size_t i = 0; i < bad.size() && i < 20; ++i) list += "\n  " + bad[i];
      if (bad.size() > 20) list += StrFormat("\n  ... and %zu more", bad.size() - 20);
      ds.notes.push_back(StrFormat("%s: skipped %zu bad image(s) of %zu (--skip-bad-images):%s", where.c_str(),
                                   bad.size(), rows.size(), list.c_str()));
    }
    rows = kept;
    OT_CHECK(!rows.empty(), "%s: no readable images left", where.c_str());
  }
  ds.count = static_cast<int64_t>(rows.size());
  for (int64_t r : rows) ds.labels.push_back(index.labels[static_cast<size_t>(r)]);
  ds.channels = chw[0];
  ds.height = chw[1];
  ds.width = chw[2];
  ds.mean = pipeline.mean();
  ds.stddev = pipeline.stddev();
  {
    // What the pipeline does, told by the first image (the others may differ in size).
    std::string what;
    if (!rows.empty()) {
      try {
        const DecodedImage first = DecodeImageFile(index.files[static_cast<size_t>(rows[0])]);
        what = pipeline.Describe(first.channels, first.height, first.width);
        if (!what.empty()) what = " (first image " + std::to_string(first.channels) + "x" +
                                  std::to_string(first.height) + "x" + std::to_string(first.width) + ": " + what + ")";
      } catch (const Error&) {
        // Reported when the batch with it is made.
      }
    }
    ds.notes.push_back(StrFormat("%s: %lld images of %lld classes, fed to the model's %lldx%lldx%lld input%s",
                                 where.c_str(), (long long)rows.size(), (long long)ds.classes, (long long)chw[0],
                                 (long long)chw[1], (long long)chw[2], what.c_str()));
  }
  auto files = std::make_shared<std::vector<std::string>>();
  for (int64_t r : rows) files->push_back(index.files[static_cast<size_t>(r)]);
  auto load = [files](int64_t i) {
    const std::string& path = (*files)[static_cast<size_t>(i)];
    try {
      return DecodeImageFile(path);
    } catch (const Error& e) {
      throw Error(std::string(e.what()) + " (sample " + std::to_string(i) +
                  "; pass --skip-bad-images to leave out files that do not decode)");
    }
  };
  auto name = [files](int64_t i) { return (*files)[static_cast<size_t>(i)]; };
  ds.source = std::make_shared<ImageSource>(load, name, std::move(pipeline), options.data_workers);
  return ds;
}

}  // namespace ot
