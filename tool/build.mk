# The native build's one list of sources and flags. Read by tool/Makefile and by
# exporter/gpuobs/record/native_build.py (`gpuobs build`), so both build the same thing.
# One setting a line: NAME := words.

# The injected host tool (a shared library).
TOOL_SOURCES := gpuobs_tool.cpp context_registry.cpp patching.cpp recording_windows.cpp control_api.cpp context_state.cpp context_setup.cpp launch_log.cpp drainer.cpp pressure_valve.cpp sampler.cpp tool_kernels.cpp crash_drain.cpp exit_paths.cpp patched_code_dump.cpp config.cpp recording_file.cpp chunk_compress.cpp sanitizer_api.cpp cuda_driver.cpp api_trace.cpp notice.cpp graph_table.cpp launch_counts.cpp kernel_filter.cpp warp_slots.cpp
TOOL_CXXFLAGS := -shared -fPIC -O2 -std=c++17 -Wall -Wextra -Werror=return-type -Wno-unused-parameter -fvisibility=hidden
TOOL_LIBS := -ldl -lpthread -Wl,--no-undefined

# The device patches and the tool's own kernels: SASS for every architecture CUDA 13
# targets that gpuobs claims, plus PTX of the newest so that a future GPU can JIT them.
PATCH_ARCHS := 75 80 86 89 90 100 120
PTX_ARCH := 120
PATCH_NVCCFLAGS := --fatbin --keep-device-functions -Xptxas --compile-as-tools-patch -O3
PROBE_NVCCFLAGS := --fatbin -O3
