# Finds the CUDA toolkit, cuDNN and NCCL (from the toolkit's folders, or CUDNN_ROOT /
# NCCL_ROOT) and enables the CUDA language for runtime/cuda's .cu files. Sets
# ONNXTRAIN_HAVE_CUDA and the imported targets ot::cudnn and ot::nccl.
find_package(CUDAToolkit QUIET)
set(_ot_cuda_missing "")
if(CUDAToolkit_FOUND)
  set(_ot_cuda_hints ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}/lib64 $ENV{CUDNN_ROOT}/lib $ENV{NCCL_ROOT}/lib)
  find_library(OT_CUDNN_LIBRARY cudnn HINTS ${_ot_cuda_hints})
  find_path(OT_CUDNN_INCLUDE_DIR cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS} $ENV{CUDNN_ROOT}/include)
  find_library(OT_NCCL_LIBRARY nccl HINTS ${_ot_cuda_hints})
  find_path(OT_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} $ENV{NCCL_ROOT}/include)
  foreach(v OT_CUDNN_LIBRARY OT_CUDNN_INCLUDE_DIR OT_NCCL_LIBRARY OT_NCCL_INCLUDE_DIR)
    if(NOT ${v})
      list(APPEND _ot_cuda_missing ${v})
    endif()
  endforeach()
  if(NOT CMAKE_CUDA_COMPILER)
    set(CMAKE_CUDA_COMPILER ${CUDAToolkit_NVCC_EXECUTABLE})
  endif()
else()
  set(_ot_cuda_missing "the CUDA toolkit (nvcc)")
endif()

if(_ot_cuda_missing)
  if(ONNXTRAIN_CUDA STREQUAL "ON")
    message(FATAL_ERROR "ONNXTRAIN_CUDA=ON but not found: ${_ot_cuda_missing}")
  endif()
  message(STATUS "onnx-train: no CUDA runtime (missing ${_ot_cuda_missing})")
  return()
endif()

# sm_90 machine code plus compute_90 PTX (newer GPUs JIT the PTX).
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES 90)
endif()
set(CMAKE_CUDA_STANDARD 17)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
enable_language(CUDA)

add_library(ot::cudnn UNKNOWN IMPORTED)
set_target_properties(ot::cudnn PROPERTIES IMPORTED_LOCATION ${OT_CUDNN_LIBRARY}
                                           INTERFACE_INCLUDE_DIRECTORIES ${OT_CUDNN_INCLUDE_DIR})
add_library(ot::nccl UNKNOWN IMPORTED)
set_target_properties(ot::nccl PROPERTIES IMPORTED_LOCATION ${OT_NCCL_LIBRARY}
                                          INTERFACE_INCLUDE_DIRECTORIES ${OT_NCCL_INCLUDE_DIR})
set(ONNXTRAIN_HAVE_CUDA ON)
# Warnings for nvcc's host compiler, matching the C++ ones.
set(ONNXTRAIN_CUDA_WARNINGS -Xcompiler=-Wall,-Wextra,-Wno-unused-parameter)
if(ONNXTRAIN_WERROR)
  list(APPEND ONNXTRAIN_CUDA_WARNINGS -Werror=all-warnings)
endif()

function(ot_plugin_target target)
  set_target_properties(${target} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${ONNXTRAIN_PLUGIN_DIR}
                                             CUDA_SEPARABLE_COMPILATION OFF POSITION_INDEPENDENT_CODE ON)
  target_include_directories(${target} PRIVATE ${PROJECT_SOURCE_DIR})
  target_compile_definitions(${target} PUBLIC ONNXTRAIN_HAVE_CUDA=1)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${ONNXTRAIN_WARNINGS}>
                                           $<$<COMPILE_LANGUAGE:CUDA>:${ONNXTRAIN_CUDA_WARNINGS}>)
endfunction()
