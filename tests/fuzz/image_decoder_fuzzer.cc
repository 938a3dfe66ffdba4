// libFuzzer target for the image decoders' wrappers (ot::DecodeImage: signature detection,
// libjpeg-turbo and libpng driven through their longjmp error paths, truncation and size
// limits). Any byte string must either give an image whose pixel buffer is height x width x
// channels with 1..4 channels or be refused with ot::Error.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "graph/error.h"
#include "train/readers/image_decode.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    ot::DecodedImage img = ot::DecodeImage(data, size, "fuzz input");
    if (img.height <= 0 || img.width <= 0 || img.channels < 1 || img.channels > 4 ||
        img.pixels.size() != static_cast<size_t>(img.height * img.width * img.channels))
      std::abort();
  } catch (const ot::Error&) {
    // Refused with a message.
  }
  return 0;
}
