#include "chunk_compress.h"

#include <dlfcn.h>

#include <cstring>

#include "gpuobs_schema.h"

namespace gpuobs {

namespace {
constexpr int kZlibOk = 0;     // Z_OK
constexpr int kZlibLevel = 1;  // level 1: ~24x on shuffled launch rows, at ~0.6 GB/s a core
}  // namespace

bool ChunkPacker::load(const char* library, std::string* why) {
    void* lib = dlopen(library, RTLD_NOW | RTLD_LOCAL);  // kept for the process's life
    if (lib == nullptr) {
        const char* err = dlerror();
        *why = std::string("cannot load ") + library + " (" + (err ? err : "unknown error") + ")";
        return false;
    }
    auto bound = reinterpret_cast<CompressBound>(dlsym(lib, "compressBound"));
    auto compress = reinterpret_cast<Compress2>(dlsym(lib, "compress2"));
    if (bound == nullptr || compress == nullptr) {
        *why = std::string(library) + " has no compressBound or compress2";
        return false;
    }
    compress_bound_ = bound;
    compress2_ = compress;
    return true;
}

// A block of rows at a time (40 KB of 80-byte rows: in L1), so that both the rows
// read and the 80 runs written stay in cache.
void shuffle_rows(const uint8_t* rows, size_t count, uint32_t row_size, uint8_t* out) {
    constexpr size_t kBlockRows = 512;
    for (size_t first = 0; first < count; first += kBlockRows) {
        const size_t n = count - first < kBlockRows ? count - first : kBlockRows;
        const uint8_t* block = rows + first * row_size;
        for (uint32_t k = 0; k < row_size; ++k) {
            uint8_t* column = out + k * count + first;
            for (size_t r = 0; r < n; ++r) column[r] = block[r * row_size + k];
        }
    }
}

bool ChunkPacker::pack(const void* head, size_t head_size, const void* rows, size_t rows_size, uint32_t row_size,
                       PackBuffers* b) const {
    if (!ready() || row_size == 0 || rows_size % row_size != 0 || rows_size == 0) return false;
    const size_t count = rows_size / row_size;
    b->shuffled.resize(rows_size);
    shuffle_rows(static_cast<const uint8_t*>(rows), count, row_size, b->shuffled.data());
    const size_t at = sizeof(gpuobs_packed_header) + head_size;
    unsigned long stream = compress_bound_(rows_size);
    b->packed.resize(at + stream);
    if (compress2_(b->packed.data() + at, &stream, b->shuffled.data(), rows_size, kZlibLevel) != kZlibOk) return false;
    if (at + stream >= head_size + rows_size) return false;  // not smaller: stored as it is
    b->packed.resize(at + stream);
    gpuobs_packed_header h;
    std::memset(&h, 0, sizeof h);
    h.raw_length = head_size + rows_size;
    h.row_size = row_size;
    h.head_size = (uint32_t)head_size;
    std::memcpy(b->packed.data(), &h, sizeof h);
    if (head_size) std::memcpy(b->packed.data() + sizeof h, head, head_size);
    return true;
}

}  // namespace gpuobs
