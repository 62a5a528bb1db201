// Appends chunks to a .gpuobs file (framing in schemas/recording-format.md).
// Each chunk is written whole and flushed, so a process that dies leaves a
// readable prefix.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>

#include "chunk_compress.h"

namespace gpuobs {

struct Part {
    const void* data;
    size_t size;
};

class RecordingFile {
public:
    // Creates `path` exclusively; if another process of the same run already
    // owns it, uses "<stem>.<pid>.gpuobs" beside it, created exclusively too (never
    // truncating or following a link). False with `error` set on failure.
    bool open(const std::string& path, std::string* error);
    bool is_open() const { return file_ != nullptr; }
    // False in a forked child of the process that opened it (it must not write there).
    bool opened_here() const;
    const std::string& path() const { return path_; }

    // Each write returns the bytes it added to the file (0 when nothing was written),
    // so a sampler can charge what the flushes write besides the records.
    uint64_t write_chunk(uint32_t type, std::initializer_list<Part> parts);
    // Packs LAUNCHES, FLUSH and API_CALLS chunks from now on (chunk_compress.h), where
    // that makes them smaller; `packer` must outlive the file and be ready.
    void set_packer(const ChunkPacker* packer) { packer_ = packer; }
    bool packs() const { return packer_ != nullptr; }
    // A table chunk: `head` (may be empty), then whole rows of row_size bytes. Packed,
    // outside the file's lock, in `buffers` (the calling thread's) when packing is on.
    uint64_t write_table_chunk(uint32_t type, Part head, Part rows, uint32_t row_size, PackBuffers* buffers);
    // EVENTS chunk: header, zero padding to a 64-byte aligned file offset, events.
    uint64_t write_events(uint32_t device_index, uint32_t flush_seq, const void* events, uint32_t count);
    void close();

private:
    uint64_t write_locked(uint32_t type, const Part* parts, size_t n, uint32_t flags = 0);
    const ChunkPacker* packer_ = nullptr;
    std::mutex mu_;
    FILE* file_ = nullptr;
    uint64_t offset_ = 0;
    std::string path_;
    long owner_pid_ = 0;  // the process that opened it
};

uint32_t crc32_update(uint32_t crc, const void* data, size_t size);

}  // namespace gpuobs
