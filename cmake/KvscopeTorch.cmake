# LibTorch from the PyPI `torch` wheel of a Python (REFERENCE §7). We import libtorch_cpu + libc10 directly (and the
# CUDA pair when KVSCOPE_WITH_CUDA), which keeps a CPU build independent of the wheel's CUDA-probing CMake config.
if(NOT KVSCOPE_PYTHON)
  find_program(KVSCOPE_PYTHON NAMES python3 python REQUIRED)
endif()
execute_process(
  COMMAND ${KVSCOPE_PYTHON} -c "import os, torch; print(os.path.dirname(torch.__file__)); print(torch.__version__)"
  OUTPUT_VARIABLE _kv_torch_out RESULT_VARIABLE _kv_torch_rc ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT _kv_torch_rc EQUAL 0)
  message(FATAL_ERROR "kvscope: `${KVSCOPE_PYTHON}` cannot import torch. Run packaging/setup.sh and pass "
                      "-DKVSCOPE_PYTHON=<venv>/bin/python.")
endif()
string(REPLACE "\n" ";" _kv_torch_out "${_kv_torch_out}")
list(GET _kv_torch_out 0 KVSCOPE_TORCH_DIR)
list(GET _kv_torch_out 1 KVSCOPE_TORCH_VERSION)
message(STATUS "kvscope: LibTorch ${KVSCOPE_TORCH_VERSION} from ${KVSCOPE_TORCH_DIR}")

find_library(KVSCOPE_TORCH_CPU_LIB torch_cpu PATHS ${KVSCOPE_TORCH_DIR}/lib NO_DEFAULT_PATH REQUIRED)
find_library(KVSCOPE_C10_LIB c10 PATHS ${KVSCOPE_TORCH_DIR}/lib NO_DEFAULT_PATH REQUIRED)

add_library(kvscope_torch INTERFACE)
add_library(kvscope::torch ALIAS kvscope_torch)
target_include_directories(kvscope_torch SYSTEM INTERFACE
  ${KVSCOPE_TORCH_DIR}/include ${KVSCOPE_TORCH_DIR}/include/torch/csrc/api/include)
# fmt: the wheel ships its own fmt headers in torch/include, which shadow the system ones; use them header-only
# everywhere torch is visible, so one fmt version is compiled and nothing links against a mismatched libfmt.
target_compile_definitions(kvscope_torch INTERFACE _GLIBCXX_USE_CXX11_ABI=1 FMT_HEADER_ONLY=1)
target_link_libraries(kvscope_torch INTERFACE ${KVSCOPE_TORCH_CPU_LIB} ${KVSCOPE_C10_LIB})
# at::parallel_for is a header template over OpenMP (the wheel's ATen/Parallel): code compiled without -fopenmp runs
# it on one thread. With GCC, kvscope's code is compiled with OpenMP and linked to libgomp.so.1, which resolves (by
# soname, through the rpath below) to the copy the wheel loads: one thread pool, sized by at::set_num_threads. Clang
# (the fuzz preset) would bring its own runtime, so its builds keep the one-thread loops.
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  target_compile_options(kvscope_torch INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-fopenmp>)
  target_link_options(kvscope_torch INTERFACE -fopenmp)
endif()
# The wheel's libraries find their siblings through $ORIGIN; our binaries find them through this rpath.
set(CMAKE_BUILD_RPATH ${CMAKE_BUILD_RPATH} ${KVSCOPE_TORCH_DIR}/lib)
set(CMAKE_INSTALL_RPATH ${CMAKE_INSTALL_RPATH} ${KVSCOPE_TORCH_DIR}/lib)
