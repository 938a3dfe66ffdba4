// Shared setup of the fuzz targets: a scratch folder holding one small external-data file
// ("data.bin", 64 bytes), so that inputs naming external data reach the offset and length
// checks instead of stopping at "file is missing"; the path-based readers get their input
// written to a file in that folder.
#pragma once

#include <string>

namespace ot {
namespace fuzz {

// Creates the folder on first use and returns its path.
const std::string& ExternalDataDir();
// Writes bytes to ExternalDataDir()/name (replacing it) and returns the file's path.
std::string WriteScratchFile(const std::string& name, const std::string& bytes);

}  // namespace fuzz
}  // namespace ot
