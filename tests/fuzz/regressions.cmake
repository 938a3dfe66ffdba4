# Included by tests/CMakeLists.txt (not add_subdirectory: this folder's CMakeLists.txt builds the
# libFuzzer targets of -DONNXTRAIN_FUZZ=ON builds). Label: fuzz.
# The fuzz targets' saved crash inputs (tests/fuzz/regressions/<target>/) replayed by an
# ordinary build: each *_fuzzer.cc linked with tests/fuzz/replay_main.cc instead of libFuzzer,
# with AddressSanitizer (its leak check included) on the replay program where the compiler has
# it (a build with ONNXTRAIN_SANITIZE keeps its own sanitizers instead). scripts/fuzz.sh
# replays the same folders under clang's full sanitizers.
if(NOT ONNXTRAIN_SANITIZE)
  include(CheckCXXSourceCompiles)
  set(CMAKE_REQUIRED_FLAGS -fsanitize=address)
  set(CMAKE_REQUIRED_LINK_OPTIONS -fsanitize=address)
  check_cxx_source_compiles("int main() { return 0; }" ONNXTRAIN_HAVE_ASAN)
  unset(CMAKE_REQUIRED_FLAGS)
  unset(CMAKE_REQUIRED_LINK_OPTIONS)
endif()
file(GLOB fuzz_regression_dirs LIST_DIRECTORIES true ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/regressions/*)
foreach(dir ${fuzz_regression_dirs})
  get_filename_component(target ${dir} NAME)
  if(NOT EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/${target}_fuzzer.cc)
    message(FATAL_ERROR "tests/fuzz/regressions/${target} has no tests/fuzz/${target}_fuzzer.cc")
  endif()
  add_executable(${target}_replay fuzz/replay_main.cc fuzz/${target}_fuzzer.cc fuzz/fuzz_support.cc)
  target_include_directories(${target}_replay PRIVATE ${PROJECT_SOURCE_DIR})
  target_link_libraries(${target}_replay PRIVATE ot_train ot_graph ZLIB::ZLIB)
  target_compile_options(${target}_replay PRIVATE ${ONNXTRAIN_WARNINGS})
  if(ONNXTRAIN_HAVE_ASAN)
    target_compile_options(${target}_replay PRIVATE -fsanitize=address -fno-omit-frame-pointer)
    target_link_options(${target}_replay PRIVATE -fsanitize=address)
  endif()
  add_test(NAME fuzz_regressions_${target} COMMAND ${target}_replay ${dir})
  set_tests_properties(fuzz_regressions_${target} PROPERTIES TIMEOUT 60 LABELS fuzz)
endforeach()
