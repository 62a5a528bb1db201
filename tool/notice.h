// Notices: what the tool could not record, or made the program do (wait for its
// rings), and why. Each is printed on stderr and stored in the recording (NOTICE
// chunk), so that `gpuobs record` and `gpuobs info` can say why something that
// ran on the GPU is missing, or why the program's timings include waits.
#pragma once
#include <cstdint>
#include <string>

#include "recording_file.h"

namespace gpuobs {

// code: enum gpuobs_notice_code; device: CUDA ordinal or GPUOBS_NO_DEVICE.
void write_notice(RecordingFile& file, uint32_t code, uint32_t device, const std::string& text);

constexpr uint32_t GPUOBS_NO_DEVICE = 0xFFFFFFFFu;

}  // namespace gpuobs
