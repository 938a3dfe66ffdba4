// JPEG and PNG decoding through libjpeg(-turbo) and libpng. Both libraries report errors by
// longjmp; the decoders keep no C++ object alive across the jump and turn the library's
// message into ot::Error after it.
#include "train/readers/image_decode.h"

#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include <jpeglib.h>
#include <jerror.h>
#include <png.h>

#include "graph/error.h"
#include "graph/file_util.h"

namespace ot {

namespace {

// --- JPEG ---

struct JpegError {
  jpeg_error_mgr mgr;
  jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void JpegErrorExit(j_common_ptr cinfo) {
  JpegError* e = reinterpret_cast<JpegError*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, e->message);
  std::longjmp(e->jump, 1);
}

// Warnings are ignored (as PIL does), except the end of the data before the image is
// complete: a truncated file is an error, not an image padded with grey.
void JpegEmitMessage(j_common_ptr cinfo, int level) {
  if (level < 0 && cinfo->err->msg_code == JWRN_JPEG_EOF) JpegErrorExit(cinfo);
}

constexpr int64_t kMaxPixels = int64_t{1} << 28;  // 268 megapixels: larger is refused, not allocated

void DecodeJpeg(const uint8_t* data, size_t size, const std::string& name, DecodedImage* out) {
  jpeg_decompress_struct cinfo;
  JpegError err;
  std::memset(&cinfo, 0, sizeof(cinfo));
  cinfo.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = JpegErrorExit;
  err.mgr.emit_message = JpegEmitMessage;
  err.message[0] = 0;
  const char* problem = nullptr;
  if (setjmp(err.jump)) {
    jpeg_destroy_decompress(&cinfo);
    throw Error("'" + name + "' is not a readable JPEG: " + err.message);
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(&cinfo, TRUE);
  switch (cinfo.jpeg_color_space) {
    case JCS_GRAYSCALE: cinfo.out_color_space = JCS_GRAYSCALE; break;
    case JCS_YCbCr:
    case JCS_RGB: cinfo.out_color_space = JCS_RGB; break;
    default: problem = "it is a CMYK (or other non-RGB) JPEG; convert it to RGB"; break;
  }
  if (!problem && static_cast<int64_t>(cinfo.image_width) * cinfo.image_height > kMaxPixels)
    problem = "it has more than 2^28 pixels";
  if (problem) {
    jpeg_destroy_decompress(&cinfo);
    throw Error("cannot decode '" + name + "': " + problem);
  }
  jpeg_start_decompress(&cinfo);
  out->height = cinfo.output_height;
  out->width = cinfo.output_width;
  out->channels = cinfo.output_components;
  out->pixels.resize(static_cast<size_t>(out->height * out->width * out->channels));
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = out->Row(cinfo.output_scanline);
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
}

// --- PNG ---

struct PngReader {
  const uint8_t* data;
  size_t size;
  size_t pos;
  char message[256];
};

void PngRead(png_structp png, png_bytep dest, png_size_t length) {
  PngReader* r = static_cast<PngReader*>(png_get_io_ptr(png));
  if (length > r->size - r->pos) png_error(png, "the file ends before the image data does (truncated)");
  std::memcpy(dest, r->data + r->pos, length);
  r->pos += length;
}

void PngError(png_structp png, png_const_charp message) {
  PngReader* r = static_cast<PngReader*>(png_get_error_ptr(png));
  std::snprintf(r->message, sizeof(r->message), "%s", message);
  png_longjmp(png, 1);
}

void PngWarning(png_structp, png_const_charp) {}

// palette_indices: a palette image keeps its indices (one channel) instead of colours.
void DecodePng(const uint8_t* data, size_t size, const std::string& name, DecodedImage* out,
               bool palette_indices = false) {
  PngReader reader{data, size, 0, {0}};
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &reader, PngError, PngWarning);
  OT_CHECK(png, "cannot decode '%s': out of memory", name.c_str());
  png_infop info = png_create_info_struct(png);
  // The row pointers live on the heap, owned from before setjmp: a local changed after
  // setjmp has no defined value after the jump (the fuzzer found the leak this caused).
  const std::unique_ptr<std::vector<png_bytep>> rows(new std::vector<png_bytep>());
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, nullptr);
    throw Error("'" + name + "' is not a readable PNG: " + reader.message);
  }
  if (!info) png_error(png, "out of memory");
  png_set_read_fn(png, &reader, PngRead);
  png_set_user_limits(png, 1u << 20, 1u << 20);
  png_read_info(png, info);
  const png_uint_32 width = png_get_image_width(png, info), height = png_get_image_height(png, info);
  if (static_cast<int64_t>(width) * height > kMaxPixels) png_error(png, "it has more than 2^28 pixels");
  if (palette_indices && png_get_color_type(png, info) == PNG_COLOR_TYPE_PALETTE) {
    png_set_packing(png);  // indices below 8 bits -> a byte each
  } else {
    png_set_expand(png);  // palette -> RGB, grey below 8 bits -> 8 bits, tRNS -> alpha
  }
  png_set_strip_16(png);  // 16-bit samples -> their high byte
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  out->height = height;
  out->width = width;
  out->channels = png_get_channels(png, info);
  if (png_get_rowbytes(png, info) != static_cast<size_t>(out->width * out->channels))
    png_error(png, "unexpected row layout");
  out->pixels.resize(static_cast<size_t>(out->height * out->width * out->channels));
  rows->resize(height);
  for (png_uint_32 y = 0; y < height; ++y) (*rows)[y] = out->Row(y);
  png_read_image(png, rows->data());
  png_destroy_read_struct(&png, &info, nullptr);
}

}  // namespace

