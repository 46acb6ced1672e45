# Dependencies: OpenBLAS and OpenMP are required; CMocka for the tests; the
# CUDA toolkit is optional (GIANT_CUDA).

find_package(Threads REQUIRED)
find_package(OpenMP REQUIRED COMPONENTS C)
find_package(PkgConfig REQUIRED)

# Prefer OpenBLAS built for OpenMP: one thread pool for BLAS and our kernels,
# and a BLAS call made inside a parallel region runs on its caller's thread
# instead of spawning threads of its own.
find_library(GIANT_OPENBLAS_LIB NAMES openblas
  PATHS /usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-openmp NO_DEFAULT_PATH)
if(NOT GIANT_OPENBLAS_LIB)
  message(WARNING "OpenBLAS built for OpenMP not found (Debian: libopenblas-openmp-dev); "
                  "falling back to any OpenBLAS: BLAS threads may fight OpenMP threads")
  find_library(GIANT_OPENBLAS_LIB NAMES openblas REQUIRED)
endif()
get_filename_component(GIANT_OPENBLAS_DIR ${GIANT_OPENBLAS_LIB} DIRECTORY)
find_path(GIANT_CBLAS_INCLUDE cblas.h PATH_SUFFIXES openblas openblas-openmp
  PATHS /usr/include/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-openmp REQUIRED)
add_library(giant::openblas UNKNOWN IMPORTED)
set_target_properties(giant::openblas PROPERTIES IMPORTED_LOCATION ${GIANT_OPENBLAS_LIB}
  INTERFACE_INCLUDE_DIRECTORIES ${GIANT_CBLAS_INCLUDE})
message(STATUS "OpenBLAS: ${GIANT_OPENBLAS_LIB} (cblas.h in ${GIANT_CBLAS_INCLUDE})")

if(GIANT_TESTS)
  pkg_check_modules(CMOCKA REQUIRED IMPORTED_TARGET cmocka)
endif()

# CUDA: AUTO builds it when a toolkit is found, ON insists, OFF skips.
set(GIANT_HAVE_CUDA OFF)
if(NOT GIANT_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    set(GIANT_HAVE_CUDA ON)
  elseif(GIANT_CUDA STREQUAL "ON")
    message(FATAL_ERROR "GIANT_CUDA=ON but no CUDA toolkit was found (set CMAKE_CUDA_COMPILER or install it under /usr/local/cuda)")
  endif()
endif()
message(STATUS "CUDA backend: ${GIANT_HAVE_CUDA}")
