// Whole-file reads and atomic writes (temporary file, fsync, rename, fsync of the folder),
// so that a crash never leaves a half-written model, tensor or checkpoint behind.
#pragma once

#include <string>

namespace ot {

// Reads a file; throws ot::Error naming the path and the OS reason.
std::string ReadFileBytes(const std::string& path);
// Writes bytes to path atomically; throws ot::Error naming the path on failure and leaves
// any previous file at path untouched.
void WriteFileAtomic(const std::string& path, const std::string& bytes);
// Creates a folder and its missing parents (mkdir -p); throws ot::Error naming the path.
void MakeDirectories(const std::string& path);
// Folder part of a path ("." when none).
std::string DirName(const std::string& path);

}  // namespace ot
