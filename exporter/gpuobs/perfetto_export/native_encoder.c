/* The fast path of the slice encoder (slice_encoder.py): slice BEGIN/END packets,
 * protobuf-encoded in one pass of C. It writes the same bytes as the numpy path
 * (protowire.Rows), field for field, only without the intermediate arrays.
 * Loaded through cffi (ABI mode). Field numbers carry the names protowire.py
 * gives them (tests/test_protowire.py checks both against the Perfetto protos). */
#include <string.h>

#include "native_encoder.h"

enum { VARINT = 0, FIXED64 = 1, LEN = 2 }; /* wire types */

enum {
    TRACE_PACKET = 1,                  /* Trace.packet */
    PACKET_TIMESTAMP = 8,              /* TracePacket.timestamp */
    PACKET_TIMESTAMP_CLOCK_ID = 58,    /* TracePacket.timestamp_clock_id */
    PACKET_TRACK_EVENT = 11,           /* TracePacket.track_event */
    PACKET_SEQUENCE_ID = 10,           /* TracePacket.trusted_packet_sequence_id */
    PACKET_SEQUENCE_FLAGS = 13,        /* TracePacket.sequence_flags */
    TRACK_EVENT_TYPE = 9,              /* TrackEvent.type */
    TRACK_EVENT_TRACK_UUID = 11,       /* TrackEvent.track_uuid */
    TRACK_EVENT_NAME_IID = 10,         /* TrackEvent.name_iid */
    TRACK_EVENT_DEBUG_ANNOTATIONS = 4, /* TrackEvent.debug_annotations */
    ANNOTATION_NAME_IID = 1,           /* DebugAnnotation.name_iid */
    ANNOTATION_BOOL_VALUE = 2,         /* DebugAnnotation.bool_value */
    ANNOTATION_INT_VALUE = 4,          /* DebugAnnotation.int_value */
    ANNOTATION_STRING_VALUE = 6,       /* DebugAnnotation.string_value */
};

