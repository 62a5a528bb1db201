// The Compute Sanitizer API, bound at run time with dlopen so that a missing or
// refused library leaves the target program running uninstrumented.
#pragma once
#include <sanitizer.h>

#include <string>

namespace gpuobs {

struct SanitizerApi {
    decltype(&::sanitizerSubscribe) subscribe = nullptr;
    decltype(&::sanitizerEnableDomain) enable_domain = nullptr;
    decltype(&::sanitizerEnableCallback) enable_callback = nullptr;
    decltype(&::sanitizerAddPatchesFromFile) add_patches_from_file = nullptr;
    decltype(&::sanitizerPatchInstructions) patch_instructions = nullptr;
    decltype(&::sanitizerPatchModule) patch_module = nullptr;
    decltype(&::sanitizerGetFunctionPcAndSize) function_pc_and_size = nullptr;
    decltype(&::sanitizerSetCallbackData) set_callback_data = nullptr;
    decltype(&::sanitizerSetLaunchCallbackData) set_launch_callback_data = nullptr;
    decltype(&::sanitizerAlloc) alloc = nullptr;
    decltype(&::sanitizerFree) free = nullptr;
    decltype(&::sanitizerMemset) memset = nullptr;
    decltype(&::sanitizerMemcpyDeviceToHost) memcpy_dtoh = nullptr;
    decltype(&::sanitizerMemcpyHostToDeviceAsync) memcpy_htod_async = nullptr;
    decltype(&::sanitizerGetResultString) result_string = nullptr;
    // Optional (null where the library lacks it): the handle of a context's own
    // NULL stream, so that copies never depend on which context is current.
    decltype(&::sanitizerGetStreamHandle) get_stream_handle = nullptr;
    // Optional: pinned host memory, for the drain's copies out of the rings.
    decltype(&::sanitizerAllocHost) alloc_host = nullptr;
    std::string path;

    // Loads the library from GPUOBS_SANITIZER_LIB or the usual places; false
    // (with `error` set) when it cannot.
    bool load(std::string* error);
    const char* describe(SanitizerResult r) const;
};

SanitizerApi& sanitizer();

}  // namespace gpuobs
