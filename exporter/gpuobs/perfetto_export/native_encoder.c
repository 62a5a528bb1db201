/* The fast path of the slice encoder (slice_encoder.py): slice BEGIN/END packets,
 * protobuf-encoded in one pass of C. It writes the same bytes as the numpy path
 * (protowire.Rows), field for field, only without the intermediate arrays.
 * Loaded through cffi (ABI mode). Field numbers carry the names protowire.py
 * gives them (tests/test_protowire.py checks both against the Perfetto protos). */
#include <stdlib.h>
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

/* A string argument's value for slice e: its own (starts[e], lengths[e]), or with ints
 * a choice, (starts[v], lengths[v]) for v the integer at e. */
static inline int64_t string_index(const struct gpuobs_arg* a, int64_t e) { return a->ints ? int_value(a, e) : e; }

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
                    body = args[k].head_size +
                           len_field_size(ANNOTATION_STRING_VALUE, (size_t)a->lengths[string_index(a, e)]);
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
                const int64_t v = string_index(a, e);
                const size_t n = (size_t)a->lengths[v];
                p = put_len_header(p, ANNOTATION_STRING_VALUE, n);
                memcpy(p, a->chars + a->starts[v], n);
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

/* A buffer of malloc's that grows as packets are written into it: one pass over the
 * packets, none that only measures them. */
struct grown {
    uint8_t* data;
    size_t size, capacity;
};

static int grown_start(struct grown* g, size_t capacity) {
    g->size = 0;
    g->capacity = capacity ? capacity : 1;
    g->data = malloc(g->capacity);
    return g->data != NULL;
}

/* Room for `more` bytes past those written (doubling: realloc moves big blocks by
 * remapping, not copying); 0 where memory runs out. */
static int grown_room(struct grown* g, size_t more) {
    if (more <= g->capacity - g->size) return 1;
    size_t capacity = g->capacity * 2;
    if (capacity - g->size < more) capacity = g->size + more;
    uint8_t* data = realloc(g->data, capacity);
    if (data == NULL) return 0;
    g->data = data;
    g->capacity = capacity;
    return 1;
}

/* The buffer cut to what was written (the rest given back), its size at *size. */
static uint8_t* grown_end(struct grown* g, size_t* size) {
    uint8_t* data = realloc(g->data, g->size ? g->size : 1);
    *size = g->size;
    return data ? data : g->data;
}

static uint8_t* grown_fail(struct grown* g, size_t* size) {
    free(g->data);
    *size = 0;
    return NULL;
}

/* native_encoder.h says what it returns. */
uint8_t* gpuobs_encode_slices_grown(const struct gpuobs_slice_packets* packets, size_t capacity, size_t* size) {
    const struct gpuobs_slice_packets s = *packets; /* as in gpuobs_encode_slices */
    struct arg_info args[GPUOBS_ENCODER_MAX_ARGS];
    struct grown g;
    if (!grown_start(&g, capacity)) return grown_fail(&g, size);
    if (s.n_args > GPUOBS_ENCODER_MAX_ARGS) return grown_end(&g, size); /* nothing, as gpuobs_encode_slices */
    for (size_t k = 0; k < s.n_args; ++k) prepare_arg(&args[k], &s.args[k]);
    struct packet_plan plan;
    for (size_t i = 0; i < s.n; ++i) {
        plan_packet(&s, args, i, &plan);
        const size_t bytes = len_field_size(TRACE_PACKET, plan.packet);
        if (!grown_room(&g, bytes)) return grown_fail(&g, size);
        put_packet(g.data + g.size, &s, args, i, &plan);
        g.size += bytes;
    }
    return grown_end(&g, size);
}

void gpuobs_free(void* data) { free(data); }

/* TrackDescriptor packets (TraceWriter.track_batch). Field numbers in a named enum:
 * test_protowire matches the anonymous enums' names to protowire.py, which does not
 * name these (trace_writer.py does); test_track_batch checks these packets byte for
 * byte against the protobuf messages that TraceWriter.track serializes. */
enum track_descriptor_fields {
    PACKET_TRACK_DESCRIPTOR_FIELD = 60, /* TracePacket.track_descriptor */
    TRACK_UUID_FIELD = 1,               /* TrackDescriptor.uuid */
    TRACK_NAME_FIELD = 2,               /* TrackDescriptor.name */
    TRACK_PARENT_UUID_FIELD = 5,        /* TrackDescriptor.parent_uuid */
    TRACK_RANK_FIELD = 12,              /* TrackDescriptor.sibling_order_rank */
    TRACK_MERGE_BEHAVIOR_FIELD = 15,    /* TrackDescriptor.sibling_merge_behavior */
    TRACK_MERGE_KEY_FIELD = 16,         /* TrackDescriptor.sibling_merge_key */
    MERGE_BY_SIBLING_MERGE_KEY = 3,     /* SIBLING_MERGE_BEHAVIOR_BY_SIBLING_MERGE_KEY */
    INTERNED_EVENT_NAMES_FIELD = 2,     /* InternedData.event_names (host_tracks.py's interned packet) */
    EVENT_NAME_IID_FIELD = 1,           /* EventName.iid */
    EVENT_NAME_NAME_FIELD = 2           /* EventName.name */
};

