# The NVML shim: one file, libnvidia-ml loaded with dlopen at run time (no
# NVIDIA headers or link-time dependency), so gpureap builds and runs on nodes
# without a driver. Included by src/gpu/CMakeLists.txt.
target_sources(gpureap_gpu PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/nvml_backend.cpp)
