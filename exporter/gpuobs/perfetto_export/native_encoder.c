/* The fast path of the slice encoder (slice_encoder.py): slice BEGIN/END packets,
 * protobuf-encoded in one pass of C. It writes the same bytes as the numpy path
 * (protowire.Rows), field for field, only without the intermediate arrays.
 * Loaded through cffi (ABI mode). Field numbers carry the names protowire.py
 * gives them (tests/test_protowire.py checks both against the Perfetto protos). */
#include <stddef.h>
#include <stdint.h>

enum { VARINT = 0, FIXED64 = 1, LEN = 2 }; /* wire types */

enum {
    TRACE_PACKET = 1,                      /* Trace.packet */
    PACKET_TIMESTAMP = 8,                  /* TracePacket.timestamp */
    PACKET_TIMESTAMP_CLOCK_ID = 58,        /* TracePacket.timestamp_clock_id */
    PACKET_TRACK_EVENT = 11,               /* TracePacket.track_event */
    PACKET_SEQUENCE_ID = 10,               /* TracePacket.trusted_packet_sequence_id */
    PACKET_SEQUENCE_FLAGS = 13,            /* TracePacket.sequence_flags */
    TRACK_EVENT_TYPE = 9,                  /* TrackEvent.type */
    TRACK_EVENT_TRACK_UUID = 11,           /* TrackEvent.track_uuid */
    TRACK_EVENT_NAME_IID = 10,             /* TrackEvent.name_iid */
    TRACK_EVENT_DEBUG_ANNOTATIONS = 4,     /* TrackEvent.debug_annotations */
    ANNOTATION_NAME_IID = 1,               /* DebugAnnotation.name_iid */
    ANNOTATION_BOOL_VALUE = 2,             /* DebugAnnotation.bool_value */
    ANNOTATION_INT_VALUE = 4,              /* DebugAnnotation.int_value */
    ANNOTATION_STRING_VALUE = 6,           /* DebugAnnotation.string_value */
};

enum { TYPE_SLICE_BEGIN = 1, TYPE_SLICE_END = 2 }; /* TrackEvent.Type */
enum { ARG_INT = 0, ARG_BOOL = 1, ARG_STRING = 2 };

/* One debug annotation on the BEGIN of every slice where present[slice] (every
 * slice where present is NULL). */
struct gpuobs_arg {
    uint64_t name_iid;
    int32_t kind;            /* ARG_INT, ARG_BOOL (true) or ARG_STRING */
    const uint8_t* present;  /* per slice */
    const int64_t* ints;     /* ARG_INT: per slice */
    const uint8_t* chars;    /* ARG_STRING: slice e's value is chars[starts[e] : starts[e] + lengths[e]] */
    const int64_t* starts;
    const int64_t* lengths;
};

/* Packets are indexed by i, per-slice columns by e = slice[i]. */
struct gpuobs_slice_packets {
    size_t n;                    /* packets */
    const int64_t* slice;        /* per packet: its slice */
    const uint8_t* begin;        /* per packet: BEGIN (1) or END (0) */
    const uint64_t* ts;          /* per packet */
    const uint64_t* track;       /* per packet; 0: no track_uuid (the sequence's default track) */
    const uint64_t* seq;         /* per packet */
    const uint64_t* name_iid;    /* per slice, on BEGINs */
    uint64_t clock_id;           /* timestamp_clock_id of every packet; 0: none */
    uint64_t begin_flags;        /* sequence_flags of BEGINs (which alone use interned data); 0: none */
    size_t n_args;
    const struct gpuobs_arg* args;
    uint32_t flow_field;         /* TrackEvent.flow_ids or .terminating_flow_ids; 0: no flows */
    size_t flow_width;
    const uint64_t* flows;       /* per slice, flow_width values, of which flow_counts[e] are used */
    const int64_t* flow_counts;
};

static inline size_t varint_size(uint64_t v) {
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        ++n;
    }
    return n;
}