/* The decimal digits of v: from its bit length (log10(2) ~ 1233 / 4096), then one compare
 * (v | 1 has as many digits as v: a power of ten is even). */
static inline size_t decimal_size(uint64_t v) {
    static const uint64_t power[20] = {1ULL,
                                       10ULL,
                                       100ULL,
                                       1000ULL,
                                       10000ULL,
                                       100000ULL,
                                       1000000ULL,
                                       10000000ULL,
                                       100000000ULL,
                                       1000000000ULL,
                                       10000000000ULL,
                                       100000000000ULL,
                                       1000000000000ULL,
                                       10000000000000ULL,
                                       100000000000000ULL,
                                       1000000000000000ULL,
                                       10000000000000000ULL,
                                       100000000000000000ULL,
                                       1000000000000000000ULL,
                                       10000000000000000000ULL};
    v |= 1;
    const size_t t = (size_t)((64 - __builtin_clzll(v)) * 1233) >> 12;
    return t + (v >= power[t]);
}

/* v's decimal digits written backwards from `end`, two at a time. */
static inline void put_decimal(uint8_t* end, uint64_t v) {
    static const char pairs[] =
        "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
        "4041424344454647484950515253545556575859606162636465666768697071727374757677787980"
        "81828384858687888990919293949596979899";
    while (v >= 100) {
        const unsigned r = (unsigned)(v % 100);
        v /= 100;
        end -= 2;
        memcpy(end, pairs + 2 * r, 2);
    }
    if (v >= 10) {
        memcpy(end - 2, pairs + 2 * v, 2);
    } else {
        end[-1] = (uint8_t)('0' + v);
    }
}

/* Text i of a pool, or of its form where forms give it one (struct gpuobs_text_forms):
 * its size, and the text written at p. */
static inline size_t text_size(const struct gpuobs_text_forms* f, const int64_t* lengths, size_t i) {
    const unsigned k = f ? f->form[i] : 0;
    if (!k) return (size_t)lengths[i];
    return (size_t)(f->prefix_lengths[k - 1] + f->suffix_lengths[k - 1]) + decimal_size(f->numbers[i]);
}
static inline uint8_t* put_text(uint8_t* p, const struct gpuobs_text_forms* f, const uint8_t* chars,
                                const int64_t* starts, size_t i, size_t size) {
    const unsigned k = f ? f->form[i] : 0;
    if (!k) {
        if (size) memcpy(p, chars + starts[i], size); /* an empty pool may have no address */
        return p + size;
    }
    const size_t prefix = (size_t)f->prefix_lengths[k - 1], suffix = (size_t)f->suffix_lengths[k - 1];
    if (prefix) memcpy(p, f->chars + f->prefix_starts[k - 1], prefix);
    uint8_t* digits_end = p + size - suffix;
    put_decimal(digits_end, f->numbers[i]);
    if (suffix) memcpy(digits_end, f->chars + f->suffix_starts[k - 1], suffix);
    return p + size;
}

/* The TrackDescriptor of track i, its size (the message's body). */
static inline size_t track_descriptor_size(const struct gpuobs_track_descriptors* t, size_t i, size_t name,
                                           size_t merge_key, int merge) {
    size_t size = varint_field_size(TRACK_UUID_FIELD, t->first_uuid + i) + len_field_size(TRACK_NAME_FIELD, name);
    if (t->parents) size += varint_field_size(TRACK_PARENT_UUID_FIELD, t->parents[i]);
    if (t->ranks) size += varint_field_size(TRACK_RANK_FIELD, t->ranks[i]);
    if (merge)
        size += varint_field_size(TRACK_MERGE_BEHAVIOR_FIELD, MERGE_BY_SIBLING_MERGE_KEY) +
                len_field_size(TRACK_MERGE_KEY_FIELD, merge_key);
    return size;
}

/* Track i's packet: its sizes (the packet's body, the descriptor's, the name's and the merge key's). */
struct track_plan {
    int merge;
    size_t name, merge_key, desc, packet;
};

static inline void plan_track(const struct gpuobs_track_descriptors* t, size_t i, struct track_plan* pl) {
    pl->merge = t->merge_keys && (t->merged == NULL || t->merged[i]);
    pl->name = text_size(t->name_forms, t->name_lengths, i);
    pl->merge_key = pl->merge ? text_size(t->merge_forms, t->merge_lengths, i) : 0;
    pl->desc = track_descriptor_size(t, i, pl->name, pl->merge_key, pl->merge);
    pl->packet = len_field_size(PACKET_TRACK_DESCRIPTOR_FIELD, pl->desc);
}

