/* The traceEvents array of a PyTorch-profiler (Kineto) JSON trace, scanned in C
 * (host_traces/kineto_scan.py drives it; kineto.py reads the same events in Python):
 * each element's fields that kineto.py uses become one fixed-size row, names, pids and
 * tids interned into a string table, tracks into a track table.
 *
 * It only takes what it is sure Python's json and kineto.py would read the same way.
 * Anything else (an error kineto.py reports, NaN, a key given twice, deep nesting, a
 * lone surrogate, a number of many digits, an element over MAX_ELEMENT bytes) stops
 * the scan with SCAN_BAIL, and the file is read again in Python, for its words. The
 * bytes given are valid UTF-8 (Python checked them as they were read). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "text_pool.h"

enum { SCAN_END = 0, SCAN_FULL = 1, SCAN_MORE = 2, SCAN_BAIL = 3 };
enum { OK = 0, MORE = 2, BAIL = 3 };
enum { IDENT_NONE = 0, IDENT_INT = 1, IDENT_TEXT = 2, IDENT_OTHER = 3 };
enum { ROW_THREAD = 0, ROW_STREAM = 1, ROW_THREAD_NAME = 2, ROW_PROCESS_NAME = 3 };
enum { MAX_DEPTH = 64, MAX_USED_DIGITS = 18, MAX_NUMBER_CHARS = 4000, MAX_CATEGORY_CHARS = 64 };
#define MAX_ELEMENT (1 << 20)
#define TIME_LIMIT_US (4611686018427387904.0 / 1000.0) /* 2^62 ns, as kineto.py divides it */

/* One X event (a thread or stream slice, a kernel when is_kernel) or one thread_name or
 * process_name metadata event; kineto_scan.py reads it as a numpy structured array. */
typedef struct {
    int64_t start_ns, dur_ns, index, owner, lane, correlation;
    int64_t grid[3], block[3];
    int32_t name, category, track, kind, is_kernel, pad;
} scan_row;

typedef struct {
    char* data;
    int64_t size, cap;
} bytes_buf;

typedef struct {
    int64_t kind, owner_type, owner, lane_type, lane;
} track_key;

typedef struct {
    text_pool strings; /* every interned string (names, categories, track names) */
    track_key* tracks;
    int64_t n_tracks, cap_tracks;
    int32_t* track_slots;
    int64_t track_mask;
    bytes_buf scratch; /* the string being decoded */
    int failed;        /* out of memory */
} scanner;

scanner* kineto_scanner_new(void) { return calloc(1, sizeof(scanner)); }

void kineto_scanner_free(scanner* s) {
    if (!s) return;
    text_pool_free(&s->strings);
    free(s->tracks);
    free(s->track_slots);
    free(s->scratch.data);
    free(s);
}

int64_t kineto_string_count(scanner* s) { return s->strings.count; }
const char* kineto_string_pool(scanner* s) { return s->strings.data; }
const int64_t* kineto_string_offsets(scanner* s) { return s->strings.offsets; }
int64_t kineto_track_count(scanner* s) { return s->n_tracks; }
const int64_t* kineto_tracks(scanner* s) { return (const int64_t*)s->tracks; }

/* The id of the string in scratch, added when new; -1 when memory ran out. */
static int32_t intern_scratch(scanner* s) {
    int64_t id = text_pool_intern(&s->strings, s->scratch.data ? s->scratch.data : "", s->scratch.size, INT32_MAX - 1);
    return (int32_t)id;
}

static uint64_t hash_track(const track_key* k) { return fnv1a(k, sizeof(*k)); }

static int rehash_tracks(scanner* s, int64_t slots) {
    int32_t* table = calloc((size_t)slots, sizeof(int32_t));
    if (!table) return 0;
    for (int64_t id = 0; id < s->n_tracks; id++) {
        uint64_t at = hash_track(&s->tracks[id]) & (uint64_t)(slots - 1);
        while (table[at]) at = (at + 1) & (uint64_t)(slots - 1);
        table[at] = (int32_t)(id + 1);
    }
    free(s->track_slots);
    s->track_slots = table;
    s->track_mask = slots - 1;
    return 1;
}

