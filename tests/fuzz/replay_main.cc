// Replays saved inputs through a libFuzzer target without libFuzzer: linked with one
// *_fuzzer.cc into an ordinary (gcc) test program, it feeds every file of the folders and
// files named on the command line to LLVMFuzzerTestOneInput, one after another. An input
// that still crashes (an abort, an uncaught exception, a sanitizer report) ends the
// program abnormally and fails the CTest entry; one that is refused with ot::Error passes.
//
//   checkpoint_reader_replay tests/fuzz/regressions/checkpoint_reader [more files or folders]
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

bool IsDir(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// The files of a folder (sorted, not recursive), or the path itself when it is a file.
std::vector<std::string> InputsOf(const std::string& path) {
  if (!IsDir(path)) return {path};
  std::vector<std::string> files;
  if (DIR* d = ::opendir(path.c_str())) {
    while (dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name != "." && name != ".." && !IsDir(path + "/" + name)) files.push_back(path + "/" + name);
    }
    ::closedir(d);
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s FILE_OR_FOLDER...\n", argv[0]);
    return 2;
  }
  int replayed = 0;
  for (int a = 1; a < argc; ++a) {
    const std::vector<std::string> inputs = InputsOf(argv[a]);
    if (inputs.empty()) {
      std::fprintf(stderr, "%s: %s holds no inputs\n", argv[0], argv[a]);
      return 2;
    }
    for (const std::string& file : inputs) {
      std::ifstream in(file, std::ios::binary);
      if (!in) {
        std::fprintf(stderr, "%s: cannot read %s\n", argv[0], file.c_str());
        return 2;
      }
      const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      std::printf("replaying %s (%zu bytes)\n", file.c_str(), bytes.size());
      std::fflush(stdout);
      LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
      ++replayed;
    }
  }
  std::printf("%d input(s) replayed without a crash\n", replayed);
  return 0;
}