static inline uint8_t* put_track(uint8_t* p, const struct gpuobs_track_descriptors* t, size_t i,
                                 const struct track_plan* pl) {
    p = put_len_header(p, TRACE_PACKET, pl->packet);
    p = put_len_header(p, PACKET_TRACK_DESCRIPTOR_FIELD, pl->desc);
    p = put_varint_field(p, TRACK_UUID_FIELD, t->first_uuid + i);
    p = put_len_header(p, TRACK_NAME_FIELD, pl->name);
    p = put_text(p, t->name_forms, t->name_chars, t->name_starts, i, pl->name);
    if (t->parents) p = put_varint_field(p, TRACK_PARENT_UUID_FIELD, t->parents[i]);
    if (t->ranks) p = put_varint_field(p, TRACK_RANK_FIELD, t->ranks[i]);
    if (pl->merge) {
        p = put_varint_field(p, TRACK_MERGE_BEHAVIOR_FIELD, MERGE_BY_SIBLING_MERGE_KEY);
        p = put_len_header(p, TRACK_MERGE_KEY_FIELD, pl->merge_key);
        p = put_text(p, t->merge_forms, t->merge_chars, t->merge_starts, i, pl->merge_key);
    }
    return p;
}

/* native_encoder.h says what it returns. */
size_t gpuobs_encode_track_descriptors(uint8_t* out, const struct gpuobs_track_descriptors* descriptors) {
    const struct gpuobs_track_descriptors t = *descriptors; /* a local copy, as in gpuobs_encode_slices */
    size_t total = 0;
    uint8_t* p = out;
    struct track_plan plan;
    for (size_t i = 0; i < t.n; ++i) {
        plan_track(&t, i, &plan);
        total += len_field_size(TRACE_PACKET, plan.packet);
        if (out != NULL) p = put_track(p, &t, i, &plan);
    }
    return total;
}

/* native_encoder.h says what it returns. */
uint8_t* gpuobs_encode_track_descriptors_grown(const struct gpuobs_track_descriptors* descriptors, size_t capacity,
                                               size_t* size) {
    const struct gpuobs_track_descriptors t = *descriptors;
    struct grown g;
    if (!grown_start(&g, capacity)) return grown_fail(&g, size);
    struct track_plan plan;
    for (size_t i = 0; i < t.n; ++i) {
        plan_track(&t, i, &plan);
        const size_t bytes = len_field_size(TRACE_PACKET, plan.packet);
        if (!grown_room(&g, bytes)) return grown_fail(&g, size);
        put_track(g.data + g.size, &t, i, &plan);
        g.size += bytes;
    }
    return grown_end(&g, size);
}

/* One track of a lane-track pass: uuid, name (text `text` of forms, else of the pool
 * chars/starts/lengths), parent, rank and, where merge, the merge key merge_prefix +
 * merge_number: the bytes plan_track/put_track write for such a track_batch row. */
struct lane_track_row {
    uint64_t uuid, parent, rank, merge_number;
    const struct gpuobs_text_forms* forms;
    const uint8_t* chars;
    const int64_t *starts, *lengths;
    size_t text; /* the name's index in forms and pool */
    int merge;
};

static inline size_t lane_row_bytes(const struct gpuobs_lane_tracks* t, const struct lane_track_row* r,
                                    struct track_plan* pl) {
    pl->merge = r->merge;
    pl->name = text_size(r->forms, r->lengths, r->text);
    pl->merge_key = r->merge ? t->merge_prefix_length + decimal_size(r->merge_number) : 0;
    pl->desc = varint_field_size(TRACK_UUID_FIELD, r->uuid) + len_field_size(TRACK_NAME_FIELD, pl->name) +
               varint_field_size(TRACK_PARENT_UUID_FIELD, r->parent) + varint_field_size(TRACK_RANK_FIELD, r->rank);
    if (r->merge)
        pl->desc += varint_field_size(TRACK_MERGE_BEHAVIOR_FIELD, MERGE_BY_SIBLING_MERGE_KEY) +
                    len_field_size(TRACK_MERGE_KEY_FIELD, pl->merge_key);
    pl->packet = len_field_size(PACKET_TRACK_DESCRIPTOR_FIELD, pl->desc);
    return len_field_size(TRACE_PACKET, pl->packet);
}

