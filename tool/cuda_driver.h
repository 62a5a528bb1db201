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
    bool loaded = false;

    bool load();
};

CudaDriver& driver();

}  // namespace gpuobs
