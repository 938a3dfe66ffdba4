// Plugin loading with dlopen.
#include "runtime/core/plugin.h"

#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <vector>

#include "graph/error.h"
#include "graph/file_util.h"
#include "runtime/core/device.h"

namespace ot {

namespace {

// Set by CMake for the plugins this build makes: the folder they are built in.
#ifdef ONNXTRAIN_PLUGIN_BUILD_DIR
constexpr const char* kBuildDir = ONNXTRAIN_PLUGIN_BUILD_DIR;
#else
constexpr const char* kBuildDir = "";
#endif

bool Built(const std::string& name) {
#ifdef ONNXTRAIN_HAVE_MPI_PLUGIN
  if (name == "mpi") return true;
#endif
#ifdef ONNXTRAIN_HAVE_CUDA_PLUGINS
  return name == "cuda" || name == "nccl";
#else
  return false;
#endif
}

std::string ExecutableDir() {
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "";
  buf[n] = '\0';
  return DirName(buf);
}

constexpr const char* kNoMpi =
    "this build of onnx-train has no MPI backend (configured without MPI or with -DONNXTRAIN_MPI=OFF): install "
    "libopenmpi-dev and openmpi-bin (apt-get install libopenmpi-dev openmpi-bin) and rebuild, or use --backend gloo";

bool Exists(const std::string& path) { return access(path.c_str(), R_OK) == 0; }

}  // namespace

bool PluginBuilt(const std::string& name) { return Built(name); }

const char* NoMpiBackendMessage() { return kNoMpi; }

void LoadPlugin(const std::string& name) {
  static std::mutex mu;
  static std::map<std::string, void*> loaded;
  std::lock_guard<std::mutex> lock(mu);
  if (loaded.count(name)) return;
  OT_CHECK(name != "mpi" || Built(name), "%s", kNoMpi);
  OT_CHECK(Built(name), "this build of onnx-train has no %s support (configured without the CUDA toolkit or with "
           "-DONNXTRAIN_CUDA=OFF); use --device cpu and --backend gloo", name.c_str());
  const std::string file = "libonnxtrain_" + name + ".so";
  std::vector<std::string> dirs;
  if (const char* env = std::getenv("ONNXTRAIN_PLUGIN_DIR"); env && *env) dirs.push_back(env);
  if (*kBuildDir) dirs.push_back(kBuildDir);
  const std::string exe = ExecutableDir();
  if (!exe.empty()) {
    dirs.push_back(exe);
    dirs.push_back(exe + "/../lib");
  }
  std::string tried;
  for (const auto& dir : dirs) {
    const std::string path = dir + "/" + file;
    if (!Exists(path)) {
      tried += (tried.empty() ? "" : ", ") + path;
      continue;
    }
    // RTLD_NOW: a missing symbol or library is reported here, not mid-run.
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (!handle) {
      const char* why = dlerror();
      throw Error("cannot load the " + name + " plugin " + path + ": " + (why ? why : "unknown error") +
                  (name == "mpi" ? " (is Open MPI's libmpi installed: apt-get install libopenmpi-dev openmpi-bin?)"
                                 : " (are the CUDA, cuDNN and NCCL libraries on LD_LIBRARY_PATH?)"));
    }
    loaded[name] = handle;
    return;
  }
  throw Error("the " + name + " plugin " + file + " was not found (looked for " + tried +
              "); set ONNXTRAIN_PLUGIN_DIR to the folder that has it");
}

int CountCudaDevicesInChild(std::string* reason) {
  if (!Built("cuda")) {
    if (reason) *reason = "this build of onnx-train has no CUDA runtime";
    return 0;
  }
  int fds[2];
  if (pipe(fds) != 0) {
    if (reason) *reason = "cannot probe for CUDA devices (pipe failed)";
    return 0;
  }
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    std::string text;
    try {
      DeviceBackend& cuda = BackendFor(DeviceType::kCUDA);
      const int n = cuda.DeviceCount();
      text = std::to_string(n) + "\n" + (n == 0 ? cuda.NoDeviceReason() : "");
    } catch (const std::exception& e) {
      text = std::string("0\n") + e.what();
    }
    size_t written = 0;
    while (written < text.size()) {
      ssize_t w = write(fds[1], text.data() + written, text.size() - written);
      if (w <= 0) break;
      written += static_cast<size_t>(w);
    }
    close(fds[1]);
    _exit(0);
  }
  close(fds[1]);
  std::string text;
  if (pid > 0) {
    char chunk[512];
    for (ssize_t n; (n = read(fds[0], chunk, sizeof(chunk))) > 0;) text.append(chunk, static_cast<size_t>(n));
    waitpid(pid, nullptr, 0);
  }
  close(fds[0]);
  const size_t newline = text.find('\n');
  if (pid < 0 || newline == std::string::npos) {
    if (reason) *reason = "cannot probe for CUDA devices (the probe process failed)";
    return 0;
  }
  const int n = std::atoi(text.substr(0, newline).c_str());
  if (reason) *reason = n == 0 ? text.substr(newline + 1) : "";
  return n;
}

}  // namespace ot
