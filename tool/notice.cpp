#include "notice.h"

#include <time.h>

#include <cstring>

#include "gpuobs_schema.h"
#include "log.h"

namespace gpuobs {

void write_notice(RecordingFile& file, uint32_t code, uint32_t device, const std::string& text) {
    GPUOBS_LOG("%s", text.c_str());
    if (!file.is_open()) return;
    gpuobs_notice n;
    std::memset(&n, 0, sizeof n);
    n.device_index = device;
    n.code = code;
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    n.monotonic_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    n.text_len = (uint32_t)text.size();
    file.write_chunk(GPUOBS_CHUNK_NOTICE, {{&n, sizeof n}, {text.data(), text.size()}});
}

}  // namespace gpuobs