static inline void put_lane_row(uint8_t* p, const struct gpuobs_lane_tracks* t, const struct lane_track_row* r,
                                const struct track_plan* pl) {
    p = put_len_header(p, TRACE_PACKET, pl->packet);
    p = put_len_header(p, PACKET_TRACK_DESCRIPTOR_FIELD, pl->desc);
    p = put_varint_field(p, TRACK_UUID_FIELD, r->uuid);
    p = put_len_header(p, TRACK_NAME_FIELD, pl->name);
    p = put_text(p, r->forms, r->chars, r->starts, r->text, pl->name);
    p = put_varint_field(p, TRACK_PARENT_UUID_FIELD, r->parent);
    p = put_varint_field(p, TRACK_RANK_FIELD, r->rank);
    if (r->merge) {
        p = put_varint_field(p, TRACK_MERGE_BEHAVIOR_FIELD, MERGE_BY_SIBLING_MERGE_KEY);
        p = put_len_header(p, TRACK_MERGE_KEY_FIELD, pl->merge_key);
        if (t->merge_prefix_length) memcpy(p, t->merge_prefix, t->merge_prefix_length);
        put_decimal(p + pl->merge_key, r->merge_number);
    }
}

/* Writes one row into g; 0 where memory runs out. */
static inline int lane_row(struct grown* g, const struct gpuobs_lane_tracks* t, const struct lane_track_row* r) {
    struct track_plan plan;
    const size_t bytes = lane_row_bytes(t, r, &plan);
    if (!grown_room(g, bytes)) return 0;
    put_lane_row(g->data + g->size, t, r, &plan);
    g->size += bytes;
    return 1;
}

/* native_encoder.h says what it returns. */
uint8_t* gpuobs_encode_lane_tracks_grown(struct gpuobs_lane_tracks* t, size_t capacity, size_t* size) {
    struct grown g;
    t->refused = 0;
    size_t made = t->processes_made;
    for (size_t j = 0; j < t->n; ++j) { /* checked before anything is written: the state stays as it was */
        const int64_t p = t->process[j];
        if (t->lanes[j] < 1 || p < 0 || (size_t)p >= t->n_processes || (size_t)p > made) {
            t->refused = 1;
            *size = 0;
            return NULL;
        }
        if ((size_t)p == made) ++made;
    }
    if (!grown_start(&g, capacity)) return grown_fail(&g, size);
    uint64_t uuid = t->next_uuid;
    size_t processes = t->processes_made, lane_tracks = 0;
    struct lane_track_row process = {
        .chars = t->process_chars, .starts = t->process_starts, .lengths = t->process_lengths, .parent = t->group_uuid};
    struct lane_track_row lane = {.forms = t->label_forms,
                                  .chars = t->label_chars,
                                  .starts = t->label_starts,
                                  .lengths = t->label_lengths,
                                  .merge = 1};
    for (size_t j = 0; j < t->n; ++j) {
        const size_t p = (size_t)t->process[j];
        if (p == processes) { /* met first: its track before its first group's lanes */
            process.uuid = uuid;
            process.rank = p;
            process.text = p;
            if (!lane_row(&g, t, &process)) return grown_fail(&g, size);
            t->process_uuids[p] = uuid++;
            ++processes;
        }
        lane.parent = t->process_uuids[p];
        lane.rank = lane.merge_number = t->ranks[j];
        lane.text = j;
        for (int64_t k = 0; k < t->lanes[j]; ++k) {
            lane.uuid = uuid;
            if (!lane_row(&g, t, &lane)) return grown_fail(&g, size);
            t->made[lane_tracks++] = uuid++;
        }
    }
    t->tracks = (size_t)(uuid - t->next_uuid);
    t->next_uuid = uuid;
    t->processes_made = processes;
    t->made_count = lane_tracks;
    return grown_end(&g, size);
}

size_t gpuobs_encode_interned_names(uint8_t* out, size_t n, uint64_t first_iid, const uint8_t* chars,
                                    const int64_t* starts, const int64_t* lengths, const uint8_t* present) {
    size_t total = 0;
    uint8_t* p = out;
    for (size_t i = 0; i < n; ++i) {
        const int named = present == NULL || present[i];
        const size_t name = named ? (size_t)lengths[i] : 0;
        const size_t entry = varint_field_size(EVENT_NAME_IID_FIELD, first_iid + i) +
                             (named ? len_field_size(EVENT_NAME_NAME_FIELD, name) : 0);
        total += len_field_size(INTERNED_EVENT_NAMES_FIELD, entry);
        if (out == NULL) continue;
        p = put_len_header(p, INTERNED_EVENT_NAMES_FIELD, entry);
        p = put_varint_field(p, EVENT_NAME_IID_FIELD, first_iid + i);
        if (!named) continue; /* a NULL StringIds value: no name field, as the message leaves it */
        p = put_len_header(p, EVENT_NAME_NAME_FIELD, name);
        if (name) memcpy(p, chars + starts[i], name);
        p += name;
    }
    return total;
}

