/* What native_encoder.c exports and how it is called: the one declaration that the
 * C file includes and that cffi reads (native_encoder.py: the part between the cdef
 * markers), so the two cannot drift apart. */
#ifndef GPUOBS_NATIVE_ENCODER_H
#define GPUOBS_NATIVE_ENCODER_H

#include <stddef.h>
#include <stdint.h>

/* gpuobs:cdef-begin */
enum gpuobs_arg_kind { GPUOBS_ARG_INT = 0, GPUOBS_ARG_BOOL = 1, GPUOBS_ARG_STRING = 2 };
enum gpuobs_encoder_limits {
    GPUOBS_ENCODER_MAX_ARGS = 32, /* arguments per slice: each packet's are planned in a fixed array */
    GPUOBS_LANES_TOO_MANY = -1,   /* gpuobs_assign_lanes: a group needed more than max_lanes */
    GPUOBS_KEYS_DO_NOT_FIT = -2   /* gpuobs_lanes: groups and times need more than 64 bits */
};

/* One debug annotation on the BEGIN of every slice where present[slice] (every
 * slice where present is NULL). */
struct gpuobs_arg {
    uint64_t name_iid;
    int32_t kind;           /* GPUOBS_ARG_INT, GPUOBS_ARG_BOOL (true) or GPUOBS_ARG_STRING */
    const uint8_t* present; /* per slice */
    /* GPUOBS_ARG_INT: slice e's value is the int_size-byte integer at ints + e * int_stride, read in place
     * from the numpy column as it is (a record field, a narrower type, a broadcast scalar). */
    const uint8_t* ints;
    int64_t int_stride;
    int32_t int_size; /* 1, 2, 4 or 8 */
    int32_t int_signed;
    int64_t at_least;     /* left out where the value is below this */
    const uint8_t* chars; /* GPUOBS_ARG_STRING: slice e's value is chars[starts[e] : starts[e] + lengths[e]], */
                          /* or with ints (a choice) starts[v] and lengths[v] for v, the integer at e */
    const int64_t* starts;
    const int64_t* lengths;
};

/* Packets are indexed by i, per-slice columns by e = slice[i]. */
struct gpuobs_slice_packets {
    size_t n;                 /* packets */
    const int64_t* slice;     /* per packet: its slice */
    const uint8_t* begin;     /* per packet: BEGIN (1) or END (0) */
    const uint64_t* ts;       /* per packet */
    const uint64_t* track;    /* per packet; 0: no track_uuid (the sequence's default track) */
    const uint64_t* seq;      /* per packet */
    const uint64_t* name_iid; /* per slice, on BEGINs */
    uint64_t clock_id;        /* timestamp_clock_id of every packet; 0: none */
    uint64_t begin_flags;     /* sequence_flags of BEGINs (which alone use interned data); 0: none */
    size_t n_args;
    const struct gpuobs_arg* args;
    uint32_t flow_field; /* TrackEvent.flow_ids or .terminating_flow_ids; 0: no flows */
    size_t flow_width;
    const uint64_t* flows; /* per slice, flow_width values, of which flow_counts[e] are used */
    const int64_t* flow_counts;
};

/* Encodes the packets as Trace.packet entries into out (NULL: only measure).
 * Returns the number of bytes, or 0 past GPUOBS_ENCODER_MAX_ARGS arguments. */
size_t gpuobs_encode_slices(uint8_t* out, const struct gpuobs_slice_packets* s);
/* The same bytes in one pass, into a buffer of malloc's that starts at `capacity`
 * bytes and grows as needed; *size: the bytes written. Free it with gpuobs_free.
 * NULL where memory runs out (nothing to free). */
uint8_t* gpuobs_encode_slices_grown(const struct gpuobs_slice_packets* s, size_t capacity, size_t* size);
void gpuobs_free(void* data);

/* First-fit lanes for half-open intervals sorted by (group, start): each takes
 * the lowest lane of its group that is free at its start (touching intervals
 * share a lane). lanes.py maps zero-length slices to such intervals. Returns the
 * most lanes any group needed, or GPUOBS_LANES_TOO_MANY past max_lanes. */
long gpuobs_assign_lanes(size_t n, const int64_t* group, const uint64_t* start, const uint64_t* end, int64_t* lane_out,
                         uint64_t* lane_free_at, long max_lanes);

/* Stable sort of n keys, carried with their items: afterwards key[] is in order and
 * item[i] is the item of the key now at i (keys that tie keep their order). Sorted
 * runs cost one pass: a natural merge sort, scratch for half the keys. Returns 0
 * where scratch cannot be had (the keys and items are then of no use). */
int gpuobs_sort_keyed(size_t n, uint64_t* key, int64_t* item);

