// NumPy data sets: array checks against the model's input, conversion, labels.
#include "train/data/npy_dataset.h"

#include <algorithm>
#include <cstring>

#include "graph/error.h"
#include "train/data/image_folder.h"
#include "train/data/image_source.h"
#include "train/loader/model_input_check.h"
#include "train/readers/npy_reader.h"

namespace ot {

namespace {

template <typename T>
int64_t IntAt(const uint8_t* p, int64_t i) {
  T v;
  std::memcpy(&v, p + static_cast<size_t>(i) * sizeof(T), sizeof(T));
  return static_cast<int64_t>(v);
}

// Element i of an integer array as int64; false for non-integer dtypes.
bool IntegerAt(const NpyArray& a, int64_t i, int64_t* out) {
  const uint8_t* p = a.data();
  switch (a.dtype()) {
    case DType::kInt64: *out = IntAt<int64_t>(p, i); return true;
    case DType::kInt32: *out = IntAt<int32_t>(p, i); return true;
    case DType::kInt16: *out = IntAt<int16_t>(p, i); return true;
    case DType::kInt8: *out = IntAt<int8_t>(p, i); return true;
    case DType::kUInt8: *out = IntAt<uint8_t>(p, i); return true;
    case DType::kUInt16: *out = IntAt<uint16_t>(p, i); return true;
    case DType::kUInt32: *out = IntAt<uint32_t>(p, i); return true;
    case DType::kUInt64: *out = IntAt<int64_t>(p, i); return *out >= 0;
    default: return false;
  }
}

bool IsIntegerType(DType t) {
  switch (t) {
    case DType::kInt64: case DType::kInt32: case DType::kInt16: case DType::kInt8:
    case DType::kUInt8: case DType::kUInt16: case DType::kUInt32: case DType::kUInt64: return true;
    default: return false;
  }
}

// Element i of a numeric array as float; false for other dtypes.
bool FloatAt(const NpyArray& a, int64_t i, float* out) {
  if (a.dtype() == DType::kFloat32) {
    std::memcpy(out, a.data() + static_cast<size_t>(i) * 4, 4);
    return true;
  }
  if (a.dtype() == DType::kFloat64) {
    double v;
    std::memcpy(&v, a.data() + static_cast<size_t>(i) * 8, 8);
    *out = static_cast<float>(v);
    return true;
  }
  int64_t v = 0;
  if (!IntegerAt(a, i, &v)) return false;
  *out = static_cast<float>(v);
  return true;
}

std::string Join(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

class NumpySource : public SampleSource {
 public:
  NumpySource(NpyArray x, std::vector<int64_t> rows, DType out, std::vector<float> mean, std::vector<float> stddev)
      : x_(std::move(x)), rows_(std::move(rows)), out_(out), mean_(std::move(mean)), stddev_(std::move(stddev)) {
    dims_.assign(x_.shape().begin() + 1, x_.shape().end());
    row_ = 1;
    for (int64_t d : dims_) row_ *= d;
  }
  std::vector<int64_t> SampleDims() const override { return dims_; }
  DType InputType() const override { return out_; }
  HostTensor Inputs(const std::vector<int64_t>& indices, const AugmentOptions*, int64_t, int64_t) const override {
    std::vector<int64_t> dims = dims_;
    dims.insert(dims.begin(), static_cast<int64_t>(indices.size()));
    HostTensor t(out_, dims, "input");
    const size_t in_size = DTypeSize(x_.dtype());
    for (size_t i = 0; i < indices.size(); ++i) {
      OT_CHECK(indices[i] >= 0 && indices[i] < static_cast<int64_t>(rows_.size()),
               "sample index %lld is outside the data set (%zu samples)", (long long)indices[i], rows_.size());
      const int64_t r = rows_[static_cast<size_t>(indices[i])];
      const uint8_t* src = x_.data() + static_cast<size_t>(r * row_) * in_size;
      if (out_ == x_.dtype()) {
        std::memcpy(t.bytes.data() + i * static_cast<size_t>(row_) * in_size, src, static_cast<size_t>(row_) * in_size);
      } else if (out_ == DType::kFloat32) {
        float* d = t.Data<float>() + i * static_cast<size_t>(row_);
        ConvertToFloat(src, d, r * row_);
      } else if (out_ == DType::kBool) {
        for (int64_t k = 0; k < row_; ++k) {
          int64_t v = 0;
          IntegerAt(x_, r * row_ + k, &v);
          t.bytes[i * static_cast<size_t>(row_) + static_cast<size_t>(k)] = v != 0 ? 1 : 0;
        }
      } else {
        for (int64_t k = 0; k < row_; ++k) {
          int64_t v = 0;
          IntegerAt(x_, r * row_ + k, &v);
          if (out_ == DType::kInt64) t.Data<int64_t>()[i * static_cast<size_t>(row_) + static_cast<size_t>(k)] = v;
          else t.Data<int32_t>()[i * static_cast<size_t>(row_) + static_cast<size_t>(k)] = static_cast<int32_t>(v);
        }
      }
    }
    return t;
  }

 private:
  void ConvertToFloat(const uint8_t* src, float* d, int64_t first) const {
    if (x_.dtype() != DType::kUInt8 && x_.dtype() != DType::kFloat64) {  // integers (masks) as they are
      for (int64_t k = 0; k < row_; ++k) {
        int64_t v = 0;
        IntegerAt(x_, first + k, &v);
        d[k] = static_cast<float>(v);
      }
      return;
    }
    if (x_.dtype() == DType::kFloat64) {
      for (int64_t k = 0; k < row_; ++k) {
        double v;
        std::memcpy(&v, src + k * 8, 8);
        d[k] = static_cast<float>(v);
      }
      return;
    }
    // uint8 images: ToTensor's x / 255, then Normalize over the first sample dimension
    // (channels) when --mean/--std are given.
    const int64_t channels = dims_.size() >= 3 ? dims_[0] : 1, plane = row_ / std::max<int64_t>(channels, 1);
    for (int64_t c = 0; c < channels; ++c) {
      const float m = mean_.empty() ? 0.f : mean_[static_cast<size_t>(c) % mean_.size()];
      const float s = stddev_.empty() ? 1.f : stddev_[static_cast<size_t>(c) % stddev_.size()];
      for (int64_t p = 0; p < plane; ++p) d[c * plane + p] = (src[c * plane + p] / 255.f - m) / s;
    }
  }

  NpyArray x_;
  std::vector<int64_t> rows_;
  DType out_;
  std::vector<float> mean_, stddev_;
  std::vector<int64_t> dims_;
  int64_t row_ = 1;
};

// Another source seen through a row map: sample i of the data set is row rows[i].
class RowMappedSource : public SampleSource {
 public:
  RowMappedSource(std::shared_ptr<SampleSource> inner, std::vector<int64_t> rows)
      : inner_(std::move(inner)), rows_(std::move(rows)) {}
  std::vector<int64_t> SampleDims() const override { return inner_->SampleDims(); }
  DType InputType() const override { return inner_->InputType(); }
  HostTensor Inputs(const std::vector<int64_t>& indices, const AugmentOptions* augment, int64_t epoch,
                    int64_t batch_index) const override {
    std::vector<int64_t> mapped;
    for (int64_t i : indices) mapped.push_back(rows_.at(static_cast<size_t>(i)));
    return inner_->Inputs(mapped, augment, epoch, batch_index);
  }

 private:
  std::shared_ptr<SampleSource> inner_;
  std::vector<int64_t> rows_;
};

std::string ShapeOf(const std::vector<int64_t>& s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + (s.size() == 1 ? ",)" : ")");
}

// The element type the model's input gets from x, or an error naming both.
DType InputTypeFor(const NpyArray& x, const ValueInfo& input) {
  const DType want = input.dtype == DType::kUndefined ? DType::kFloat32 : input.dtype;
  const DType have = x.dtype();
  const std::string msg = "'" + x.source() + "' holds " + DTypeName(have) + " values but the model's input '" +
                          input.name + "' takes " + DTypeName(want);
  if (want == DType::kFloat32) {
    OT_CHECK(have == DType::kFloat32 || have == DType::kFloat64 || have == DType::kUInt8,
             "%s; save x as float32 (images, features) or uint8 (images, scaled to [0, 1])", msg.c_str());
    return want;
  }
  if (want == DType::kBool) {
    OT_CHECK(IsIntegerType(have) || have == DType::kBool, "%s; save it as bool or integers (0 or 1)", msg.c_str());
    return want;
  }
  if (want == DType::kInt64 || want == DType::kInt32) {
    OT_CHECK(IsIntegerType(have), "%s; token ids must be an integer array (numpy int64)", msg.c_str());
    return want;
  }
  throw Error(msg + "; NumPy data feeds float32, int64 or int32 model inputs");
}

}  // namespace

ImageDataset LoadNumpyDataset(const std::string& kind, const std::string& rest, const std::string& split,
                              const DataSourceOptions& options) {
  OT_CHECK(options.model_input, "--data %s:%s needs the model's input", kind.c_str(), rest.c_str());
  const ValueInfo& input = *options.model_input;
  std::vector<std::string> parts;
  for (size_t start = 0;;) {
    const size_t comma = rest.find(',', start);
    parts.push_back(rest.substr(start, comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  NpyArray x, y;
  std::vector<std::pair<const ValueInfo*, std::string>> input_keys;  // npz arrays by input name
  bool have_test = false;
  std::string what;
  if (kind == "npy") {
    OT_CHECK((parts.size() == 2 || parts.size() == 4) && !parts[0].empty() && !parts[1].empty(),
             "--data npy needs X.npy,Y.npy (and optionally XTEST.npy,YTEST.npy), got 'npy:%s'", rest.c_str());
    have_test = parts.size() == 4;
    const bool use_test = have_test && split == "test";
    x = NpyArray::Open(parts[use_test ? 2 : 0]);
    y = NpyArray::Open(parts[use_test ? 3 : 1]);
    what = "npy:" + rest;
  } else {
    OT_CHECK(parts.size() == 1 && !parts[0].empty(), "--data npz needs one FILE.npz, got 'npz:%s'", rest.c_str());
    const std::string& file = parts[0];
    std::vector<std::string> keys = options.npz_keys;
    const std::vector<std::string> have = NpyArray::NpzKeys(file);
    auto has = [&](const std::string& k) { return std::count(have.begin(), have.end(), k) > 0; };
    const std::string label_key = has("y") || !has("labels") ? "y" : "labels";
    std::vector<const ValueInfo*> inputs = options.model_inputs;
    if (inputs.empty()) inputs = {&input};
    for (const auto& [name, key] : options.input_map)
      OT_CHECK(std::any_of(inputs.begin(), inputs.end(), [&](const ValueInfo* v) { return v->name == name; }),
               "--input-map %s=%s names no input of the model; its inputs are: %s", name.c_str(), key.c_str(),
               Join([&] {
                 std::vector<std::string> n;
                 for (const ValueInfo* v : inputs) n.push_back(v->name);
                 return n;
               }()).c_str());
    const bool by_name = keys.empty() && (inputs.size() > 1 || !options.input_map.empty() ||
                                          (!has("x") && has(inputs[0]->name)));
    if (by_name) {
      // Arrays named after the model's inputs (or as --input-map renames them), and y or labels.
      for (const ValueInfo* in : inputs) {
        auto it = options.input_map.find(in->name);
        const std::string key = it != options.input_map.end() ? it->second : in->name;
        OT_CHECK(has(key), "the model's input '%s' has no array '%s' in %s, whose arrays are: %s (name an array "
                 "after each input, or map one with --input-map %s=ARRAY)",
                 in->name.c_str(), key.c_str(), file.c_str(), Join(have).c_str(), in->name.c_str());
        input_keys.emplace_back(in, key);
      }
      OT_CHECK(has(label_key), "%s has no labels array 'y' (or 'labels'); its arrays are: %s", file.c_str(),
               Join(have).c_str());
      keys = {input_keys[0].second, label_key};
      // A test split: every array again with "_test" after its name (x_test, y_test's rule).
      bool test_arrays = has(label_key + "_test");
      for (const auto& [in, key] : input_keys) test_arrays = test_arrays && has(key + "_test");
      if (test_arrays) {
        keys.push_back(input_keys[0].second + "_test");
        keys.push_back(label_key + "_test");
      }
    } else if (keys.empty()) {
      keys = {"x", label_key};
      if (std::count(have.begin(), have.end(), "x_test") && std::count(have.begin(), have.end(), "y_test")) {
        keys.push_back("x_test");
        keys.push_back("y_test");
      }
    }
    OT_CHECK(keys.size() == 2 || keys.size() == 4, "--npz-keys takes X,Y or X,Y,XTEST,YTEST");
    have_test = keys.size() == 4;
    const bool use_test = have_test && split == "test";
    x = NpyArray::OpenNpz(file, keys[use_test ? 2 : 0]);
    y = NpyArray::OpenNpz(file, keys[use_test ? 3 : 1]);
    what = "npz:" + file;
  }
  // Shapes: x [N, ...] against the model's input, y [N]; or, for a language model, token ids
  // x [N, T] with the next tokens y [N, T] (per-token labels, -100 ignored).
  OT_CHECK(!x.shape().empty() && x.shape()[0] > 0, "'%s' should be [N, ...] with N > 0 samples, it is %s",
           x.source().c_str(), ShapeOf(x.shape()).c_str());
  const bool float_targets = options.float_targets;
  const bool per_token = !float_targets && y.shape().size() == 2 && x.shape().size() == 2 && y.shape() == x.shape() &&
                         IsIntegerType(x.dtype());
  OT_CHECK(float_targets || per_token || (y.shape().size() == 1 && y.shape()[0] == x.shape()[0]),
           "'%s' should hold one label per sample of '%s' (shape (%lld,)), or for token ids one per token (the same "
           "shape), it is %s",
           y.source().c_str(), x.source().c_str(), (long long)x.shape()[0], ShapeOf(y.shape()).c_str());
  const DType out = InputTypeFor(x, input);
  // uint8 images ([N, H, W], [N, C, H, W] or [N, H, W, C]) of another size or channel count
  // than the model's image input go through the image pipeline, as image files do.
  const bool image_input = IsImageInput(input);
  std::shared_ptr<SampleSource> adapted;
  std::string adapted_note;
  if (x.dtype() == DType::kUInt8 && out == DType::kFloat32 && image_input &&
      (x.shape().size() == 3 || x.shape().size() == 4)) {
    const std::vector<int64_t>& s = x.shape();
    const std::vector<int64_t> chw = ImageShapeOfInput(input);
    int64_t c = 1, h = s[1], w = s.size() == 3 ? s[2] : 0;
    bool nhwc = false;
    if (s.size() == 4) {
      // Channels first (PyTorch's layout) or last (NumPy/PIL's): the one with at most 4
      // channels; when both could be, the one matching the model, else channels first.
      const bool first = s[1] <= 4, last = s[3] <= 4;
      OT_CHECK(first || last, "'%s' is %s: not images as [N, C, H, W] or [N, H, W, C] with 1 to 4 channels",
               x.source().c_str(), ShapeOf(s).c_str());
      nhwc = last && (!first || (s[3] == chw[0] && s[1] != chw[0]));
      if (nhwc) c = s[3], h = s[1], w = s[2];
      else c = s[1], h = s[2], w = s[3];
    }
    if (c != chw[0] || h != chw[1] || w != chw[2] || nhwc || options.transforms.AnyGeometry()) {
      ImagePipeline pipeline(options.transforms, chw[0], chw[1], chw[2], {}, {});
      adapted_note = pipeline.Describe(c, h, w);
      auto load = [x, c, h, w, nhwc](int64_t r) {
        DecodedImage img;
        img.height = h;
        img.width = w;
        img.channels = c;
        img.pixels.resize(static_cast<size_t>(c * h * w));
        const uint8_t* src = x.data() + r * c * h * w;
        if (nhwc) std::copy_n(src, c * h * w, img.pixels.data());
        else
          for (int64_t ch = 0; ch < c; ++ch)
            for (int64_t p = 0; p < h * w; ++p) img.pixels[static_cast<size_t>(p * c + ch)] = src[ch * h * w + p];
        return img;
      };
      const std::string source = x.source();
      adapted = std::make_shared<ImageSource>(load, [source](int64_t r) { return source + " row " + std::to_string(r); },
                                              std::move(pipeline), std::max(1, options.data_workers));
    }
  }
  if (input.has_shape && !adapted) {
    bool fits = input.dims.size() == x.shape().size();
    for (size_t i = 1; fits && i < input.dims.size(); ++i)
      fits = !input.dims[i].IsStatic() || input.dims[i].value == x.shape()[i];
    OT_CHECK(fits, "'%s' is %s but the model's input '%s' is %s; each sample must have the input's shape after the "
             "batch dimension",
             x.source().c_str(), ShapeOf(x.shape()).c_str(), input.name.c_str(), input.ShapeString().c_str());
  }
  OT_CHECK(!float_targets || (!y.shape().empty() && y.shape()[0] == x.shape()[0]),
           "'%s' should hold the targets of each sample of '%s' (shape (%lld, ...)), it is %s", y.source().c_str(),
           x.source().c_str(), (long long)x.shape()[0], ShapeOf(y.shape()).c_str());
  const int64_t n = x.shape()[0];
  int64_t per = per_token ? y.shape()[1] : 1;
  std::vector<int64_t> target_dims;  // float targets: one sample's shape
  if (float_targets) {
    target_dims.assign(y.shape().begin() + 1, y.shape().end());
    for (int64_t d : target_dims) per *= d;
  }
  std::vector<int64_t> labels(float_targets ? 0 : static_cast<size_t>(n * per));
  std::vector<float> targets(float_targets ? static_cast<size_t>(n * per) : 0);
  for (int64_t i = 0; float_targets && i < n * per; ++i)
    OT_CHECK(FloatAt(y, i, &targets[static_cast<size_t>(i)]), "'%s' holds %s values; targets must be numbers (numpy "
             "float32)", y.source().c_str(), DTypeName(y.dtype()).c_str());
  int64_t max_label = 0;
  for (int64_t i = 0; !float_targets && i < n * per; ++i) {
    int64_t v = 0;
    OT_CHECK(IntegerAt(y, i, &v), "'%s' holds %s labels; labels must be integers (numpy int64)", y.source().c_str(),
             DTypeName(y.dtype()).c_str());
    OT_CHECK((per_token && v == -100) || (v >= 0 && (options.model_classes <= 0 || v < options.model_classes)),
             "'%s': label %lld at index %lld is outside [0, %lld)%s", y.source().c_str(), (long long)v, (long long)i,
             (long long)(options.model_classes > 0 ? options.model_classes : v + 1),
             per_token ? " (-100 marks a token to leave out)" : "");
    labels[static_cast<size_t>(i)] = v;
    max_label = std::max(max_label, v);
  }
  std::vector<int64_t> rows;
  if (have_test) {
    for (int64_t i = 0; i < n; ++i) rows.push_back(i);
  } else {
    auto split_rows = HoldOut(n, options.val_fraction, options.seed, what);
    rows = split == "train" ? split_rows.first : split_rows.second;
  }
  ImageDataset ds;
  ds.name = what;
  ds.count = static_cast<int64_t>(rows.size());
  ds.classes = float_targets ? 0 : options.model_classes > 0 ? options.model_classes : max_label + 1;
  if (per_token) ds.label_dims = {per};
  if (float_targets) ds.label_dims = target_dims;
  for (int64_t r : rows) {
    if (float_targets)
      ds.float_labels.insert(ds.float_labels.end(), targets.begin() + r * per, targets.begin() + (r + 1) * per);
    else
      ds.labels.insert(ds.labels.end(), labels.begin() + r * per, labels.begin() + (r + 1) * per);
  }
  // The model's further inputs: their npz arrays, the same rows.
  for (size_t k = 1; k < input_keys.size(); ++k) {
    const ValueInfo& in = *input_keys[k].first;
    NpyArray a = NpyArray::OpenNpz(parts[0], input_keys[k].second + (have_test && split == "test" ? "_test" : ""));
    OT_CHECK(!a.shape().empty() && a.shape()[0] == n, "'%s' should hold %lld samples as '%s' does, it is %s",
             a.source().c_str(), (long long)n, x.source().c_str(), ShapeOf(a.shape()).c_str());
    if (in.has_shape) {
      bool fits = in.dims.size() == a.shape().size();
      for (size_t i = 1; fits && i < in.dims.size(); ++i)
        fits = !in.dims[i].IsStatic() || in.dims[i].value == a.shape()[i];
      OT_CHECK(fits, "'%s' is %s but the model's input '%s' is %s", a.source().c_str(), ShapeOf(a.shape()).c_str(),
               in.name.c_str(), in.ShapeString().c_str());
    }
    const DType t = InputTypeFor(a, in);
    ds.extra_inputs.emplace_back(in.name, std::make_shared<NumpySource>(a, rows, t, std::vector<float>{},
                                                                          std::vector<float>{}));
  }
  if (x.shape().size() == 4) {
    ds.channels = x.shape()[1];
    ds.height = x.shape()[2];
    ds.width = x.shape()[3];
  }
  if (split == "train")
    ds.notes.push_back(StrFormat("%s: %lld samples of %s %s%s", what.c_str(), (long long)ds.count,
                                 DTypeName(x.dtype()).c_str(), ShapeOf(std::vector<int64_t>(x.shape().begin() + 1,
                                                                                       x.shape().end())).c_str(),
                                 adapted ? (" fed to the model's " + input.ShapeString() +
                                            (adapted_note.empty() ? "" : " input (" + adapted_note + ")")).c_str()
                                 : out != x.dtype() ? (" converted to " + DTypeName(out)).c_str() : ""));
  if (adapted) {
    // The source reads array rows; the data set's indices go through `rows` first.
    const std::vector<int64_t> dims = ImageShapeOfInput(input);
    ds.channels = dims[0];
    ds.height = dims[1];
    ds.width = dims[2];
    ds.source = std::make_shared<RowMappedSource>(adapted, rows);
    return ds;
  }
  ds.source = std::make_shared<NumpySource>(x, rows, out, options.transforms.mean, options.transforms.stddev);
  return ds;
}

}  // namespace ot
