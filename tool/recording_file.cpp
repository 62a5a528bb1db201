#include "recording_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "gpuobs_schema.h"

#ifndef GPUOBS_TOOL_VERSION
#define GPUOBS_TOOL_VERSION "gpuobs-tool 0.1.0"
#endif

namespace gpuobs {

// CRC-32 (IEEE 802.3, as zlib.crc32), eight bytes a step (slicing-by-8): a
// drain checksums every record it writes, and a byte at a time held a drain of
// 3.3 million records to 180 MB/s on the H200 machine.
namespace {

struct Crc32Tables {
    uint32_t t[8][256];
    Crc32Tables() {
        for (uint32_t i = 0; i < 256; ++i) {
            uint32_t c = i;
            for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
            t[0][i] = c;
        }
        for (uint32_t i = 0; i < 256; ++i)
            for (int k = 1; k < 8; ++k) t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xff];
    }
};

}  // namespace

uint32_t crc32_update(uint32_t crc, const void* data, size_t size) {
    static const Crc32Tables tables;
    const auto& t = tables.t;
    const uint8_t* p = static_cast<const uint8_t*>(data);
    crc = ~crc;
    for (; size >= 8; size -= 8, p += 8) {
        uint32_t lo, hi;  // little-endian words, as the CPUs the tool runs on
        std::memcpy(&lo, p, 4);
        std::memcpy(&hi, p + 4, 4);
        lo ^= crc;
        crc = t[7][lo & 0xff] ^ t[6][(lo >> 8) & 0xff] ^ t[5][(lo >> 16) & 0xff] ^ t[4][lo >> 24] ^ t[3][hi & 0xff] ^
              t[2][(hi >> 8) & 0xff] ^ t[1][(hi >> 16) & 0xff] ^ t[0][hi >> 24];
    }
    for (; size > 0; --size) crc = t[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return ~crc;
}

static std::string with_pid(const std::string& path) {
    std::string stem = path, ext;
    size_t dot = path.rfind('.');
    size_t slash = path.rfind('/');
    if (dot != std::string::npos && (slash == std::string::npos || dot > slash)) {
        stem = path.substr(0, dot);
        ext = path.substr(dot);
    }
    return stem + "." + std::to_string(getpid()) + ext;
}

// Both names are created exclusively and never through a link: an existing file,
// or a link planted at either name, is left as it is (the recording is not made).
static int create_new(const std::string& path) {
    return ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
}

bool RecordingFile::opened_here() const { return file_ != nullptr && owner_pid_ == (long)getpid(); }

bool RecordingFile::open(const std::string& path, std::string* error) {
    std::string chosen = path;
    int fd = create_new(chosen);
    if (fd < 0 && errno == EEXIST) {
        chosen = with_pid(path);
        fd = create_new(chosen);
        if (fd < 0 && errno == EEXIST) {
            *error = "cannot create " + chosen + ": it exists (a file or link left there; it is not replaced)";
            return false;
        }
    }
    if (fd < 0) {
        *error = "cannot create " + chosen + ": " + std::strerror(errno);
        return false;
    }
    file_ = fdopen(fd, "wb");
    if (file_ == nullptr) {
        *error = "cannot open " + chosen + ": " + std::strerror(errno);
        ::close(fd);
        return false;
    }
    path_ = chosen;
    owner_pid_ = (long)getpid();
    gpuobs_file_header h;
    std::memset(&h, 0, sizeof h);
    std::memcpy(h.magic, GPUOBS_FILE_MAGIC, 8);
    h.format_version = GPUOBS_FORMAT_VERSION;
    h.header_size = sizeof h;
    h.schema_hash = GPUOBS_SCHEMA_HASH;
    std::strncpy(h.tool_version, GPUOBS_TOOL_VERSION, sizeof h.tool_version - 1);
    if (std::fwrite(&h, sizeof h, 1, file_) != 1 || std::fflush(file_) != 0) {
        *error = "cannot write " + chosen + ": " + std::strerror(errno);
        std::fclose(file_);
        file_ = nullptr;
        return false;
    }
    offset_ = sizeof h;
    return true;
}

uint64_t RecordingFile::write_locked(uint32_t type, const Part* parts, size_t n, uint32_t flags) {
    if (file_ == nullptr) return 0;
    gpuobs_chunk_header ch;
    std::memset(&ch, 0, sizeof ch);
    ch.type = type;
    ch.flags = flags;
    for (size_t i = 0; i < n; ++i) ch.length += parts[i].size;
    uint32_t crc = crc32_update(0, &ch, 16);
    for (size_t i = 0; i < n; ++i) crc = crc32_update(crc, parts[i].data, parts[i].size);
    ch.crc32 = crc;
    bool ok = std::fwrite(&ch, sizeof ch, 1, file_) == 1;
    for (size_t i = 0; ok && i < n; ++i)
        if (parts[i].size) ok = std::fwrite(parts[i].data, parts[i].size, 1, file_) == 1;
    ok = ok && std::fflush(file_) == 0;
    offset_ += sizeof ch + ch.length;
    if (!ok) {
        std::fprintf(stderr, "gpuobs: writing %s failed (%s); recording stops here\n", path_.c_str(),
                     std::strerror(errno));
        std::fclose(file_);
        file_ = nullptr;
        return 0;
    }
    return sizeof ch + ch.length;
}

uint64_t RecordingFile::write_chunk(uint32_t type, std::initializer_list<Part> parts) {
    std::lock_guard<std::mutex> lock(mu_);
    return write_locked(type, parts.begin(), parts.size());
}

uint64_t RecordingFile::write_table_chunk(uint32_t type, Part head, Part rows, uint32_t row_size,
                                          PackBuffers* buffers) {
    // Packed before the lock: other threads' chunks (a launch's FUNCTION chunk) never wait for zlib.
    const bool packed =
        packer_ != nullptr && packer_->pack(head.data, head.size, rows.data, rows.size, row_size, buffers);
    std::lock_guard<std::mutex> lock(mu_);
    if (packed) {
        const Part part = {buffers->packed.data(), buffers->packed.size()};
        return write_locked(type, &part, 1, GPUOBS_CHUNK_SHUFFLED_ZLIB);
    }
    const Part parts[] = {head, rows};
    return write_locked(type, parts, 2);
}

uint64_t RecordingFile::write_events(uint32_t device_index, uint32_t flush_seq, const void* events, uint32_t count) {
    std::lock_guard<std::mutex> lock(mu_);
    gpuobs_events_header eh;
    std::memset(&eh, 0, sizeof eh);
    eh.device_index = device_index;
    eh.flush_seq = flush_seq;
    eh.count = count;
    uint64_t first = offset_ + sizeof(gpuobs_chunk_header) + sizeof eh;
    eh.padding = (uint32_t)((64 - first % 64) % 64);
    static const uint8_t zeros[64] = {0};
    Part parts[] = {{&eh, sizeof eh}, {zeros, eh.padding}, {events, (size_t)count * sizeof(gpuobs_event)}};
    return write_locked(GPUOBS_CHUNK_EVENTS, parts, 3);
}

void RecordingFile::close() {
    std::lock_guard<std::mutex> lock(mu_);
    if (file_ != nullptr) {
        std::fclose(file_);
        file_ = nullptr;
    }
}

}  // namespace gpuobs