/* native_encoder.h says what it does. */
size_t gpuobs_numbered(size_t n, const uint64_t* values, const uint8_t* prefix, size_t prefix_len,
                       const uint8_t* suffix, size_t suffix_len, int64_t* starts, int64_t* lengths, uint8_t* chars) {
    size_t total = 0;
    for (size_t i = 0; i < n; ++i) {
        if (chars == NULL) {
            const size_t size = prefix_len + decimal_size(values[i]) + suffix_len;
            starts[i] = (int64_t)total;
            lengths[i] = (int64_t)size;
            total += size;
            continue;
        }
        uint8_t* p = chars + starts[i];
        if (prefix_len) memcpy(p, prefix, prefix_len);
        uint8_t* digits_end = p + lengths[i] - suffix_len;
        put_decimal(digits_end, values[i]);
        if (suffix_len) memcpy(digits_end, suffix, suffix_len);
        total += (size_t)lengths[i];
    }
    return total;
}

/* First fit, the one rule of both lane passes: the lowest of the group's *used lanes
 * free at s (free_at[k] <= s), else a new one, busy from then until e; -1 where a new
 * one would pass max_lanes. */
static inline long first_fit(uint64_t* free_at, long* used, long max_lanes, uint64_t s, uint64_t e) {
    long k = 0;
    while (k < *used && free_at[k] > s) ++k;
    if (k == *used) {
        if (*used == max_lanes) return -1;
        ++*used;
    }
    free_at[k] = e;
    return k;
}

/* native_encoder.h says what it does. */
long gpuobs_assign_lanes(size_t n, const int64_t* group, const uint64_t* start, const uint64_t* end, int64_t* lane_out,
                         uint64_t* lane_free_at, long max_lanes) {
    long width = 0, used = 0;
    for (size_t i = 0; i < n; ++i) {
        if (i == 0 || group[i] != group[i - 1]) used = 0; /* a new group: no lane taken yet */
        const long k = first_fit(lane_free_at, &used, max_lanes, start[i], end[i]);
        if (k < 0) return GPUOBS_LANES_TOO_MANY;
        lane_out[i] = k;
        if (used > width) width = used;
    }
    return width;
}

/* Merges the sorted runs [0, mid) and [mid, n) of key/item in place, through scratch
 * for the shorter run (tk/ti): the left run copied out and merged forwards, or the
 * right one and merged backwards. Ties take the left run's first: stable. */
static void merge_runs(uint64_t* key, int64_t* item, size_t mid, size_t n, uint64_t* tk, int64_t* ti) {
    if (mid == 0 || mid == n || key[mid - 1] <= key[mid]) return; /* already in order */
    if (mid <= n - mid) {
        memcpy(tk, key, mid * sizeof *tk);
        memcpy(ti, item, mid * sizeof *ti);
        size_t i = 0, j = mid, k = 0;
        while (i < mid && j < n) {
            if (key[j] < tk[i]) {
                key[k] = key[j];
                item[k++] = item[j++];
            } else {
                key[k] = tk[i];
                item[k++] = ti[i++];
            }
        }
        while (i < mid) {
            key[k] = tk[i];
            item[k++] = ti[i++];
        }
    } else {
        size_t right = n - mid;
        memcpy(tk, key + mid, right * sizeof *tk);
        memcpy(ti, item + mid, right * sizeof *ti);
        size_t i = mid, j = right, k = n; /* one past the next to take from left / scratch / to write */
        while (i > 0 && j > 0) {
            if (tk[j - 1] < key[i - 1]) {
                key[--k] = key[--i];
                item[k] = item[i];
            } else {
                key[--k] = tk[--j];
                item[k] = ti[j];
            }
        }
        while (j > 0) {
            key[--k] = tk[--j];
            item[k] = ti[j];
        }
    }
}

#define MIN_RUN 32 /* shorter runs are extended by insertion */

