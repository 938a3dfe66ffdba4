// Image classification data sets held in memory as bytes (N x C x H x W) plus labels,
// with the per-channel normalisation that the recipes use.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <string>
#include <vector>

#include "graph/host_tensor.h"
#include "graph/ir.h"
#include "train/loader/augment.h"
#include "train/loader/transforms.h"

namespace ot {

// Samples made on demand: image folders (decoded per batch), NumPy arrays (memory-mapped),
// in-memory images adapted to the model's input. A data set with a source takes its
// batches from it; its labels stay in ImageDataset::labels.
class SampleSource {
 public:
  virtual ~SampleSource() = default;
  // The shape of one sample ({3, 64, 64}, {12}) and the element type of a batch.
  virtual std::vector<int64_t> SampleDims() const = 0;
  virtual DType InputType() const = 0;
  // The batch [n, SampleDims...] of data set samples `indices`. Training batches pass
  // `augment` (null for evaluation): random choices come from (augment->seed, epoch,
  // batch_index, place in the batch) only, so batches are the same on every run and resume.
  virtual HostTensor Inputs(const std::vector<int64_t>& indices, const AugmentOptions* augment, int64_t epoch,
                            int64_t batch_index) const = 0;
  // Sources whose labels are made with the samples (token windows: the next tokens) say so
  // and make them: int64 [n, ...] for samples `indices` of `epoch` (as Inputs of that epoch).
  virtual bool MakesLabels() const { return false; }
  virtual HostTensor Labels(const std::vector<int64_t>& indices, int64_t epoch) const;
};

struct ImageDataset {
  std::string name;      // "fashion-mnist", "mnist", "cifar10", "synthetic"
  int64_t count = 0;
  int64_t channels = 0, height = 0, width = 0;
  int64_t classes = 0;
  std::vector<uint8_t> pixels;   // count*C*H*W
  std::vector<int64_t> labels;   // count x (product of label_dims); empty when the source makes them
  // The shape of one sample's labels: empty for one class index, {T} for a sequence of T
  // token targets (labels [N, T] against scores [N, T, V]; -100 is ignored).
  std::vector<int64_t> label_dims;
  // Float targets (regression, multi-label: --loss mse/l1/smooth-l1/bce-with-logits):
  // count x (product of label_dims) values; `labels` is then empty and Labels() is float32.
  std::vector<float> float_labels;
  // Further model inputs than the first, by name (an npz array per input), batched with it.
  std::vector<std::pair<std::string, std::shared_ptr<const SampleSource>>> extra_inputs;
  std::vector<float> mean, stddev;  // per channel, on the [0,1] scale
  // Set for data sets whose samples are made on demand (see SampleSource); `pixels` is then
  // empty and channels/height/width are the model-sized samples (0 for non-image arrays).
  std::shared_ptr<const SampleSource> source;
  std::vector<std::string> class_names;  // image folders: the sorted class folder names
  std::vector<std::string> notes;        // what loading did (adaptation, skipped files), for the user

  int64_t ImageBytes() const { return channels * height * width; }
  // "1x28x28"
  std::string ImageShapeString() const;

  // Normalised float batch [n, C, H, W] of samples indices[0..n).
  HostTensor Images(const std::vector<int64_t>& indices) const;
  // The bytes of samples indices[0..n) as a uint8 batch [n, C, H, W] (for augmentation).
  HostTensor RawImages(const std::vector<int64_t>& indices) const;
  // Float batch of a uint8 batch [n, C, H, W]: x / 255, then (x - mean[c]) / stddev[c].
  HostTensor Normalize(const HostTensor& raw) const;
  // Images(indices) and Normalize(raw) into `out`, reusing its allocation (the loader's
  // recycled batches); ImagesInto gathers and normalises in one pass over the samples' bytes.
  // The values are those of Images and Normalize. `threads` > 1 shares the samples among
  // that many OpenMP threads (the calling thread's team: the loader's on-caller mode).
  void ImagesInto(const std::vector<int64_t>& indices, HostTensor* out, int threads = 1) const;
  void NormalizeInto(const HostTensor& raw, HostTensor* out) const;
  // Asks the memory system for the bytes of samples indices[0..n) (no effect on data sets
  // that make their samples on demand): issued before a step, the rows of the next batch
  // arrive while it runs, and ImagesInto then finds them in the cache.
  void PrefetchImages(const int64_t* indices, int64_t n) const;
  // int64 labels [n, label_dims...] (those of epoch 0 where the source makes them), float32
  // for float targets.
  HostTensor Labels(const std::vector<int64_t>& indices) const;
  // The extra inputs' batches of samples indices[0..n), by input name.
  std::map<std::string, HostTensor> ExtraInputs(const std::vector<int64_t>& indices) const;

