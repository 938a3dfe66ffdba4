// Shared setup of the fuzz targets: a scratch folder holding one small external-data file
// ("data.bin", 64 bytes), so that inputs naming external data reach the offset and length
// checks instead of stopping at "file is missing".
#pragma once

#include <string>

namespace ot {
namespace fuzz {

// Creates the folder on first use and returns its path.
const std::string& ExternalDataDir();

}  // namespace fuzz
}  // namespace ot
