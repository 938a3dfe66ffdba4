// Optional parts of onnx-train that live in their own shared libraries and are loaded
// on first use: the CUDA runtime (libonnxtrain_cuda.so: cuDNN/cuBLAS kernels and the CUDA
// device backend), the NCCL communicator (libonnxtrain_nccl.so) and the MPI communicator
// (libonnxtrain_mpi.so, over Open MPI). A CPU-only run never
// maps the CUDA libraries (hundreds of MiB of address space and startup time). Loading a
// plugin runs its static registrations (kernels, device backend, communicator backend).
#pragma once

#include <string>

namespace ot {

// Loads the plugin named `name` ("cuda", "nccl" or "mpi") once; later calls return at once.
// Looks in $ONNXTRAIN_PLUGIN_DIR, then the folder it was built in, then the folder of
// the running executable and its ../lib. Throws ot::Error with the loader's message when
// the plugin is missing or cannot be loaded (e.g. no CUDA driver libraries).
void LoadPlugin(const std::string& name);
// Whether this build made the plugin at all (false: e.g. configured without CUDA).
bool PluginBuilt(const std::string& name);
// Why "mpi" is unavailable in a build without it, and what to install.
const char* NoMpiBackendMessage();

// CUDA devices on this machine, counted in a forked child so that this process does not
// start CUDA (a CUDA context does not survive fork; launchers fork their ranks after
// asking). 0 with the reason when there is none or the CUDA plugin cannot load.
int CountCudaDevicesInChild(std::string* reason);

}  // namespace ot