 private:
  void NormalizeSample(const uint8_t* src, float* out) const;  // one sample's C*H*W values
};

// Synthetic images whose labels can be learnt from the pixels, for benchmarks, smoke
// training and models whose data is not at hand. Each class has its own pattern (a
// per-channel brightness offset, spread evenly over the classes, plus a sine grating of
// the class's orientation and period); an image is its class's pattern, the grating
// shifted by a random phase of up to a sixth of a period, plus uniform noise. The seed
// fixes the patterns; sample_stream picks another draw of labels, phases and noise over
// the same patterns (the test split). The same options give the same bytes on every
// platform.
struct SyntheticDataOptions {
  int64_t count = 1024;
  int64_t channels = 3, height = 32, width = 32;
  int64_t classes = 10;
  uint64_t seed = 0;
  uint64_t sample_stream = 0;
  // A model input that is not an image: the shape of one sample ({12} token ids, {7, 6}
  // a sequence of features, {1, 400} a signal) and its element type; empty: images of
  // channels x height x width.
  std::vector<int64_t> sample_dims;
  DType input_type = DType::kFloat32;
  int64_t vocabulary = 0;  // integer inputs: token ids in [0, vocabulary) (the embedding's rows)
  // A language model (ids [N, T] in, scores [N, T, V] out): samples are windows of a seeded
  // Markov chain over the vocabulary (each token followed by one of 4 successors, with
  // probabilities 0.7, 0.1, 0.1, 0.1: an entropy floor of 0.940 nats a token), labels the
  // next tokens [N, T].
  bool next_tokens = false;
  // A segmentation net (image in, scores [N, K, H, W] out, K = dense_classes > 1): images of a
  // noisy background (class 0) with two rectangles of random classes in [1, K), each filled
  // with its class's colour (a per-channel offset) plus noise; labels the masks [N, H, W].
  int64_t dense_classes = 0;
  // The model's further inputs (input_ids + attention_mask, ...), made alongside: a mask
  // (a name holding "mask") all ones, token ids uniform below `vocabulary`, floats standard
  // normal; none carries the class (the first input does).
  struct ExtraInput {
    std::string name;
    std::vector<int64_t> sample_dims;
    DType dtype = DType::kFloat32;
    int64_t vocabulary = 0;
    bool ones = false;
  };
  std::vector<ExtraInput> extra_inputs;
};
// Images with learnable class patterns, or (sample_dims set) samples made on demand: float
// features of a per-class pattern plus noise, or token ids of which about half are drawn
// from a few tokens of the sample's class and the rest at random.
ImageDataset MakeSyntheticDataset(const SyntheticDataOptions& options);

// What a data spec alone does not fix. For `synthetic` the trainer sets the image shape and
// the classes from the model, so that the data fits any model.
struct DataSourceOptions {
  SyntheticDataOptions synthetic;
  // The model's data input: when set, images of another size or channel count (and any
  // transform flag) go through an ImagePipeline to its C x H x W, and NumPy arrays are
  // converted to its element type.
  const ValueInfo* model_input = nullptr;
  int64_t model_classes = 0;  // the model's class count when static (labels are checked against it)
  TransformOptions transforms;
  int data_workers = 1;            // decode/transform threads per batch
  double val_fraction = 0.1;       // held-out share when the data has no test split
  uint64_t seed = 0;               // of the held-out share
  std::vector<std::string> npz_keys;  // x, y[, x_test, y_test] names in an .npz
  // Every data input of the model (model_input first): an npz holding arrays named after
  // them feeds each its own (input_map: input name -> array name, --input-map).
  std::vector<const ValueInfo*> model_inputs;
  std::map<std::string, std::string> input_map;
  // The loss takes float targets (mse, l1, smooth-l1, bce-with-logits): y becomes float32
  // labels of its per-sample shape.
  bool float_targets = false;
  bool skip_bad_images = false;    // image folders: leave out undecodable files (listed in notes)
  // tokens:TRAIN.bin[,VAL.bin] (token_dataset.h): --seq-len (0: the model's input length
  // when static), --token-dtype, and the embedding's rows when the model shows them.
  int64_t token_seq_len = 0;
  DType token_dtype = DType::kUInt16;
  int64_t token_vocabulary = 0;
  std::string token_vocabulary_source;  // for errors: "the embedding 'wte.weight'"
};

// Parses a data spec and loads a split ("train" or "test"). Specs:
//   fashion-mnist, fashion-mnist:DIR, mnist:DIR   IDX files (gzip or plain)
//   cifar10:DIR                                    CIFAR-10 binary version: data_batch_1..5.bin,
//                                                  test_batch.bin
//   synthetic, synthetic:N, synthetic:N:CxHxW      N images with learnable class patterns
//                                                  (default from options; the test split
//                                                  has other samples of the same patterns)
//   imagefolder:DIR                                torchvision ImageFolder tree (image_folder.h)
//   npy:X.npy,Y.npy[,XTEST.npy,YTEST.npy]          NumPy arrays (npy_dataset.h)
//   npz:FILE.npz                                   arrays x, y[, x_test, y_test] (or --npz-keys)
//   tokens:TRAIN.bin[,VAL.bin]                     flat token files (token_dataset.h)
//   segmentation:DIR                               image/mask pairs (segmentation_folder.h)
// With options.model_input set, images are adapted to the model (AdaptToModel, image_source.h).
// Throws ot::Error naming the missing or malformed file.
ImageDataset LoadImageDataset(const std::string& spec, const std::string& split,
                              const DataSourceOptions& options = {});

// Where Debian's dataset-fashion-mnist puts its files.
constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

}  // namespace ot
