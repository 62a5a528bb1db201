/* Block begin/end packets, protobuf-encoded in one pass of C: the same bytes the
 * numpy path (blocks.py with protowire.Rows) produces, field for field, only
 * without the intermediate arrays. Loaded through cffi (ABI mode). */
#include <stddef.h>
#include <stdint.h>

static size_t varint_size(uint64_t v) {
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        ++n;
    }
    return n;
}

static uint8_t* put_varint(uint8_t* p, uint64_t v) {
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

/* One debug annotation {name_iid: 1, int_value: 4}: its body size. */
static size_t ann_size(uint64_t name_iid, int64_t value) {
    return 1 + varint_size(name_iid) + 1 + varint_size((uint64_t)value);
}

struct packet_sizes {
    size_t te;      /* TrackEvent body */
    size_t packet;  /* TracePacket body */
};

enum { ARG_BLOCK = 1, ARG_LAUNCH = 2, ARG_BLOCK_Y = 3, ARG_BLOCK_Z = 4 };

/* Per-packet columns are indexed by i; per-block columns (name_iid, bx, by, bz,
 * launch) by e = event[i], the block the packet belongs to. */
static struct packet_sizes sizes(size_t i, int64_t e, const uint64_t* ts, const uint8_t* begin,
                                 const uint64_t* track, const uint64_t* name_iid, const uint64_t* seq,
                                 const uint32_t* bx, const uint16_t* by, const uint16_t* bz, const int64_t* launch,
                                 int with_args, uint64_t flags) {
    struct packet_sizes s;
    size_t te = 2; /* type: tag + 1-byte value (1 or 2) */
    if (track[i]) te += 1 + varint_size(track[i]);
    if (begin[i]) {
        te += 1 + varint_size(name_iid[e]);
        if (with_args) {
            size_t a = ann_size(ARG_BLOCK, bx[e]);
            te += 1 + varint_size(a) + a;
            if (by[e] > 0) { a = ann_size(ARG_BLOCK_Y, by[e]); te += 1 + varint_size(a) + a; }
            if (bz[e] > 0) { a = ann_size(ARG_BLOCK_Z, bz[e]); te += 1 + varint_size(a) + a; }
            if (launch[e] >= 0) { a = ann_size(ARG_LAUNCH, launch[e]); te += 1 + varint_size(a) + a; }
        }
    }
    s.te = te;
    /* Only begins use interned data (the name), so only they carry the sequence flag. */
    s.packet = 1 + varint_size(ts[i]) + 1 + varint_size(te) + te + 1 + varint_size(seq[i]) +
               (flags && begin[i] ? 1 + varint_size(flags) : 0);
    return s;
}

static uint8_t* put_ann(uint8_t* p, uint64_t name_iid, int64_t value) {
    *p++ = 0x22; /* debug_annotations = 4, length-delimited */
    p = put_varint(p, ann_size(name_iid, value));
    *p++ = 0x08; /* name_iid = 1 */
    p = put_varint(p, name_iid);
    *p++ = 0x20; /* int_value = 4 */
    return put_varint(p, (uint64_t)value);
}

/* Encodes n packets as Trace.packet entries into out (NULL: only measure).
 * Returns the number of bytes. */
size_t gpuobs_encode_blocks(uint8_t* out, size_t n, const int64_t* event, const uint64_t* ts,
                            const uint8_t* begin, const uint64_t* track, const uint64_t* name_iid,
                            const uint64_t* seq, const uint32_t* bx, const uint16_t* by, const uint16_t* bz,
                            const int64_t* launch, int with_args, uint64_t flags) {
    size_t total = 0;
    uint8_t* p = out;
    for (size_t i = 0; i < n; ++i) {
        const int64_t e = event[i];
        struct packet_sizes s = sizes(i, e, ts, begin, track, name_iid, seq, bx, by, bz, launch, with_args, flags);
        total += 1 + varint_size(s.packet) + s.packet;
        if (out == NULL) continue;
        *p++ = 0x0a; /* Trace.packet = 1 */
        p = put_varint(p, s.packet);
        *p++ = 0x40; /* timestamp = 8 */
        p = put_varint(p, ts[i]);
        *p++ = 0x5a; /* track_event = 11 */
        p = put_varint(p, s.te);
        *p++ = 0x48; /* type = 9 */
        *p++ = begin[i] ? 1 : 2;
        if (track[i]) {
            *p++ = 0x58; /* track_uuid = 11 */
            p = put_varint(p, track[i]);
        }
        if (begin[i]) {
            *p++ = 0x50; /* name_iid = 10 */
            p = put_varint(p, name_iid[e]);
            if (with_args) {
                p = put_ann(p, ARG_BLOCK, bx[e]);
                if (by[e] > 0) p = put_ann(p, ARG_BLOCK_Y, by[e]);
                if (bz[e] > 0) p = put_ann(p, ARG_BLOCK_Z, bz[e]);
                if (launch[e] >= 0) p = put_ann(p, ARG_LAUNCH, launch[e]);
            }
        }
        *p++ = 0x50; /* trusted_packet_sequence_id = 10 */
        p = put_varint(p, seq[i]);
        if (flags && begin[i]) {
            *p++ = 0x68; /* sequence_flags = 13 */
            p = put_varint(p, flags);
        }
    }
    return total;
}

/* First-fit lanes for intervals sorted by (group, start): each takes the lowest
 * lane of its group that is free at its start (touching intervals share a lane).
 * Returns the most lanes any group needed, or -1 past max_lanes. */
long gpuobs_assign_lanes(size_t n, const int64_t* group, const uint64_t* start, const uint64_t* end,
                         int64_t* lane_out, uint64_t* lane_free_at, long max_lanes) {
    long width = 0, used = 0;
    for (size_t i = 0; i < n; ++i) {
        if (i == 0 || group[i] != group[i - 1]) used = 0; /* a new group: no lane taken yet */
        long k = 0;
        while (k < used && lane_free_at[k] > start[i]) ++k;
        if (k == used) {
            if (used == max_lanes) return -1;
            ++used;
        }
        lane_free_at[k] = end[i];
        lane_out[i] = k;
        if (used > width) width = used;
    }
    return width;
}
