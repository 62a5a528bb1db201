#include "cuda_driver.h"

#include <dlfcn.h>

namespace gpuobs {

CudaDriver& driver() {
    static CudaDriver* d = new CudaDriver();  // never destroyed: used during teardown
    return *d;
}

template <typename T>
static bool bind(void* handle, const char* name, T* slot) {
    *slot = reinterpret_cast<T>(dlsym(handle, name));
    return *slot != nullptr;
}

bool CudaDriver::load() {
    if (loaded) return true;
    void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (h == nullptr) return false;
    bool ok = true;
    ok &= bind(h, "cuDeviceGetAttribute", &device_get_attribute);
    ok &= bind(h, "cuDeviceGetName", &device_get_name);
    ok &= bind(h, "cuDeviceGetUuid_v2", &device_get_uuid) || bind(h, "cuDeviceGetUuid", &device_get_uuid);
    ok &= bind(h, "cuCtxPushCurrent_v2", &ctx_push);
    ok &= bind(h, "cuCtxPopCurrent_v2", &ctx_pop);
    ok &= bind(h, "cuCtxSynchronize", &ctx_synchronize);
    ok &= bind(h, "cuCtxGetDevice", &ctx_get_device);
    ok &= bind(h, "cuModuleLoadData", &module_load_data);
    ok &= bind(h, "cuModuleGetFunction", &module_get_function);
    ok &= bind(h, "cuLaunchKernel", &launch_kernel);
    ok &= bind(h, "cuStreamCreate", &stream_create);
    ok &= bind(h, "cuStreamSynchronize", &stream_synchronize);
    bind(h, "cuFuncGetName", &func_get_name);  // optional
    bind(h, "cuGraphGetNodes", &graph_get_nodes);
    bind(h, "cuGraphNodeGetType", &graph_node_get_type);
    bind(h, "cuGraphChildGraphNodeGetGraph", &graph_child_graph);
    bind(h, "cuThreadExchangeStreamCaptureMode", &exchange_capture_mode);
    bind(h, "cuStreamIsCapturing", &stream_is_capturing);
    bind(h, "cuStreamQuery", &stream_query);
    loaded = ok;
    return ok;
}

}  // namespace gpuobs
