// Segmentation data: an image and a mask per sample, the mask a PNG of one class index per
// pixel, as torchvision's VOCSegmentation and most segmentation repositories keep them.
// `segmentation:DIR` reads, in this order of preference:
//   DIR/train/{images,masks} and DIR/val/{images,masks} (or DIR/test/...) as the two splits;
//   DIR/{images,masks}, with a seeded --val-fraction held out as the test split;
//   Pascal VOC: DIR/JPEGImages, DIR/SegmentationClass and the lists
//   DIR/ImageSets/Segmentation/{train,val}.txt (or a held-out share without them).
// The image NAME.{jpg,jpeg,png} pairs with the mask NAME.png. Images are resized (bilinear)
// to the model's H x W (or --resize N, or the first image's size where the model's is not
// fixed), converted to its channels and normalised (--mean/--std); masks are resized by
// nearest neighbour. Labels are int64 [N, H, W] (VOC marks borders 255: --ignore-index 255).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "train/data/image_dataset.h"

namespace ot {

ImageDataset LoadSegmentationFolder(const std::string& dir, const std::string& split, const DataSourceOptions& options);

// A mask of class indices resized to height x width by nearest neighbour (PIL's NEAREST:
// source pixel floor((y + 0.5) * in / out)).
std::vector<uint8_t> ResizeMaskNearest(const uint8_t* mask, int64_t in_h, int64_t in_w, int64_t out_h, int64_t out_w);

}  // namespace ot
