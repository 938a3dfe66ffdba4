// Image transforms with torchvision's meaning on PIL images (the path torchvision's
// ImageFolder takes): Resize(N) of the shorter side with PIL's antialiased bilinear filter
// (the same fixed-point arithmetic, so results match PIL to the level), CenterCrop(N) with
// Python's rounding and zero padding, RandomResizedCrop(N, scale=(0.08, 1), ratio=(3/4, 4/3)),
// RandomHorizontalFlip, channel conversion as PIL's convert('RGB') / convert('L'), ToTensor
// and Normalize. An ImagePipeline strings them together for one model input size.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "train/loader/augment.h"
#include "train/readers/image_decode.h"

namespace ot {

// PIL's Image.resize(..., BILINEAR) to out_h x out_w (antialiased when shrinking).
DecodedImage ResizeBilinear(const DecodedImage& in, int64_t out_h, int64_t out_w);
// torchvision's Resize(n): the shorter side becomes n, the longer int(n * long / short).
DecodedImage ResizeShorter(const DecodedImage& in, int64_t n);
// PIL's crop: rows top..top+h, columns left..left+w; zeros where that leaves the image.
DecodedImage Crop(const DecodedImage& in, int64_t top, int64_t left, int64_t h, int64_t w);
// torchvision's CenterCrop(size): corner at round((H - h) / 2), Python rounding.
DecodedImage CenterCrop(const DecodedImage& in, int64_t h, int64_t w);
void FlipHorizontal(DecodedImage& img);
// PIL's convert to `channels` (1: 'L', 3: 'RGB'): alpha dropped, grey copied to RGB, RGB to
// grey as L = (19595 R + 38470 G + 7471 B + 2^15) >> 16.
DecodedImage ConvertChannels(const DecodedImage& in, int64_t channels);

struct CropBox {
  int64_t top = 0, left = 0, height = 0, width = 0;
};
// torchvision's RandomResizedCrop.get_params with uniform draws from `rng`.
CropBox RandomResizedCropBox(int64_t height, int64_t width, std::mt19937_64& rng, double scale_lo = 0.08,
                             double scale_hi = 1.0, double ratio_lo = 3.0 / 4.0, double ratio_hi = 4.0 / 3.0);

// The transform flags of the command line.
struct TransformOptions {
  int64_t resize = 0;               // --resize N (0: off)
  int64_t center_crop = 0;          // --center-crop N
  int64_t random_resized_crop = 0;  // --random-resized-crop N (training batches; evaluation resizes
                                    // the shorter side to N and crops the centre N x N)
  bool hflip = false;               // --hflip: training batches flipped with probability 1/2
  std::vector<float> mean, stddev;  // --mean/--std on the [0, 1] scale (empty: the data set's)
  bool AnyGeometry() const { return resize > 0 || center_crop > 0 || random_resized_crop > 0; }
  bool Any() const { return AnyGeometry() || hflip || !mean.empty() || !stddev.empty(); }
};

// From a decoded image of any size and channel count to the model's C x H x W float input.
class ImagePipeline {
 public:
  // mean/stddev: per channel of the output, or one value for all; empty options.mean takes
  // `default_mean` (same for stddev). Throws ot::Error for counts that do not fit.
  ImagePipeline(const TransformOptions& options, int64_t channels, int64_t height, int64_t width,
                std::vector<float> default_mean, std::vector<float> default_stddev);

  // Writes the channels x height x width floats of `img` to out. `augment` (training; null
  // for evaluation) adds the random choices, drawn from `rng`: random resized crop, flips,
  // and AugmentOptions' padded random crop. `name` appears in errors.
  void Apply(const DecodedImage& img, const AugmentOptions* augment, std::mt19937_64* rng, float* out,
             const std::string& name) const;
  // The uint8 image before ToTensor/Normalize (tests, previews).
  DecodedImage Geometry(const DecodedImage& img, const AugmentOptions* augment, std::mt19937_64* rng,
                        const std::string& name) const;

  // "resize 28x28 -> 64x64, 1 -> 3 channels" for an input of the given size, or "" when the
  // pipeline changes nothing but normalisation.
  std::string Describe(int64_t in_channels, int64_t in_height, int64_t in_width) const;
  int64_t channels() const { return channels_; }
  int64_t height() const { return height_; }
  int64_t width() const { return width_; }
  const std::vector<float>& mean() const { return mean_; }
  const std::vector<float>& stddev() const { return stddev_; }

 private:
  TransformOptions options_;
  int64_t channels_, height_, width_;
  std::vector<float> mean_, stddev_;
};

// "0.5,0.5,0.5" -> floats; throws naming the flag.
std::vector<float> ParseFloatList(const std::string& text, const std::string& flag);

}  // namespace ot
