/* The reader's walk over a recording's chunk frames, in C (recording_file/chunk_walk.py
 * loads it; reader.py walks them in Python where it cannot be built): each chunk's
 * header must fit in the file, its payload too, and its CRC-32 (zlib's) must hold.
 * The walk stops before the first chunk that fails, for the Python reader to say why
 * in its own words; what each chunk holds is for the reader to decode. The frame is
 * the schema header's gpuobs_chunk_header. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "gpuobs_schema.h"

enum { WALK_END = 0, WALK_FULL = 1, WALK_STOPPED = 2 };

static uint32_t crc_table[8][256];

static void make_tables(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xFF];
}

/* zlib's crc32(crc, p, n), eight bytes a step */
static uint32_t crc32_update(uint32_t crc, const uint8_t* p, uint64_t n) {
    crc = ~crc;
    while (n >= 8) {
        uint32_t lo, hi;
        memcpy(&lo, p, 4);
        memcpy(&hi, p + 4, 4);
        lo ^= crc;
        crc = crc_table[7][lo & 0xFF] ^ crc_table[6][(lo >> 8) & 0xFF] ^ crc_table[5][(lo >> 16) & 0xFF] ^
              crc_table[4][lo >> 24] ^ crc_table[3][hi & 0xFF] ^ crc_table[2][(hi >> 8) & 0xFF] ^
              crc_table[1][(hi >> 16) & 0xFF] ^ crc_table[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--) crc = crc_table[0][(crc ^ *p++) & 0xFF] ^ (crc >> 8);
    return ~crc;
}

/* The chunks of buf[offset..end) (buf holds size bytes), at most max_chunks of them:
 * their offsets, types and payload lengths. A chunk whose type has its bit in
 * unchecked (types below 64) is framed but its CRC is left to the caller. Returns how
 * many were walked; *next is the offset after them, and *status WALK_END (at end),
 * WALK_FULL (max_chunks walked: call again from *next) or WALK_STOPPED (the chunk at
 * *next does not fit in the file or fails its CRC). */
int64_t gpuobs_walk_chunks(const uint8_t* buf, uint64_t size, uint64_t offset, uint64_t end, uint64_t unchecked,
                           uint64_t* offsets, uint32_t* types, uint64_t* lengths, int64_t max_chunks, uint64_t* next,
                           int32_t* status) {
    const uint64_t head = sizeof(gpuobs_chunk_header), covered = offsetof(gpuobs_chunk_header, crc32);
    int64_t n = 0;
    if (crc_table[0][1] == 0) make_tables();
    *status = WALK_END;
    while (offset < end) {
        if (n == max_chunks) {
            *status = WALK_FULL;
            break;
        }
        gpuobs_chunk_header h;
        if (size - offset < head) {
            *status = WALK_STOPPED;
            break;
        }
        memcpy(&h, buf + offset, head);
        uint64_t start = offset + head;
        if (h.length > size - start) {
            *status = WALK_STOPPED;
            break;
        }
        if (!(h.type < 64 && (unchecked >> h.type & 1))) {
            uint32_t crc = crc32_update(crc32_update(0, buf + offset, covered), buf + start, h.length);
            if (crc != h.crc32) {
                *status = WALK_STOPPED;
                break;
            }
        }
        offsets[n] = offset;
        types[n] = h.type;
        lengths[n] = h.length;
        n++;
        offset = start + h.length;
    }
    *next = offset;
    return n;
}