static int32_t intern_track(scanner* s, const track_key* k) {
    if ((s->n_tracks + 1) * 2 > s->track_mask + 1 && !rehash_tracks(s, s->track_mask ? (s->track_mask + 1) * 2 : 256))
        return -1;
    uint64_t at = hash_track(k) & (uint64_t)s->track_mask;
    for (; s->track_slots[at]; at = (at + 1) & (uint64_t)s->track_mask) {
        int64_t id = s->track_slots[at] - 1;
        if (memcmp(&s->tracks[id], k, sizeof(*k)) == 0) return (int32_t)id;
    }
    if (s->n_tracks >= INT32_MAX - 1) return -1;
    if (!grow((void**)&s->tracks, &s->cap_tracks, s->n_tracks + 1, sizeof(track_key))) return -1;
    s->tracks[s->n_tracks] = *k;
    s->track_slots[at] = (int32_t)(s->n_tracks + 1);
    return (int32_t)s->n_tracks++;
}

typedef struct {
    const uint8_t *p, *end;
    int final;
    scanner* s;
} cursor;

/* Running out of bytes: more may come, unless this is the end of the file. */
#define NEED(c) ((c)->final ? BAIL : MORE)

static void skip_ws(cursor* c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r')) c->p++;
}

static int hex4(const uint8_t* p, uint32_t* out) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        uint8_t h = p[i];
        v <<= 4;
        if (h >= '0' && h <= '9')
            v |= h - '0';
        else if (h >= 'a' && h <= 'f')
            v |= h - 'a' + 10;
        else if (h >= 'A' && h <= 'F')
            v |= h - 'A' + 10;
        else
            return 0;
    }
    *out = v;
    return 1;
}

static int put(scanner* s, const void* p, int64_t n) {
    if (!grow((void**)&s->scratch.data, &s->scratch.cap, s->scratch.size + n, 1)) return 0;
    memcpy(s->scratch.data + s->scratch.size, p, (size_t)n);
    s->scratch.size += n;
    return 1;
}

static int put_utf8(scanner* s, uint32_t cp) {
    uint8_t b[4];
    int n;
    if (cp < 0x80)
        b[0] = (uint8_t)cp, n = 1;
    else if (cp < 0x800)
        b[0] = 0xC0 | (cp >> 6), b[1] = 0x80 | (cp & 0x3F), n = 2;
    else if (cp < 0x10000)
        b[0] = 0xE0 | (cp >> 12), b[1] = 0x80 | ((cp >> 6) & 0x3F), b[2] = 0x80 | (cp & 0x3F), n = 3;
    else
        b[0] = 0xF0 | (cp >> 18), b[1] = 0x80 | ((cp >> 12) & 0x3F), b[2] = 0x80 | ((cp >> 6) & 0x3F),
        b[3] = 0x80 | (cp & 0x3F), n = 4;
    return put(s, b, n);
}

static const char ESCAPES[] = "\"\\/bfnrt";
static const char ESCAPED[] = "\"\\/\b\f\n\r\t";

/* A string at c->p (its opening quote), decoded into scratch when `keep`. A lone
 * surrogate, which Python keeps and UTF-8 cannot hold, bails only when kept. */
static int string(cursor* c, int keep) {
    scanner* s = c->s;
    s->scratch.size = 0;
    c->p++;
    for (;;) {
        const uint8_t* run = c->p;
        while (c->p < c->end && *c->p != '"' && *c->p != '\\' && *c->p >= 0x20) c->p++;
        if (keep && !put(s, run, c->p - run)) return BAIL;
        if (c->p >= c->end) return NEED(c);
        uint8_t ch = *c->p;
        if (ch == '"') {
            c->p++;
            return OK;
        }
        if (ch < 0x20) return BAIL; /* Python's json refuses control characters */
        if (c->end - c->p < 2) return NEED(c);
        uint8_t e = c->p[1];
        const char* simple = strchr(ESCAPES, e);
        if (e && simple) {
            if (keep && !put(s, &ESCAPED[simple - ESCAPES], 1)) return BAIL;
            c->p += 2;
            continue;
        }
        if (e != 'u') return BAIL;
        if (c->end - c->p < 6) return NEED(c);
        uint32_t cp;
        if (!hex4(c->p + 2, &cp)) return BAIL;
        c->p += 6;
        if (cp >= 0xD800 && cp < 0xDC00) {
            uint32_t low;
            if (c->end - c->p < 6) return NEED(c);
            if (c->p[0] == '\\' && c->p[1] == 'u' && hex4(c->p + 2, &low) && low >= 0xDC00 && low < 0xE000) {
                cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
                c->p += 6;
            } else if (keep) {
                return BAIL;
            }
        } else if (cp >= 0xDC00 && cp < 0xE000 && keep) {
            return BAIL;
        }
        if (keep && !put_utf8(s, cp)) return BAIL;
    }
}