/* lanes.py's assign_lanes in one call: slices (group >= 0, start <= end, unsorted)
 * as half-open intervals from the least start, [2s+1, 2e+1) or [2t, 2t+2) for a
 * zero-length one, sorted by (group, start) (ties in slice order), lanes first-fit.
 * lanes_per_group[g] (n_groups of them, zeroed by the caller) is raised to group g's
 * lane count. Slices whose keys lie in a few runs in order (tables one after another,
 * each in time order) are merged where they lie, others sorted. Returns the most lanes a group needed;
 * GPUOBS_LANES_TOO_MANY past max_lanes, GPUOBS_KEYS_DO_NOT_FIT where a group does not fit above the times in a 64-bit
 * key or scratch cannot be had (the caller's numpy path then). */
long gpuobs_lanes(size_t n, const int64_t* group, const uint64_t* start, const uint64_t* end, int64_t* lane_out,
                  int64_t* lanes_per_group, size_t n_groups, long max_lanes);

/* slice_encoder.py's packet_order: the BEGIN (packet i < n, slice i) and END (packet
 * n + i) of n slices sorted by (group, time - base, rank: 0 END with a length, 1
 * BEGIN, 2 END of a zero-length slice), ties in packet order; bits: the low bits
 * that hold (time - base) << 2 | rank; group NULL: all 0. Writes per sorted packet
 * its slice, whether a BEGIN, its time and (where group_out) its group; keys in a few
 * runs in order merged where they lie, others sorted. Returns 0 where scratch cannot
 * be had. */
int gpuobs_packet_order(size_t n, const uint64_t* start, const uint64_t* end, const uint64_t* group, uint64_t base,
                        int bits, int64_t* slice_out, uint8_t* begin_out, uint64_t* time_out, int64_t* group_out);

/* The same order a batch at a time (write_slices: no column of every packet): a walk
 * (NULL without scratch); each call writes the next packets, at most `most`, and
 * returns how many (0 past the last); the columns read must outlive the walk. */
struct gpuobs_packet_walk;
struct gpuobs_packet_walk* gpuobs_packet_walk_start(size_t n, const uint64_t* start, const uint64_t* end,
                                                    const uint64_t* group, uint64_t base, int bits);
size_t gpuobs_packet_walk_next(struct gpuobs_packet_walk* walk, size_t most, int64_t* slice_out, uint8_t* begin_out,
                               uint64_t* time_out, int64_t* group_out);
void gpuobs_packet_walk_end(struct gpuobs_packet_walk* walk);
/* The walk's next packets (at most `most`; *count: how many, 0 past the last) encoded as
 * gpuobs_encode_slices_grown encodes them, in one pass with the walk: packet i's slice,
 * BEGIN and time from the walk, its track track_of_slice[slice], its sequence seq; the
 * per-slice columns, arguments, clock and flags from s (its n, slice, begin, ts, track
 * and seq unread). NULL where memory runs out or past GPUOBS_ENCODER_MAX_ARGS arguments. */
uint8_t* gpuobs_encode_walked_slices_grown(struct gpuobs_packet_walk* walk, size_t most,
                                           const struct gpuobs_slice_packets* s, const uint64_t* track_of_slice,
                                           uint64_t seq, size_t capacity, size_t* size, size_t* count);
/* n TrackDescriptor packets (trace_writer.py's TraceWriter.track_batch): packet i
 * describes track first_uuid + i, named name_chars[name_starts[i] : + name_lengths[i]],
 * or by name_forms, with parent_uuid parents[i] and sibling_order_rank ranks[i] where those columns are
 * given (non-NULL), and where merge_keys is set and merged[i] (merged NULL: every
 * track) sibling merge by key with the key merge_chars[merge_starts[i] : + merge_lengths[i]]
 * or by merge_forms.
 * The fields in track()'s protobuf order, as the numpy fallback writes them. */
/* Texts written in the encoder, not read from a pool: where form[i] is k > 0, text i
 * is prefix k, numbers[i] in decimal, suffix k (the affixes in chars, at their starts
 * and lengths, index k - 1); where form[i] is 0, the pool's text i. */
enum gpuobs_text_form_limits { GPUOBS_TEXT_FORMS = 4 };
struct gpuobs_text_forms {
    const uint8_t* form;
    const uint64_t* numbers;
    const uint8_t* chars;
    int64_t prefix_starts[GPUOBS_TEXT_FORMS];
    int64_t prefix_lengths[GPUOBS_TEXT_FORMS];
    int64_t suffix_starts[GPUOBS_TEXT_FORMS];
    int64_t suffix_lengths[GPUOBS_TEXT_FORMS];
};

struct gpuobs_track_descriptors {
    size_t n;
    uint64_t first_uuid;
    const uint8_t* name_chars;
    const int64_t* name_starts;
    const int64_t* name_lengths;
    const uint64_t* parents; /* NULL: no parent_uuid */
    const uint64_t* ranks;   /* NULL: no sibling_order_rank */
    int32_t merge_keys;      /* 0: no merge key on any track */
    const uint8_t* merged;   /* per track, where merge_keys; NULL: every track */
    const uint8_t* merge_chars;
    const int64_t* merge_starts;
    const int64_t* merge_lengths;
    const struct gpuobs_text_forms* name_forms;  /* NULL: every name from its pool */
    const struct gpuobs_text_forms* merge_forms; /* NULL: every merge key from its pool */
};

