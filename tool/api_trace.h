// --api-trace: CUDA driver and runtime API calls of the process, on the host
// clock, with the launches each call made. Calls are kept in memory and written
// as API_CALLS chunks at flushes, every few thousand calls, and at exit.
#pragma once
#include <sanitizer.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "gpuobs_schema.h"
#include "recording_file.h"

namespace gpuobs {

class ApiTrace {
public:
    // An ENTER or EXIT callback of the driver or runtime API domain.
    void on_callback(Sanitizer_CallbackDomain domain, Sanitizer_CallbackId cbid, const Sanitizer_CallbackData* cd);
    // The innermost call open on this thread (0 when none): what made a launch.
    static uint64_t current_call();
    // True when enough calls wait to be written.
    bool wants_write() const { return pending_size_ >= kWriteEvery; }
    // Writes the names first seen and the finished calls; nothing when `file` is closed.
    void write_pending(RecordingFile& file);

private:
    static constexpr size_t kWriteEvery = 4096;
    // Calls kept while no recording file is open yet (a process that calls the
    // API a lot before its first context): past this, calls are not traced.
    static constexpr size_t kMaxPending = 1u << 20;
    bool overflow_reported_ = false;
    std::mutex mu_;
    std::vector<gpuobs_api_call> pending_;
    std::atomic<size_t> pending_size_{0};
    std::unordered_map<uint32_t, std::string> names_;  // every API id seen
    std::vector<uint32_t> unwritten_names_;
};

}  // namespace gpuobs
