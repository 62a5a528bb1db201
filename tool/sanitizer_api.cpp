#include "sanitizer_api.h"

#include <dlfcn.h>

#include <cstdlib>
#include <vector>

namespace gpuobs {

SanitizerApi& sanitizer() {
    static SanitizerApi* api = new SanitizerApi();  // never destroyed: callbacks run during teardown
    return *api;
}

static std::vector<std::string> candidate_paths() {
    std::vector<std::string> paths;
    if (const char* p = std::getenv("GPUOBS_SANITIZER_LIB")) paths.emplace_back(p);
    if (const char* home = std::getenv("CUDA_HOME"))
        paths.emplace_back(std::string(home) + "/compute-sanitizer/libsanitizer-public.so");
    paths.emplace_back("/usr/local/cuda/compute-sanitizer/libsanitizer-public.so");
    paths.emplace_back("libsanitizer-public.so");
    return paths;
}

template <typename T>
static bool bind(void* handle, const char* name, T* slot, std::string* missing) {
    *slot = reinterpret_cast<T>(dlsym(handle, name));
    if (*slot == nullptr) {
        if (!missing->empty()) *missing += ", ";
        *missing += name;
        return false;
    }
    return true;
}

bool SanitizerApi::load(std::string* error) {
    void* handle = nullptr;
    std::string tried;
    for (const auto& candidate : candidate_paths()) {
        handle = dlopen(candidate.c_str(), RTLD_NOW | RTLD_GLOBAL);
        if (handle != nullptr) {
            path = candidate;
            break;
        }
        tried += (tried.empty() ? "" : "; ") + candidate + " (" + dlerror() + ")";
    }
    if (handle == nullptr) {
        *error = "no compute-sanitizer library found; tried " + tried + ". Set GPUOBS_SANITIZER_LIB or CUDA_HOME";
        return false;
    }
    std::string missing;
    bool ok = true;
    ok &= bind(handle, "sanitizerSubscribe", &subscribe, &missing);
    ok &= bind(handle, "sanitizerEnableDomain", &enable_domain, &missing);
    ok &= bind(handle, "sanitizerEnableCallback", &enable_callback, &missing);
    ok &= bind(handle, "sanitizerAddPatchesFromFile", &add_patches_from_file, &missing);
    ok &= bind(handle, "sanitizerPatchInstructions", &patch_instructions, &missing);
    ok &= bind(handle, "sanitizerPatchModule", &patch_module, &missing);
    ok &= bind(handle, "sanitizerGetFunctionPcAndSize", &function_pc_and_size, &missing);
    ok &= bind(handle, "sanitizerSetCallbackData", &set_callback_data, &missing);
    ok &= bind(handle, "sanitizerSetLaunchCallbackData", &set_launch_callback_data, &missing);
    ok &= bind(handle, "sanitizerAlloc", &alloc, &missing);
    ok &= bind(handle, "sanitizerFree", &free, &missing);
    ok &= bind(handle, "sanitizerMemset", &memset, &missing);
    ok &= bind(handle, "sanitizerMemcpyDeviceToHost", &memcpy_dtoh, &missing);
    ok &= bind(handle, "sanitizerMemcpyHostToDeviceAsync", &memcpy_htod_async, &missing);
    ok &= bind(handle, "sanitizerGetResultString", &result_string, &missing);
    std::string optional;
    bind(handle, "sanitizerGetStreamHandle", &get_stream_handle, &optional);
    bind(handle, "sanitizerAllocHost", &alloc_host, &optional);
    if (!ok) {
        *error = path + " lacks " + missing;
        return false;
    }
    return true;
}

const char* SanitizerApi::describe(SanitizerResult r) const {
    const char* s = nullptr;
    if (result_string != nullptr && result_string(r, &s) == SANITIZER_SUCCESS && s != nullptr) return s;
    return "unknown sanitizer error";
}

}  // namespace gpuobs