int gpuobs_sort_keyed(size_t n, uint64_t* key, int64_t* item) {
    if (n < 2) return 1;
    /* Runs: maximal non-decreasing stretches, short ones extended to MIN_RUN keys by
     * insertion (after equal keys: stable). */
    size_t cap = 64, count = 0;
    size_t* bounds = malloc(cap * sizeof *bounds); /* run starts, then n */
    if (!bounds) return 0;
    for (size_t lo = 0; lo < n;) {
        size_t hi = lo + 1;
        while (hi < n && key[hi - 1] <= key[hi]) ++hi;
        if (hi - lo < MIN_RUN && hi < n) {
            size_t stop = lo + MIN_RUN < n ? lo + MIN_RUN : n;
            for (; hi < stop; ++hi) {
                uint64_t k = key[hi];
                int64_t it = item[hi];
                size_t a = lo, b = hi; /* first position whose key is above k */
                while (a < b) {
                    size_t m = a + (b - a) / 2;
                    if (key[m] <= k)
                        a = m + 1;
                    else
                        b = m;
                }
                memmove(key + a + 1, key + a, (hi - a) * sizeof *key);
                memmove(item + a + 1, item + a, (hi - a) * sizeof *item);
                key[a] = k;
                item[a] = it;
            }
            while (hi < n && key[hi - 1] <= key[hi]) ++hi;
        }
        if (count + 2 > cap) {
            size_t* more = realloc(bounds, 2 * cap * sizeof *bounds);
            if (!more) {
                free(bounds);
                return 0; /* keys of runs so far are sorted within runs: still a permutation */
            }
            bounds = more;
            cap *= 2;
        }
        bounds[count++] = lo;
        lo = hi;
    }
    bounds[count] = n;
    if (count == 1) {
        free(bounds);
        return 1;
    }
    size_t half = n / 2 + 1;
    uint64_t* tk = malloc(half * sizeof *tk);
    int64_t* ti = malloc(half * sizeof *ti);
    if (!tk || !ti) {
        free(tk);
        free(ti);
        free(bounds);
        return 0;
    }
    /* Neighbouring runs merged pairwise, pass after pass: the shorter of two runs is at
     * most half of n. */
    while (count > 1) {
        size_t out = 0;
        for (size_t r = 0; r < count; r += 2) {
            if (r + 1 < count) {
                size_t a = bounds[r], m = bounds[r + 1], b = bounds[r + 2];
                merge_runs(key + a, item + a, m - a, b - a, tk, ti);
            }
            bounds[out++] = bounds[r];
        }
        bounds[out] = n;
        count = out;
    }
    free(tk);
    free(ti);
    free(bounds);
    return 1;
}

static int bit_length(uint64_t v) {
    int bits = 0;
    while (v) {
        ++bits;
        v >>= 1;
    }
    return bits;
}

/* A walk of items 0 .. n-1 in the order of their keys, ties in item order: where the
 * keys lie in at most MAX_MERGE_RUNS non-decreasing runs (tables one after another,
 * each in time order), a merge of the runs where they lie, nothing copied; else the
 * keys and items sorted first (gpuobs_sort_keyed). */
#define MAX_MERGE_RUNS 16
typedef uint64_t (*key_of)(const void* ctx, size_t i);
typedef struct {
    key_of key_fn;
    const void* ctx;
    size_t n, runs, at;
    size_t bound[MAX_MERGE_RUNS + 1], head[MAX_MERGE_RUNS];
    uint64_t head_key[MAX_MERGE_RUNS];
    uint64_t* key; /* sorted: the keys and items in order */
    int64_t* item;
} walk;

/* 0 where scratch cannot be had. */
static int walk_start(walk* w, size_t n, key_of key_fn, const void* ctx) {
    memset(w, 0, sizeof *w);
    w->key_fn = key_fn, w->ctx = ctx, w->n = n;
    uint64_t previous = 0;
    for (size_t i = 0; i < n; ++i) {
        uint64_t k = key_fn(ctx, i);
        if (i == 0 || k < previous) {
            if (w->runs == MAX_MERGE_RUNS) {
                w->runs = 0;
                break;
            }
            w->bound[w->runs] = i;
            w->head[w->runs] = i;
            w->head_key[w->runs++] = k;
        }
        previous = k;
    }
    if (w->runs || n == 0) {
        w->bound[w->runs] = n;
        return 1;
    }
    w->key = malloc(n * sizeof *w->key);
    w->item = malloc(n * sizeof *w->item);
    if (!w->key || !w->item) return 0;
    for (size_t i = 0; i < n; ++i) {
        w->key[i] = key_fn(ctx, i);
        w->item[i] = (int64_t)i;
    }
    return gpuobs_sort_keyed(n, w->key, w->item);
}

/* The next item and its key; 0 past the last. */
static inline int walk_next(walk* w, size_t* item, uint64_t* key) {
    if (w->key) {
        if (w->at == w->n) return 0;
        *key = w->key[w->at];
        *item = (size_t)w->item[w->at++];
        return 1;
    }
    size_t best = MAX_MERGE_RUNS;
    for (size_t r = 0; r < w->runs; ++r)
        if (w->head[r] < w->bound[r + 1] && (best == MAX_MERGE_RUNS || w->head_key[r] < w->head_key[best])) best = r;
    if (best == MAX_MERGE_RUNS) return 0;
    *key = w->head_key[best];
    *item = w->head[best]++;
    if (w->head[best] < w->bound[best + 1]) w->head_key[best] = w->key_fn(w->ctx, w->head[best]);
    return 1;
}

static void walk_end(walk* w) {
    free(w->key);
    free(w->item);
}

typedef struct {
    const int64_t* group;
    const uint64_t *start, *end;
    uint64_t base;
    int bits;
} lane_keys;

