// Packs the tables the tool writes at every flush (LAUNCHES, FLUSH's launch counts,
// API_CALLS): rows byte-shuffled (byte k of every row together, as Blosc does), then
// deflated at level 1 by the system's zlib (GPUOBS_CHUNK_SHUFFLED_ZLIB, framed as
// schemas/recording-format.md says). zlib is loaded at run time, so the tool has no
// build dependency on it; without it (or when it fails) chunks are written as they are.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace gpuobs {

// A caller's buffers, reused from one chunk to the next (one per writing thread).
struct PackBuffers {
    std::vector<uint8_t> shuffled;
    std::vector<uint8_t> packed;
};

class ChunkPacker {
public:
    // dlopen(library) and find compressBound and compress2 in it. False, with `why`
    // set, when it cannot: nothing is packed then.
    bool load(const char* library, std::string* why);
    bool ready() const { return compress2_ != nullptr; }

    // Packs head (stored as it is) and rows (whole rows of row_size bytes) into
    // buffers->packed: gpuobs_packed_header, head, zlib stream. False when zlib fails or
    // the packed payload would not be smaller: the caller writes the chunk as it is.
    bool pack(const void* head, size_t head_size, const void* rows, size_t rows_size, uint32_t row_size,
              PackBuffers* buffers) const;

private:
    using CompressBound = unsigned long (*)(unsigned long source_len);
    using Compress2 = int (*)(unsigned char* dest, unsigned long* dest_len, const unsigned char* source,
                              unsigned long source_len, int level);
    CompressBound compress_bound_ = nullptr;
    Compress2 compress2_ = nullptr;
};

// The rows' bytes regrouped by position within a row: every row's byte 0, then every row's byte 1, ...
void shuffle_rows(const uint8_t* rows, size_t count, uint32_t row_size, uint8_t* out);

}  // namespace gpuobs