static inline uint8_t* put_varint(uint8_t* p, uint64_t v) {
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

static inline uint64_t key(uint32_t field, uint32_t wire) { return ((uint64_t)field << 3) | wire; }
static inline size_t tag_size(uint32_t field, uint32_t wire) { return varint_size(key(field, wire)); }
static inline uint8_t* put_tag(uint8_t* p, uint32_t field, uint32_t wire) { return put_varint(p, key(field, wire)); }

/* A varint field: tag and value. */
static inline size_t varint_field_size(uint32_t field, uint64_t v) { return tag_size(field, VARINT) + varint_size(v); }
static inline uint8_t* put_varint_field(uint8_t* p, uint32_t field, uint64_t v) {
    return put_varint(put_tag(p, field, VARINT), v);
}

/* A length-delimited field's tag and length, before its body of `size` bytes. */
static inline size_t len_field_size(uint32_t field, size_t size) { return tag_size(field, LEN) + varint_size(size) + size; }
static inline uint8_t* put_len_header(uint8_t* p, uint32_t field, size_t size) {
    return put_varint(put_tag(p, field, LEN), size);
}

/* The DebugAnnotation body of arg a on slice e. */
static size_t arg_body_size(const struct gpuobs_arg* a, int64_t e) {
    size_t s = varint_field_size(ANNOTATION_NAME_IID, a->name_iid);
    switch (a->kind) {
    case ARG_INT: return s + varint_field_size(ANNOTATION_INT_VALUE, (uint64_t)a->ints[e]);
    case ARG_BOOL: return s + varint_field_size(ANNOTATION_BOOL_VALUE, 1);
    default: return s + len_field_size(ANNOTATION_STRING_VALUE, (size_t)a->lengths[e]);
    }
}

static uint8_t* put_arg(uint8_t* p, const struct gpuobs_arg* a, int64_t e) {
    p = put_len_header(p, TRACK_EVENT_DEBUG_ANNOTATIONS, arg_body_size(a, e));
    p = put_varint_field(p, ANNOTATION_NAME_IID, a->name_iid);
    switch (a->kind) {
    case ARG_INT: return put_varint_field(p, ANNOTATION_INT_VALUE, (uint64_t)a->ints[e]);
    case ARG_BOOL: return put_varint_field(p, ANNOTATION_BOOL_VALUE, 1);
    default: {
        const size_t n = (size_t)a->lengths[e];
        const uint8_t* src = a->chars + a->starts[e];
        p = put_len_header(p, ANNOTATION_STRING_VALUE, n);
        for (size_t k = 0; k < n; ++k) *p++ = src[k];
        return p;
    }
    }
}

static inline int has_arg(const struct gpuobs_arg* a, int64_t e) { return a->present == NULL || a->present[e]; }

static inline int64_t flow_count(const struct gpuobs_slice_packets* s, int64_t e) {
    if (!s->flow_field) return 0;
    const int64_t c = s->flow_counts[e];
    return c < (int64_t)s->flow_width ? c : (int64_t)s->flow_width;
}

/* The TrackEvent body of packet i. */
static size_t track_event_size(const struct gpuobs_slice_packets* s, size_t i) {
    const int64_t e = s->slice[i];
    size_t te = varint_field_size(TRACK_EVENT_TYPE, s->begin[i] ? TYPE_SLICE_BEGIN : TYPE_SLICE_END);
    if (s->track[i]) te += varint_field_size(TRACK_EVENT_TRACK_UUID, s->track[i]);
    if (s->begin[i]) {
        te += varint_field_size(TRACK_EVENT_NAME_IID, s->name_iid[e]);
        for (size_t k = 0; k < s->n_args; ++k)
            if (has_arg(&s->args[k], e)) te += len_field_size(TRACK_EVENT_DEBUG_ANNOTATIONS, arg_body_size(&s->args[k], e));
        te += (size_t)flow_count(s, e) * (tag_size(s->flow_field, FIXED64) + 8);
    }
    return te;
}

static size_t packet_size(const struct gpuobs_slice_packets* s, size_t i, size_t te) {
    return varint_field_size(PACKET_TIMESTAMP, s->ts[i]) +
           (s->clock_id ? varint_field_size(PACKET_TIMESTAMP_CLOCK_ID, s->clock_id) : 0) +
           len_field_size(PACKET_TRACK_EVENT, te) + varint_field_size(PACKET_SEQUENCE_ID, s->seq[i]) +
           (s->begin_flags && s->begin[i] ? varint_field_size(PACKET_SEQUENCE_FLAGS, s->begin_flags) : 0);
}

/* Encodes the packets as Trace.packet entries into out (NULL: only measure).
 * Returns the number of bytes. */
size_t gpuobs_encode_slices(uint8_t* out, const struct gpuobs_slice_packets* s) {
    size_t total = 0;
    uint8_t* p = out;
    for (size_t i = 0; i < s->n; ++i) {
        const int64_t e = s->slice[i];
        const size_t te = track_event_size(s, i);
        const size_t packet = packet_size(s, i, te);
        total += len_field_size(TRACE_PACKET, packet);
        if (out == NULL) continue;
        p = put_len_header(p, TRACE_PACKET, packet);
        p = put_varint_field(p, PACKET_TIMESTAMP, s->ts[i]);
        if (s->clock_id) p = put_varint_field(p, PACKET_TIMESTAMP_CLOCK_ID, s->clock_id);
        p = put_len_header(p, PACKET_TRACK_EVENT, te);
        p = put_varint_field(p, TRACK_EVENT_TYPE, s->begin[i] ? TYPE_SLICE_BEGIN : TYPE_SLICE_END);
        if (s->track[i]) p = put_varint_field(p, TRACK_EVENT_TRACK_UUID, s->track[i]);
        if (s->begin[i]) {
            p = put_varint_field(p, TRACK_EVENT_NAME_IID, s->name_iid[e]);
            for (size_t k = 0; k < s->n_args; ++k)
                if (has_arg(&s->args[k], e)) p = put_arg(p, &s->args[k], e);
            const int64_t flows = flow_count(s, e);
            for (int64_t k = 0; k < flows; ++k) {
                uint64_t v = s->flows[(size_t)e * s->flow_width + (size_t)k];
                p = put_tag(p, s->flow_field, FIXED64);
                for (int b = 0; b < 8; ++b, v >>= 8) *p++ = (uint8_t)v; /* little-endian */
            }
        }
        p = put_varint_field(p, PACKET_SEQUENCE_ID, s->seq[i]);
        if (s->begin_flags && s->begin[i]) p = put_varint_field(p, PACKET_SEQUENCE_FLAGS, s->begin_flags);
    }
    return total;
}

/* First-fit lanes for half-open intervals sorted by (group, start): each takes
 * the lowest lane of its group that is free at its start (touching intervals
 * share a lane). lanes.py maps zero-length slices to such intervals. Returns the
 * most lanes any group needed, or -1 past max_lanes. */
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
