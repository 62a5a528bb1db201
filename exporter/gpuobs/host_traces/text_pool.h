/* Texts interned in first-seen order, for the host-trace C readers (kineto_scan.c,
 * nsys_columns.c): text i is data[offsets[i] .. offsets[i + 1]), found again through
 * an open-addressing table of FNV-1a hashes. text_pool.py reads one into Python. */
#pragma once
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* *p holds at least `need` items of `item` bytes (doubling); 0 when memory ran out. */
static int grow(void** p, int64_t* cap, int64_t need, size_t item) {
    if (need <= *cap) return 1;
    int64_t cap2 = *cap ? *cap : 64;
    while (cap2 < need) cap2 *= 2;
    void* q = realloc(*p, (size_t)cap2 * item);
    if (!q) return 0;
    *p = q;
    *cap = cap2;
    return 1;
}

static uint64_t fnv1a(const void* p, int64_t n) {
    uint64_t h = 1469598103934665603ull;
    for (int64_t i = 0; i < n; i++) h = (h ^ ((const uint8_t*)p)[i]) * 1099511628211ull;
    return h;
}

typedef struct {
    char* data;
    int64_t size, cap;
    int64_t* offsets;
    int64_t count, offsets_cap;
    int64_t* slots; /* text id + 1, 0 empty */
    int64_t mask;
} text_pool;

static void text_pool_free(text_pool* t) {
    free(t->data);
    free(t->offsets);
    free(t->slots);
}

static int text_pool_rehash(text_pool* t, int64_t slots) {
    int64_t* table = calloc((size_t)slots, sizeof(int64_t));
    if (!table) return 0;
    for (int64_t id = 0; id < t->count; id++) {
        int64_t a = t->offsets[id];
        uint64_t at = fnv1a(t->data + a, t->offsets[id + 1] - a) & (uint64_t)(slots - 1);
        while (table[at]) at = (at + 1) & (uint64_t)(slots - 1);
        table[at] = id + 1;
    }
    free(t->slots);
    t->slots = table;
    t->mask = slots - 1;
    return 1;
}

/* The id of text s[0..n), a new one when it is new and fewer than `limit` ids exist;
 * -1 when memory ran out or the limit is reached. */
static int64_t text_pool_intern(text_pool* t, const char* s, int64_t n, int64_t limit) {
    if ((t->count + 1) * 2 > t->mask + 1 && !text_pool_rehash(t, t->mask ? (t->mask + 1) * 2 : 1024)) return -1;
    uint64_t at = fnv1a(s, n) & (uint64_t)t->mask;
    for (; t->slots[at]; at = (at + 1) & (uint64_t)t->mask) {
        int64_t id = t->slots[at] - 1, a = t->offsets[id];
        if (t->offsets[id + 1] - a == n && memcmp(t->data + a, s, (size_t)n) == 0) return id;
    }
    if (t->count >= limit) return -1;
    if (!grow((void**)&t->offsets, &t->offsets_cap, t->count + 2, sizeof(int64_t)) ||
        !grow((void**)&t->data, &t->cap, t->size + n + 1, 1))
        return -1;
    if (t->count == 0) t->offsets[0] = 0;
    memcpy(t->data + t->size, s, (size_t)n);
    t->size += n;
    t->offsets[t->count + 1] = t->size;
    t->slots[at] = t->count + 1;
    return t->count++;
}