typedef struct {
    int is_int;
    int64_t i;
    double f;
} number;

static int is_digit(uint8_t ch) { return ch >= '0' && ch <= '9'; }

/* A number in JSON's grammar (Python's json reads no other); its value when `out`. */
static int parse_number(cursor* c, number* out) {
    const uint8_t* start = c->p;
    const uint8_t* p = c->p;
    int is_int = 1;
    if (p < c->end && *p == '-') p++;
    if (p >= c->end) return NEED(c);
    if (*p == '0')
        p++;
    else if (is_digit(*p))
        while (p < c->end && is_digit(*p)) p++;
    else
        return BAIL; /* -Infinity, or not a number */
    if (p < c->end && *p == '.') {
        is_int = 0;
        p++;
        if (p >= c->end) return NEED(c);
        if (!is_digit(*p)) return BAIL;
        while (p < c->end && is_digit(*p)) p++;
    }
    if (p < c->end && (*p == 'e' || *p == 'E')) {
        is_int = 0;
        p++;
        if (p < c->end && (*p == '+' || *p == '-')) p++;
        if (p >= c->end) return NEED(c);
        if (!is_digit(*p)) return BAIL;
        while (p < c->end && is_digit(*p)) p++;
    }
    if (p >= c->end && !c->final) return MORE; /* the number may go on */
    int64_t n = p - start;
    if (n > MAX_NUMBER_CHARS) return BAIL;
    c->p = p;
    if (!out) return OK;
    out->is_int = is_int;
    if (is_int) {
        int neg = *start == '-';
        const uint8_t* d = start + neg;
        if (p - d > MAX_USED_DIGITS) return BAIL;
        int64_t v = 0;
        for (; d < p; d++) v = v * 10 + (*d - '0');
        out->i = neg ? -v : v;
    } else {
        char text[72];
        if (n >= (int64_t)sizeof(text)) return BAIL;
        memcpy(text, start, (size_t)n);
        text[n] = 0;
        out->f = strtod(text, NULL); /* correctly rounded, as Python's float() */
    }
    return OK;
}

static int literal(cursor* c, const char* word) {
    size_t n = strlen(word);
    size_t have = (size_t)(c->end - c->p);
    if (memcmp(c->p, word, have < n ? have : n) != 0) return BAIL;
    if (have < n) return NEED(c);
    c->p += n;
    return OK;
}

static int skip_value(cursor* c, int depth);

static int skip_container(cursor* c, int depth, uint8_t close) {
    if (depth >= MAX_DEPTH) return BAIL;
    c->p++;
    skip_ws(c);
    if (c->p >= c->end) return NEED(c);
    if (*c->p == close) {
        c->p++;
        return OK;
    }
    for (;;) {
        int r;
        if (close == '}') {
            if (*c->p != '"') return BAIL;
            if ((r = string(c, 0))) return r;
            skip_ws(c);
            if (c->p >= c->end) return NEED(c);
            if (*c->p++ != ':') return BAIL;
            skip_ws(c);
        }
        if ((r = skip_value(c, depth + 1))) return r;
        skip_ws(c);
        if (c->p >= c->end) return NEED(c);
        uint8_t ch = *c->p++;
        if (ch == close) return OK;
        if (ch != ',') return BAIL;
        skip_ws(c);
        if (c->p >= c->end) return NEED(c);
    }
}

static int skip_value(cursor* c, int depth) {
    if (c->p >= c->end) return NEED(c);
    switch (*c->p) {
        case '"': return string(c, 0);
        case '{': return skip_container(c, depth, '}');
        case '[': return skip_container(c, depth, ']');
        case 't': return literal(c, "true");
        case 'f': return literal(c, "false");
        case 'n': return literal(c, "null");
        default: return parse_number(c, NULL);
    }
}