enum { TYPE_SLICE_BEGIN = 1, TYPE_SLICE_END = 2 }; /* TrackEvent.Type */
static inline size_t varint_size(uint64_t v) {
    return (size_t)((63 - __builtin_clzll(v | 1)) * 9 + 73) / 64; /* 7 bits a byte */
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
static inline size_t len_field_size(uint32_t field, size_t size) {
    return tag_size(field, LEN) + varint_size(size) + size;
}
static inline uint8_t* put_len_header(uint8_t* p, uint32_t field, size_t size) {
    return put_varint(put_tag(p, field, LEN), size);
}

static int64_t int_value(const struct gpuobs_arg* a, int64_t e) {
    const uint8_t* p = a->ints + e * a->int_stride;
    switch (a->int_size) {
        case 1: return a->int_signed ? (int64_t)(int8_t)*p : (int64_t)*p;
        case 2: {
            uint16_t v;
            memcpy(&v, p, 2);
            return a->int_signed ? (int64_t)(int16_t)v : (int64_t)v;
        }
        case 4: {
            uint32_t v;
            memcpy(&v, p, 4);
            return a->int_signed ? (int64_t)(int32_t)v : (int64_t)v;
        }
        default: {
            int64_t v;
            memcpy(&v, p, 8);
            return v;
        }
    }
}

/* An argument with its constant start (DebugAnnotation.name_iid and, for a bool,
 * its value) encoded once. */
struct arg_info {
    struct gpuobs_arg a;
    uint8_t head[24];
    size_t head_size;
};

static void prepare_arg(struct arg_info* info, const struct gpuobs_arg* a) {
    info->a = *a;
    uint8_t* p = put_varint_field(info->head, ANNOTATION_NAME_IID, a->name_iid);
    if (a->kind == GPUOBS_ARG_BOOL) p = put_varint_field(p, ANNOTATION_BOOL_VALUE, 1);
    info->head_size = (size_t)(p - info->head);
}

/* What one packet holds, worked out once and used to measure and to write it. */
struct packet_plan {
    int begin;
    int64_t slice;
    size_t track_event; /* TrackEvent body size */
    size_t packet;      /* TracePacket body size */
    size_t flows;
    uint64_t value[GPUOBS_ENCODER_MAX_ARGS]; /* GPUOBS_ARG_INT: the value */
    size_t body[GPUOBS_ENCODER_MAX_ARGS];    /* DebugAnnotation body size; 0: not on this packet */
};

static void plan_packet(const struct gpuobs_slice_packets* s, const struct arg_info* args, size_t i,
                        struct packet_plan* pl) {
    const int64_t e = s->slice[i];
    pl->begin = s->begin[i] != 0;
    pl->slice = e;
    size_t te = varint_field_size(TRACK_EVENT_TYPE, pl->begin ? TYPE_SLICE_BEGIN : TYPE_SLICE_END);
    if (s->track[i]) te += varint_field_size(TRACK_EVENT_TRACK_UUID, s->track[i]);
    pl->flows = 0;
    if (pl->begin) {
        te += varint_field_size(TRACK_EVENT_NAME_IID, s->name_iid[e]);
        for (size_t k = 0; k < s->n_args; ++k) {
            const struct gpuobs_arg* a = &args[k].a;
            size_t body = 0; /* 0: not on this packet */
            if (a->present == NULL || a->present[e]) {
                if (a->kind == GPUOBS_ARG_INT) {
                    const int64_t v = int_value(a, e);
                    pl->value[k] = (uint64_t)v;
                    if (v >= a->at_least)
                        body = args[k].head_size + varint_field_size(ANNOTATION_INT_VALUE, (uint64_t)v);
                } else if (a->kind == GPUOBS_ARG_STRING) {
                    body = args[k].head_size + len_field_size(ANNOTATION_STRING_VALUE, (size_t)a->lengths[e]);
                } else {
                    body = args[k].head_size;
                }
            }
            pl->body[k] = body;
            if (body) te += len_field_size(TRACK_EVENT_DEBUG_ANNOTATIONS, body);
        }
        if (s->flow_field) {
            const int64_t c = s->flow_counts[e];
            pl->flows = c < (int64_t)s->flow_width ? (size_t)c : s->flow_width;
            te += pl->flows * (tag_size(s->flow_field, FIXED64) + 8);
        }
    }
    pl->track_event = te;
    pl->packet = varint_field_size(PACKET_TIMESTAMP, s->ts[i]) +
                 (s->clock_id ? varint_field_size(PACKET_TIMESTAMP_CLOCK_ID, s->clock_id) : 0) +
                 len_field_size(PACKET_TRACK_EVENT, te) + varint_field_size(PACKET_SEQUENCE_ID, s->seq[i]) +
                 (s->begin_flags && pl->begin ? varint_field_size(PACKET_SEQUENCE_FLAGS, s->begin_flags) : 0);
}

static uint8_t* put_packet(uint8_t* p, const struct gpuobs_slice_packets* s, const struct arg_info* args, size_t i,
                           const struct packet_plan* pl) {
    const int64_t e = pl->slice;
    p = put_len_header(p, TRACE_PACKET, pl->packet);
    p = put_varint_field(p, PACKET_TIMESTAMP, s->ts[i]);
    if (s->clock_id) p = put_varint_field(p, PACKET_TIMESTAMP_CLOCK_ID, s->clock_id);
    p = put_len_header(p, PACKET_TRACK_EVENT, pl->track_event);
    p = put_varint_field(p, TRACK_EVENT_TYPE, pl->begin ? TYPE_SLICE_BEGIN : TYPE_SLICE_END);
    if (s->track[i]) p = put_varint_field(p, TRACK_EVENT_TRACK_UUID, s->track[i]);
    if (pl->begin) {
        p = put_varint_field(p, TRACK_EVENT_NAME_IID, s->name_iid[e]);
        for (size_t k = 0; k < s->n_args; ++k) {
            const struct gpuobs_arg* a = &args[k].a;
            if (!pl->body[k]) continue;
            p = put_len_header(p, TRACK_EVENT_DEBUG_ANNOTATIONS, pl->body[k]);
            for (size_t b = 0; b < args[k].head_size; ++b) *p++ = args[k].head[b]; /* a few bytes: no memcpy call */
            if (a->kind == GPUOBS_ARG_INT) {
                p = put_varint_field(p, ANNOTATION_INT_VALUE, pl->value[k]);
            } else if (a->kind == GPUOBS_ARG_STRING) {
                const size_t n = (size_t)a->lengths[e];
                p = put_len_header(p, ANNOTATION_STRING_VALUE, n);
                memcpy(p, a->chars + a->starts[e], n);
                p += n;
            }
        }
        for (size_t k = 0; k < pl->flows; ++k) {
            uint64_t v = s->flows[(size_t)e * s->flow_width + k];
            p = put_tag(p, s->flow_field, FIXED64);
            for (int b = 0; b < 8; ++b, v >>= 8) *p++ = (uint8_t)v; /* little-endian */
        }
    }
    p = put_varint_field(p, PACKET_SEQUENCE_ID, s->seq[i]);
    if (s->begin_flags && pl->begin) p = put_varint_field(p, PACKET_SEQUENCE_FLAGS, s->begin_flags);
    return p;
}

/* native_encoder.h says what it returns. */
size_t gpuobs_encode_slices(uint8_t* out, const struct gpuobs_slice_packets* packets) {
    /* Local copies: the compiler need not reload them after every byte written. */
    const struct gpuobs_slice_packets s = *packets;
    struct arg_info args[GPUOBS_ENCODER_MAX_ARGS];
    if (s.n_args > GPUOBS_ENCODER_MAX_ARGS) return 0;
    for (size_t k = 0; k < s.n_args; ++k) prepare_arg(&args[k], &s.args[k]);
    struct packet_plan plan;
    size_t total = 0;
    uint8_t* p = out;
    for (size_t i = 0; i < s.n; ++i) {
        plan_packet(&s, args, i, &plan);
        total += len_field_size(TRACE_PACKET, plan.packet);
        if (out != NULL) p = put_packet(p, &s, args, i, &plan);
    }
    return total;
}

/* native_encoder.h says what it does. */
long gpuobs_assign_lanes(size_t n, const int64_t* group, const uint64_t* start, const uint64_t* end, int64_t* lane_out,
                         uint64_t* lane_free_at, long max_lanes) {
    long width = 0, used = 0;
    for (size_t i = 0; i < n; ++i) {
        if (i == 0 || group[i] != group[i - 1]) used = 0; /* a new group: no lane taken yet */
        long k = 0;
        while (k < used && lane_free_at[k] > start[i]) ++k;
        if (k == used) {
            if (used == max_lanes) return GPUOBS_LANES_TOO_MANY;
            ++used;
        }
        lane_free_at[k] = end[i];
        lane_out[i] = k;
        if (used > width) width = used;
    }
    return width;
}