static uint64_t lane_key(const void* ctx, size_t i) {
    const lane_keys* c = ctx;
    uint64_t s = ((c->start[i] - c->base) << 1) + 1 - (uint64_t)(c->start[i] == c->end[i]);
    return ((uint64_t)c->group[i] << c->bits) | s;
}

long gpuobs_lanes(size_t n, const int64_t* group, const uint64_t* start, const uint64_t* end, int64_t* lane_out,
                  int64_t* lanes_per_group, size_t n_groups, long max_lanes) {
    if (n == 0) return 0;
    uint64_t base = start[0], high = 0, top = 0;
    for (size_t i = 1; i < n; ++i)
        if (start[i] < base) base = start[i];
    for (size_t i = 0; i < n; ++i) {
        uint64_t zero = start[i] == end[i];
        uint64_t e = ((end[i] - base) << 1) + 1 + zero;
        if (e > high) high = e;
        if ((uint64_t)group[i] > top) top = (uint64_t)group[i];
        if (group[i] < 0 || (size_t)group[i] >= n_groups) return GPUOBS_KEYS_DO_NOT_FIT;
    }
    int bits = bit_length(high);
    if (bits >= 64 || top >= ((uint64_t)1 << (64 - bits))) return GPUOBS_KEYS_DO_NOT_FIT;
    lane_keys keys = {group, start, end, base, bits};
    walk w = {0};
    uint64_t* free_at = malloc((size_t)max_lanes * sizeof *free_at);
    long width = GPUOBS_KEYS_DO_NOT_FIT;
    if (!free_at || !walk_start(&w, n, lane_key, &keys)) goto done;
    width = 0;
    long used = 0;
    uint64_t mask = ((uint64_t)1 << bits) - 1, key, previous = 0;
    size_t i;
    for (size_t j = 0; walk_next(&w, &i, &key); ++j, previous = key) {
        if (j == 0 || (key >> bits) != (previous >> bits)) used = 0; /* a new group: no lane taken yet */
        uint64_t s = key & mask, e = ((end[i] - base) << 1) + 1 + (uint64_t)(start[i] == end[i]);
        const long k = first_fit(free_at, &used, max_lanes, s, e);
        if (k < 0) {
            width = GPUOBS_LANES_TOO_MANY;
            goto done;
        }
        if (lanes_per_group[group[i]] < used) lanes_per_group[group[i]] = used;
        lane_out[i] = k;
        if (used > width) width = used;
    }
done:
    walk_end(&w);
    free(free_at);
    return width;
}

typedef struct {
    size_t n;
    const uint64_t *start, *end, *group;
    uint64_t base;
    int bits;
} packet_keys;

static uint64_t packet_key(const void* ctx, size_t p) {
    const packet_keys* c = ctx;
    size_t i = p < c->n ? p : p - c->n;
    uint64_t g = c->group ? c->group[i] << c->bits : 0;
    if (p < c->n) return g | ((c->start[i] - c->base) << 2) | 1;
    return g | ((c->end[i] - c->base) << 2) | ((uint64_t)(c->start[i] == c->end[i]) << 1);
}

struct gpuobs_packet_walk {
    packet_keys keys;
    walk w;
};

struct gpuobs_packet_walk* gpuobs_packet_walk_start(size_t n, const uint64_t* start, const uint64_t* end,
                                                    const uint64_t* group, uint64_t base, int bits) {
    struct gpuobs_packet_walk* h = calloc(1, sizeof *h);
    if (!h) return NULL;
    h->keys = (packet_keys){n, start, end, group, base, bits};
    if (!walk_start(&h->w, 2 * n, packet_key, &h->keys)) {
        gpuobs_packet_walk_end(h);
        return NULL;
    }
    return h;
}

size_t gpuobs_packet_walk_next(struct gpuobs_packet_walk* h, size_t most, int64_t* slice_out, uint8_t* begin_out,
                               uint64_t* time_out, int64_t* group_out) {
    size_t n = h->keys.n, s, p = 0;
    int bits = h->keys.bits;
    uint64_t mask = bits >= 64 ? ~(uint64_t)0 : ((uint64_t)1 << bits) - 1, key;
    for (; p < most && walk_next(&h->w, &s, &key); ++p) {
        int begin = s < n;
        begin_out[p] = (uint8_t)begin;
        slice_out[p] = (int64_t)(begin ? s : s - n);
        if (group_out) group_out[p] = (int64_t)(key >> bits);
        time_out[p] = ((key & mask) >> 2) + h->keys.base;
    }
    return p;
}

/* native_encoder.h says what it returns. plan_packet and put_packet read packet 0 of a
 * view whose per-packet columns are the one packet's values, so the bytes are theirs. */