/* A value kineto.py looks at: its kind, and a number's or interned string's value. */
enum { V_ABSENT = 0, V_NULL, V_INT, V_FLOAT, V_TEXT, V_DIMS, V_OTHER };
typedef struct {
    int kind;
    int64_t i;
    double f;
    int32_t text;
    int64_t text_chars;
    int64_t dims[3];
} field;

static int64_t utf8_chars(const char* p, int64_t n) {
    int64_t chars = 0;
    for (int64_t i = 0; i < n; i++) chars += ((uint8_t)p[i] & 0xC0) != 0x80;
    return chars;
}

/* Three whole numbers in [0, 2^32), as a grid or block; anything else is V_OTHER. */
static int dims(cursor* c, field* f) {
    const uint8_t* start = c->p;
    f->kind = V_OTHER;
    c->p++;
    for (int k = 0; k < 3; k++) {
        skip_ws(c);
        if (c->p >= c->end) return NEED(c);
        number n;
        if (*c->p != '-' && !is_digit(*c->p)) break;
        int r = parse_number(c, &n);
        if (r) return r;
        if (!n.is_int || n.i < 0 || n.i >= (int64_t)1 << 32) break;
        f->dims[k] = n.i;
        skip_ws(c);
        if (c->p >= c->end) return NEED(c);
        if (*c->p == (k == 2 ? ']' : ',')) {
            c->p++;
            if (k == 2) {
                f->kind = V_DIMS;
                return OK;
            }
        } else {
            break;
        }
    }
    c->p = start; /* not three small numbers: validated as any value */
    return skip_value(c, 1);
}

static int value(cursor* c, field* f, int want_dims, int depth) {
    if (c->p >= c->end) return NEED(c);
    uint8_t ch = *c->p;
    if (ch == '"') {
        int r = string(c, 1);
        if (r) return r;
        f->kind = V_TEXT;
        f->text_chars = utf8_chars(c->s->scratch.data, c->s->scratch.size);
        f->text = intern_scratch(c->s);
        if (f->text < 0) c->s->failed = 1;
        return f->text < 0 ? BAIL : OK;
    }
    if (ch == 'n') {
        f->kind = V_NULL;
        return literal(c, "null");
    }
    if (ch == '-' || is_digit(ch)) {
        number n;
        int r = parse_number(c, &n);
        if (r) return r;
        f->kind = n.is_int ? V_INT : V_FLOAT;
        f->i = n.i;
        f->f = n.f;
        return OK;
    }
    if (ch == '[' && want_dims) return dims(c, f);
    f->kind = V_OTHER;
    return skip_value(c, depth);
}

enum { K_PH, K_NAME, K_CAT, K_TS, K_DUR, K_PID, K_TID, K_ARGS, N_KEYS };
enum { A_DEVICE, A_STREAM, A_CORRELATION, A_NAME, A_GRID, A_BLOCK, N_ARGS };
static const char* const KEYS[N_KEYS] = {"ph", "name", "cat", "ts", "dur", "pid", "tid", "args"};
static const char* const ARG_KEYS[N_ARGS] = {"device", "stream", "correlation", "name", "grid", "block"};

static int key_index(scanner* s, const char* const* keys, int n) {
    for (int k = 0; k < n; k++)
        if ((int64_t)strlen(keys[k]) == s->scratch.size &&
            memcmp(keys[k], s->scratch.data, (size_t)s->scratch.size) == 0)
            return k;
    return -1;
}

/* An object's members into fields[] (keys[] of them; others validated and skipped); a
 * key given twice bails (Python keeps the last). `args`, when given, reads member
 * "args" as an object of its own (args_is_object says whether it was one). */
static int members(cursor* c, const char* const* keys, int n, field* fields, field* args, int* args_is_object) {
    c->p++;
    skip_ws(c);
    if (c->p >= c->end) return NEED(c);
    if (*c->p == '}') {
        c->p++;
        return OK;
    }
    for (;;) {
        int r;
        if (*c->p != '"') return BAIL;
        if ((r = string(c, 1))) return r;
        int k = key_index(c->s, keys, n);
        skip_ws(c);
        if (c->p >= c->end) return NEED(c);
        if (*c->p++ != ':') return BAIL;
        skip_ws(c);
        if (k >= 0 && fields[k].kind != V_ABSENT) return BAIL;
        if (k < 0) {
            r = skip_value(c, 2);
        } else if (args && k == K_ARGS) {
            if (c->p >= c->end) return NEED(c);
            if (*c->p == '{') {
                *args_is_object = 1;
                fields[k].kind = V_OTHER;
                r = members(c, ARG_KEYS, N_ARGS, args, NULL, NULL);
            } else {
                r = value(c, &fields[k], 0, 2);
            }
        } else {
            r = value(c, &fields[k], !args && (k == A_GRID || k == A_BLOCK), 2);
        }
        if (r) return r;
        skip_ws(c);
        if (c->p >= c->end) return NEED(c);
        uint8_t ch = *c->p++;
        if (ch == '}') return OK;
        if (ch != ',') return BAIL;
        skip_ws(c);
        if (c->p >= c->end) return NEED(c);
    }
}

