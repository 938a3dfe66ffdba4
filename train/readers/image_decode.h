// Decoding JPEG (libjpeg-turbo) and PNG (libpng) files into 8-bit pixels, rows of
// interleaved channels (H x W x C) as PIL holds them. Grey, grey+alpha, RGB and RGBA come
// out with 1, 2, 3 and 4 channels; palettes are expanded, 16-bit samples keep their high
// byte and no gamma is applied (PIL's behaviour). Every failure, a truncated file
// included, throws ot::Error naming the file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ot {

struct DecodedImage {
  int64_t height = 0, width = 0, channels = 0;
  std::vector<uint8_t> pixels;  // height * width * channels, interleaved
  uint8_t* Row(int64_t y) { return pixels.data() + y * width * channels; }
  const uint8_t* Row(int64_t y) const { return pixels.data() + y * width * channels; }
};

enum class ImageFormat { kUnknown, kJpeg, kPng };
// The format of the bytes by their signature.
ImageFormat DetectImageFormat(const uint8_t* data, size_t size);

// Decodes a JPEG or PNG in memory; `name` (the file) appears in every error.
DecodedImage DecodeImage(const uint8_t* data, size_t size, const std::string& name);
// A segmentation mask: a PNG of one class index per pixel, grey (the value) or palette (the
// index, not its colour, as PIL's mode 'P' reads it). Throws ot::Error naming the file for a
// JPEG (lossy) or a colour image.
DecodedImage DecodeMaskFile(const std::string& path);
// Reads and decodes a file.
DecodedImage DecodeImageFile(const std::string& path);

}  // namespace ot
