// The few CUDA driver calls the tool makes itself (device facts, the clock
// probe), bound with dlsym from the libcuda the process already loads.
#pragma once
#include <cuda.h>

namespace gpuobs {

struct CudaDriver {
    decltype(&::cuDeviceGetAttribute) device_get_attribute = nullptr;
    decltype(&::cuDeviceGetName) device_get_name = nullptr;
    CUresult (*device_get_uuid)(CUuuid*, CUdevice) = nullptr;
    decltype(&::cuCtxPushCurrent) ctx_push = nullptr;
    decltype(&::cuCtxPopCurrent) ctx_pop = nullptr;
    decltype(&::cuCtxSynchronize) ctx_synchronize = nullptr;
    decltype(&::cuCtxGetDevice) ctx_get_device = nullptr;
    decltype(&::cuModuleLoadData) module_load_data = nullptr;
    decltype(&::cuModuleGetFunction) module_get_function = nullptr;
    decltype(&::cuLaunchKernel) launch_kernel = nullptr;
    decltype(&::cuStreamCreate) stream_create = nullptr;
    decltype(&::cuStreamSynchronize) stream_synchronize = nullptr;
    CUresult (*stream_query)(CUstream) = nullptr;                   // optional
    CUresult (*func_get_name)(const char**, CUfunction) = nullptr;  // CUDA 12.3+; null before
    // Optional: walking a graph for conditional nodes.
    CUresult (*graph_get_nodes)(CUgraph, CUgraphNode*, size_t*) = nullptr;
    CUresult (*graph_node_get_type)(CUgraphNode, CUgraphNodeType*) = nullptr;
    CUresult (*graph_child_graph)(CUgraphNode, CUgraph*) = nullptr;
    // Optional: the tool's drain thread takes the relaxed capture mode, so that its
    // copies never invalidate a graph capture another thread has open.
    CUresult (*exchange_capture_mode)(CUstreamCaptureMode*) = nullptr;
    // Optional: ring pressure never synchronises a stream being captured.
    CUresult (*stream_is_capturing)(CUstream, CUstreamCaptureStatus*) = nullptr;
    // Optional: in-stream snapshots of the claim counters (pressure_valve.cpp): a copy
    // and an event queued on the program's stream after its launches.
    CUresult (*memcpy_dtod_async)(CUdeviceptr, CUdeviceptr, size_t, CUstream) = nullptr;
    CUresult (*event_create)(CUevent*, unsigned int) = nullptr;
    CUresult (*event_record)(CUevent, CUstream) = nullptr;
    CUresult (*event_query)(CUevent) = nullptr;
    // Optional: the drain's copies through pinned host memory on its own stream.
    CUresult (*mem_alloc_host)(void**, size_t) = nullptr;
    CUresult (*memcpy_dtoh_async)(void*, CUdeviceptr, size_t, CUstream) = nullptr;
    CUresult (*memset_d8_async)(CUdeviceptr, unsigned char, size_t, CUstream) = nullptr;
    bool loaded = false;

    bool load();
};

CudaDriver& driver();

}  // namespace gpuobs