static int is_text(scanner* s, const field* f, const char* word) {
    if (f->kind != V_TEXT) return 0;
    int64_t a = s->strings.offsets[f->text], b = s->strings.offsets[f->text + 1];
    return (int64_t)strlen(word) == b - a && memcmp(s->strings.data + a, word, (size_t)(b - a)) == 0;
}

/* kineto.py's micros(): microseconds from the base as whole ns (round half to even). */
static int micros(const field* f, int required, int64_t* ns) {
    if (f->kind == V_ABSENT) {
        *ns = 0;
        return required ? BAIL : OK;
    }
    if (f->kind == V_INT) {
        if (f->i < 0 || (double)f->i >= TIME_LIMIT_US) return BAIL;
        *ns = f->i * 1000;
        return OK;
    }
    if (f->kind != V_FLOAT) return BAIL;
    double v = f->f;
    if (!(v >= 0 && v < TIME_LIMIT_US)) return BAIL; /* NaN, infinite, negative or too late */
    double x = v * 1000.0;
    int64_t t = (int64_t)x;
    double rest = x - (double)t;
    if (rest > 0.5 || (rest == 0.5 && (t & 1))) t++;
    *ns = t;
    return OK;
}

/* kineto.py's ident(): a pid or tid, None, a name or a whole number. */
static int ident(const field* f, int64_t* type, int64_t* v) {
    if (f->kind == V_ABSENT || f->kind == V_NULL)
        *type = IDENT_NONE, *v = 0;
    else if (f->kind == V_TEXT)
        *type = IDENT_TEXT, *v = f->text;
    else if (f->kind == V_INT)
        *type = IDENT_INT, *v = f->i;
    else
        return BAIL;
    return OK;
}

static int whole(const field* f, int64_t fallback, int64_t lo, int64_t hi_inclusive, int64_t* out) {
    if (f->kind == V_ABSENT) {
        *out = fallback;
        return OK;
    }
    if (f->kind != V_INT || f->i < lo || f->i > hi_inclusive) return BAIL;
    *out = f->i;
    return OK;
}