ImageFormat DetectImageFormat(const uint8_t* data, size_t size) {
  if (size >= 3 && data[0] == 0xFF && data[1] == 0xD8 && data[2] == 0xFF) return ImageFormat::kJpeg;
  static const uint8_t kPng[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  if (size >= 8 && std::memcmp(data, kPng, 8) == 0) return ImageFormat::kPng;
  return ImageFormat::kUnknown;
}

DecodedImage DecodeImage(const uint8_t* data, size_t size, const std::string& name) {
  DecodedImage out;
  switch (DetectImageFormat(data, size)) {
    case ImageFormat::kJpeg: DecodeJpeg(data, size, name, &out); break;
    case ImageFormat::kPng: DecodePng(data, size, name, &out); break;
    default:
      throw Error("'" + name + "' is not a JPEG or PNG image (" +
                  (size == 0 ? std::string("the file is empty") : "its first bytes are no image signature") + ")");
  }
  OT_CHECK(out.height > 0 && out.width > 0 && out.channels >= 1 && out.channels <= 4,
           "'%s' decodes to an empty image or %lld channels", name.c_str(), (long long)out.channels);
  return out;
}

DecodedImage DecodeMaskFile(const std::string& path) {
  const std::string bytes = ReadFileBytes(path);
  const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
  OT_CHECK(DetectImageFormat(data, bytes.size()) == ImageFormat::kPng,
           "mask '%s' is not a PNG; masks hold a class index per pixel, which only a lossless PNG (grey or palette) "
           "keeps",
           path.c_str());
  DecodedImage out;
  DecodePng(data, bytes.size(), path, &out, true);
  OT_CHECK(out.channels <= 2,
           "mask '%s' has %lld colour channels; masks hold one class index per pixel: save them as grey or palette "
           "PNGs (PIL mode 'L' or 'P')",
           path.c_str(), (long long)out.channels);
  if (out.channels == 2) {  // grey + alpha: the grey value is the class
    for (int64_t i = 0; i < out.height * out.width; ++i) out.pixels[static_cast<size_t>(i)] = out.pixels[static_cast<size_t>(2 * i)];
    out.pixels.resize(static_cast<size_t>(out.height * out.width));
    out.channels = 1;
  }
  return out;
}

DecodedImage DecodeImageFile(const std::string& path) {
  const std::string bytes = ReadFileBytes(path);
  return DecodeImage(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), path);
}

}  // namespace ot