uint8_t* gpuobs_encode_walked_slices_grown(struct gpuobs_packet_walk* h, size_t most,
                                           const struct gpuobs_slice_packets* packets, const uint64_t* track_of_slice,
                                           uint64_t seq, size_t capacity, size_t* size, size_t* count) {
    struct gpuobs_slice_packets one = *packets;
    struct arg_info args[GPUOBS_ENCODER_MAX_ARGS];
    struct grown g;
    *count = 0;
    if (one.n_args > GPUOBS_ENCODER_MAX_ARGS) {
        *size = 0;
        return NULL;
    }
    if (!grown_start(&g, capacity)) return grown_fail(&g, size);
    for (size_t k = 0; k < one.n_args; ++k) prepare_arg(&args[k], &one.args[k]);
    int64_t slice;
    uint8_t begin;
    uint64_t ts, track;
    one.n = 1, one.slice = &slice, one.begin = &begin, one.ts = &ts, one.track = &track, one.seq = &seq;
    const size_t n = h->keys.n;
    const int bits = h->keys.bits;
    const uint64_t mask = bits >= 64 ? ~(uint64_t)0 : ((uint64_t)1 << bits) - 1;
    struct packet_plan plan;
    size_t item, p = 0;
    uint64_t key;
    for (; p < most && walk_next(&h->w, &item, &key); ++p) {
        begin = item < n;
        slice = (int64_t)(begin ? item : item - n);
        ts = ((key & mask) >> 2) + h->keys.base;
        track = track_of_slice[slice];
        plan_packet(&one, args, 0, &plan);
        const size_t bytes = len_field_size(TRACE_PACKET, plan.packet);
        if (!grown_room(&g, bytes)) return grown_fail(&g, size);
        put_packet(g.data + g.size, &one, args, 0, &plan);
        g.size += bytes;
    }
    *count = p;
    return grown_end(&g, size);
}

void gpuobs_packet_walk_end(struct gpuobs_packet_walk* h) {
    if (!h) return;
    walk_end(&h->w);
    free(h);
}

int gpuobs_packet_order(size_t n, const uint64_t* start, const uint64_t* end, const uint64_t* group, uint64_t base,
                        int bits, int64_t* slice_out, uint8_t* begin_out, uint64_t* time_out, int64_t* group_out) {
    struct gpuobs_packet_walk* h = gpuobs_packet_walk_start(n, start, end, group, base, bits);
    if (!h) return 0;
    gpuobs_packet_walk_next(h, 2 * n, slice_out, begin_out, time_out, group_out);
    gpuobs_packet_walk_end(h);
    return 1;
}

/* native_encoder.h says what it returns. Read through int_value, as the slices' int
 * arguments are: a structured array's field in place. */
int64_t gpuobs_count_in_order(const uint8_t* base, int64_t stride, int32_t int_size, int32_t int_signed, size_t n) {
    const struct gpuobs_arg a = {.ints = base, .int_stride = stride, .int_size = int_size, .int_signed = int_signed};
    int64_t top = -1;
    for (size_t i = 0; i < n; ++i) {
        const int64_t v = int_value(&a, (int64_t)i); /* a uint64 past int64 reads negative */
        if (v < 0 || v > top + 1) return -1;
        if (v > top) top = v;
    }
    return n ? top + 1 : -1;
}

/* native_encoder.h says what it returns. */
int gpuobs_slice_tracks(size_t n, const int64_t* group, const int64_t* lane, const int64_t* offset, size_t n_groups,
                        const uint64_t* made, size_t n_made, uint64_t* track) {
    for (size_t i = 0; i < n; ++i) {
        const uint64_t g = (uint64_t)group[i];
        if (g >= n_groups) return 0;
        const uint64_t at = (uint64_t)offset[g] + (uint64_t)lane[i];
        if (at >= n_made) return 0;
        track[i] = made[at];
    }
    return 1;
}

/* native_encoder.h says what it returns. */
int gpuobs_event_columns(size_t n, const uint8_t* records, int64_t stride, int64_t track_at, int64_t start_at,
                         int64_t duration_at, const int64_t* rank, size_t n_ranks, int64_t shift, int64_t* group,
                         int64_t* start, int64_t* end) {
    for (size_t i = 0; i < n; ++i, records += stride) {
        int32_t track;
        int64_t s, d;
        memcpy(&track, records + track_at, sizeof track);
        memcpy(&s, records + start_at, sizeof s);
        memcpy(&d, records + duration_at, sizeof d);
        if (track < 0 || (size_t)track >= n_ranks) return 0;
        group[i] = rank[track];
        const uint64_t from = (uint64_t)s + (uint64_t)shift; /* wrapping, as numpy's int64 */
        start[i] = (int64_t)from;
        end[i] = (int64_t)(from + (uint64_t)(d > 0 ? d : 0));
    }
    return 1;
}