static const char* const GPU_CATEGORIES[] = {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation"};

/* One element at c->p into *row; *has_row 0 for one kineto.py skips. */
static int element(cursor* c, int64_t index, scan_row* row, int* has_row) {
    scanner* s = c->s;
    *has_row = 0;
    if (*c->p != '{') return skip_value(c, 1);
    field f[N_KEYS] = {0}, a[N_ARGS] = {0};
    int args_is_object = 0;
    int r = members(c, KEYS, N_KEYS, f, a, &args_is_object);
    if (r) return r;
    if (!args_is_object) memset(a, 0, sizeof(a));
    memset(row, 0, sizeof(*row));
    row->index = index;
    track_key key = {0};
    if (is_text(s, &f[K_PH], "M")) {
        int thread = is_text(s, &f[K_NAME], "thread_name");
        if (!thread && !is_text(s, &f[K_NAME], "process_name")) return OK;
        row->kind = thread ? ROW_THREAD_NAME : ROW_PROCESS_NAME;
        if (a[A_NAME].kind == V_ABSENT)
            row->name = -1; /* "" */
        else if (a[A_NAME].kind == V_TEXT)
            row->name = a[A_NAME].text;
        else
            return BAIL;
        if (ident(&f[K_PID], &key.owner_type, &key.owner)) return BAIL;
        if (thread && ident(&f[K_TID], &key.lane_type, &key.lane)) return BAIL;
        key.kind = row->kind;
        if ((row->track = intern_track(s, &key)) < 0) return BAIL;
        *has_row = 1;
        return OK;
    }
    if (!is_text(s, &f[K_PH], "X")) return OK;
    if (micros(&f[K_TS], 1, &row->start_ns) || micros(&f[K_DUR], 0, &row->dur_ns)) return BAIL;
    if (f[K_NAME].kind == V_ABSENT)
        row->name = -1;
    else if (f[K_NAME].kind == V_TEXT)
        row->name = f[K_NAME].text;
    else
        return BAIL;
    if (f[K_CAT].kind == V_ABSENT)
        row->category = -1;
    else if (f[K_CAT].kind == V_TEXT && f[K_CAT].text_chars <= MAX_CATEGORY_CHARS)
        row->category = f[K_CAT].text;
    else
        return BAIL;
    int gpu = 0;
    for (int g = 0; g < 4; g++) gpu |= is_text(s, &f[K_CAT], GPU_CATEGORIES[g]);
    if (gpu) { /* Kineto's pid is the device here, its tid the stream */
        const field* device = a[A_DEVICE].kind != V_ABSENT ? &a[A_DEVICE] : &f[K_PID];
        const field* stream = a[A_STREAM].kind != V_ABSENT ? &a[A_STREAM] : &f[K_TID];
        if (whole(device, 0, 0, INT32_MAX, &key.owner) || whole(stream, 0, 0, INT64_MAX, &key.lane)) return BAIL;
        key.kind = ROW_STREAM, key.owner_type = key.lane_type = IDENT_INT;
        row->kind = ROW_STREAM;
        if (is_text(s, &f[K_CAT], "kernel")) {
            const field* d[2] = {&a[A_GRID], &a[A_BLOCK]};
            int64_t* out[2] = {row->grid, row->block};
            for (int k = 0; k < 2; k++) {
                if (d[k]->kind == V_ABSENT || d[k]->kind == V_NULL)
                    out[k][0] = out[k][1] = out[k][2] = -1;
                else if (d[k]->kind == V_DIMS)
                    memcpy(out[k], d[k]->dims, sizeof(d[k]->dims));
                else
                    return BAIL;
            }
            if (whole(&a[A_CORRELATION], -1, INT64_MIN, INT64_MAX, &row->correlation)) return BAIL;
            row->is_kernel = 1;
        }
    } else {
        if (ident(&f[K_PID], &key.owner_type, &key.owner) || ident(&f[K_TID], &key.lane_type, &key.lane)) return BAIL;
        key.kind = ROW_THREAD;
        row->kind = ROW_THREAD;
    }
    row->owner = key.owner, row->lane = key.lane;
    if ((row->track = intern_track(s, &key)) < 0) return BAIL;
    *has_row = 1;
    return OK;
}

/* Elements of the traceEvents array from buf (at an element, the array's opening
 * bracket and any first blank behind), each with its separator, into rows[]: at most
 * max_rows of them. *consumed is where the next call starts (after the closing
 * bracket at SCAN_END), *elements how many elements were read. Returns SCAN_END,
 * SCAN_FULL (rows[] full), SCAN_MORE (an element goes on past the buffer: call again
 * with more) or SCAN_BAIL (read the file in Python). */
int32_t kineto_scan(scanner* s, const uint8_t* buf, int64_t size, int32_t final, int64_t first_index, scan_row* rows,
                    int64_t max_rows, int64_t* n_rows, int64_t* consumed, int64_t* elements) {
    cursor c = {buf, buf + size, final, s};
    *n_rows = *consumed = *elements = 0;
    for (;;) {
        if (*n_rows >= max_rows) return SCAN_FULL;
        const uint8_t* start = c.p;
        skip_ws(&c);
        if (c.p >= c.end) return final ? SCAN_BAIL : SCAN_MORE;
        int has_row;
        int r = element(&c, first_index + *elements, &rows[*n_rows], &has_row);
        if (r == OK) {
            skip_ws(&c);
            if (c.p >= c.end)
                r = NEED(&c);
            else if (*c.p != ',' && *c.p != ']')
                r = BAIL;
        }
        if (s->failed) r = BAIL;
        if (r == MORE) return c.end - start > MAX_ELEMENT ? SCAN_BAIL : SCAN_MORE;
        if (r != OK) return SCAN_BAIL;
        *n_rows += has_row;
        *elements += 1;
        *consumed = ++c.p - buf;
        if (c.p[-1] == ']') return SCAN_END;
    }
}