/* Encodes the packets as Trace.packet entries into out (NULL: only measure);
 * returns the number of bytes. */
size_t gpuobs_encode_track_descriptors(uint8_t* out, const struct gpuobs_track_descriptors* t);
/* The same bytes in one pass, as gpuobs_encode_slices_grown. */
uint8_t* gpuobs_encode_track_descriptors_grown(const struct gpuobs_track_descriptors* t, size_t capacity, size_t* size);
/* host_tracks.py's lane tracks, the bytes TraceWriter.track_batch writes for them, in
 * one pass over live groups (a group with lanes), a batch of them a call: for live group
 * j, where its process (numbered by first use) is met first, the process's track (name
 * process_names[process[j]], parent group_uuid, rank process[j]); then lanes[j] lane
 * tracks (name: label j, by label_forms or from its pool; parent: the process's track;
 * rank ranks[j]; merged by the key merge_prefix + ranks[j] in decimal). Uuids run on
 * from next_uuid. The state fields carry from call to call. */
struct gpuobs_lane_tracks {
    size_t n;               /* live groups in this call */
    const int64_t* lanes;   /* per live group, >= 1 */
    const int64_t* process; /* per live group: < n_processes, at most processes_made */
    const uint64_t* ranks;  /* per live group */
    uint64_t group_uuid;
    size_t n_processes;
    const uint8_t* process_chars;
    const int64_t* process_starts;
    const int64_t* process_lengths;
    const uint8_t* label_chars;
    const int64_t* label_starts;
    const int64_t* label_lengths;
    const struct gpuobs_text_forms* label_forms; /* NULL: every label from its pool */
    const uint8_t* merge_prefix;
    size_t merge_prefix_length;
    /* state */
    uint64_t next_uuid;      /* the next track's uuid */
    size_t processes_made;   /* processes met so far */
    uint64_t* process_uuids; /* n_processes: each met process's track */
    uint64_t* made;          /* out: this call's lane tracks' uuids, in order */
    size_t made_count;       /* out: how many */
    size_t tracks;           /* out: tracks this call wrote (processes and lanes) */
    int32_t refused;         /* out: 1 where a process number or lane count is out of range */
};
/* The packets, as gpuobs_encode_slices_grown; NULL where memory runs out or the call is
 * refused (nothing written, the state as it was). */
uint8_t* gpuobs_encode_lane_tracks_grown(struct gpuobs_lane_tracks* t, size_t capacity, size_t* size);
/* trace_writer.py's numbered: text i is prefix, values[i] in decimal, suffix. With
 * chars NULL it writes each text's start (back to back from 0) and length and returns
 * the bytes of all; with chars (that many bytes) it writes the texts there. */
size_t gpuobs_numbered(size_t n, const uint64_t* values, const uint8_t* prefix, size_t prefix_len,
                       const uint8_t* suffix, size_t suffix_len, int64_t* starts, int64_t* lengths, uint8_t* chars);
/* host_tracks.py's interned event names: n InternedData.event_names entries, entry i
 * an EventName with iid first_iid + i and, where present[i] (present NULL: every
 * entry), the name chars[starts[i] : + lengths[i]]. Writes them into out (NULL: only
 * measure) and returns the number of bytes. */
size_t gpuobs_encode_interned_names(uint8_t* out, size_t n, uint64_t first_iid, const uint8_t* chars,
                                    const int64_t* starts, const int64_t* lengths, const uint8_t* present);
/* host_traces/trace.py's count_in_order: k where the n codes (integers of int_size
 * bytes, signed or not, at base + i * stride) first use 0, 1, ..., k-1 in that order
 * (each code past the greatest so far is the next number), else -1 (a negative code, a
 * number skipped, none). */
int64_t gpuobs_count_in_order(const uint8_t* base, int64_t stride, int32_t int_size, int32_t int_signed, size_t n);
/* lanes.py's lane_tracks: track[i] = made[offset[group[i]] + lane[i]] for n slices, in
 * one pass (no column of the positions); 0 where a group or position is out of range
 * (n_groups offsets, n_made tracks), 1 once written. */
int gpuobs_slice_tracks(size_t n, const int64_t* group, const int64_t* lane, const int64_t* offset, size_t n_groups,
                        const uint64_t* made, size_t n_made, uint64_t* track);
/* host_tracks.py's columns of n events, read in their records (stride bytes apart; an
 * int32 track and int64 start and duration at their byte offsets): group[i] =
 * rank[track], start[i] = start + shift and end[i] = start[i] + max(duration, 0), both
 * wrapping as numpy's int64 does. 0 where a track is outside [0, n_ranks): the caller's
 * numpy then (its negative indices count from the end). */
int gpuobs_event_columns(size_t n, const uint8_t* records, int64_t stride, int64_t track_at, int64_t start_at,
                         int64_t duration_at, const int64_t* rank, size_t n_ranks, int64_t shift, int64_t* group,
                         int64_t* start, int64_t* end);
/* gpuobs:cdef-end */

#endif /* GPUOBS_NATIVE_ENCODER_H */
