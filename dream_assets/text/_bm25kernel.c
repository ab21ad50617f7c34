/* The compiled BM25 index behind dream_assets.text.bm25 (CompiledBm25Index).
 *
 * Layout: terms and document ids live in byte arenas (no Python object per term or id), found by binary search where
 * they lie in order (a first build sorts its terms and lays its documents out in id order; both are front-coded in
 * groups of 16 there, each keeping only the bytes it does not share with the one before) and through open-addressing
 * hash tables past that. A term's postings are (slot, tf, document length) in slot order, so scoring reads nothing
 * else. A term with one posting (most terms: ticket numbers, names) keeps it inline in an 8-byte term,
 * its document frequency and bound inputs implied by it; a term with more keeps them in a heap block whose header
 * holds what only it needs (posting count, document frequency, bound inputs), its postings packed CHUNK (64) at a time
 * (slot gaps, tfs and lengths, each at the fewest bits the chunk needs: a common word in every document takes a few
 * bits a posting) but for the last ones, kept as they are until CHUNK have come. A search unpacks a chunk's slots as
 * it reaches it and skips chunks by their last slots. Each slot has one record in a byte arena: its id, less the bytes
 * it shares with the record before (every 16th whole), and its length, as varints. Removing a document clears its
 * slot's alive flag and logs the slot; it visits none of its terms, whose document frequencies catch up with the log
 * when next asked for (term_df). Dead postings are dropped in one compaction once they outnumber the live documents,
 * which also hands back the capacity left unused.
 *
 * Search is MaxScore over the query terms' postings: terms whose summed upper bounds cannot reach the k-th best score
 * so far are only looked up (galloping search) for documents the others found. Short queries merge their essential
 * terms' postings document at a time; queries of WINDOW_TERMS terms or more (a save's lookup) read them a window of
 * slots at a time, adding each contribution to its document's sum in a tight loop, and read exactly only the
 * documents whose sum plus the other terms' bounds can reach the k-th best. Bounds are taken
 * at the document's length (postings carry it) and summed exactly as a score is, so a document whose bound is below
 * the k-th best, or equal to it with a later id, is dropped unscored; postings whose documents could not reach the
 * k-th best even holding every other query term are skipped without a look-up. A first build (add_many) lays the
 * slots out in id order whatever order the documents come in, so over the slots it built a tie is settled by slot
 * number and a term whose documents could only tie need not be read in full; documents added later take the slots
 * after them, where ties are settled by comparing ids.
 *
 * A first build may also come as arrays (add_arrays: UTF-8 ids and terms with offsets, each document's terms as ids into
 * the terms), how a persisted recall index is loaded: every offset, term id and string is checked before anything is
 * added, the terms are entered once each and the documents added as add_many adds them, so the index is the same.
 *
 * Scores are bit for bit those of the numpy path: each term's contribution is computed in float32 with the same
 * operations in the same order, idf = ln(1 + (N - df + 0.5) / (df + 0.5)) in double rounded to float32, and a
 * document's contributions are summed in double over its terms rarest first (ties by term). This file must be
 * compiled without floating-point contraction (-ffp-contract=off) for that to hold.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define EMPTY 0u
#define TOMB 0xFFFFFFFFu

/* A posting carries its document's length, so scoring reads the postings and nothing else. Whether it is a live
   document's is its slot's alive flag (a packed one reads tf 0 once unpacked, see chunk_fill); TF_BIG means the exact
   tf is in the index's overflow list, LEN_BIG that the length is in the slot's record. */
#define TF_BIG 0xFFFFu
#define LEN_BIG 0xFFFFu

typedef struct {
    uint32_t slot;
    uint16_t tf;
    uint16_t len;
} Posting;

typedef struct {
    uint32_t term, slot;
    float tf;
} BigTf;

/* A term's postings but the last few are packed CHUNK at a time: the slot gaps less one, the tfs less one and the
   lengths less the chunk's shortest, each at the fewest bits that hold the chunk's largest (none when all are 0:
   consecutive slots, every tf 1, one length). Whether a packed posting is live is its slot's alive flag, so removing a
   document changes no packed byte. */
#define CHUNK 64u

typedef struct {
    uint32_t last; /* the slot of the chunk's last posting */
    uint32_t off;  /* where its bytes begin in the block's packed bytes: slot bits, tf bits, length bits */
    uint16_t lenbase; /* the shortest of its documents' lengths (as postings hold them) */
    uint8_t wslot, wtf, wlen;
} Chunk;

/* The postings of a term with two or more lie on the heap behind this header, which holds what only such a term
   needs: its packed chunks, then the postings after them (the tail: at most CHUNK, unpacked). A term with one
   posting has it inline: its df is 1 while that document is live, else 0 (and the term's next posting takes its
   place), its maxtf the posting's tf and its minlen the posting's length. */
typedef struct {
    uint32_t n;       /* postings, dead ones included */
    uint32_t cap;     /* tail postings the block has room for */
    uint32_t df;      /* live documents holding the term, as of the first `seen` removals logged (see term_df) */
    uint32_t seen;
    float maxtf;      /* highest tf and shortest document over the postings, dead ones included until a compaction: */
    float minlen;     /* the MaxScore bound's inputs */
    uint32_t nchunks; /* packed chunks, CHUNK postings each, before the tail */
    uint32_t chunks_cap;
    Chunk *chunks;
    uint8_t *packed; /* the chunks' bits; 8 bytes past its length are always there (a read takes a word) */
    uint32_t packed_len, packed_cap;
} Block;

/* 8 bytes: there are about as many terms as documents (most are a ticket number's or a name's). Its kind is in
   its bits: none (all 0), its only posting (a posting's length is at least 1, so its top 16 bits are never all 0;
   little-endian) or a pointer to its block (user-space pointers leave the top 16 bits 0). Its bytes are in the term
   arena (see Index). */
typedef union {
    Block *heap;  /* two postings or more: the header, then the postings */
    Posting inl;  /* one: the only posting */
    uint64_t raw;
} Term;

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "a Term tells its kind by the top bytes of a posting's length: little-endian only"
#endif

static inline int is_block(const Term *t) { return t->raw && !(t->raw >> 48); }

/* The term's postings, dead ones included. */
static inline uint32_t term_n(const Term *t) { return !t->raw ? 0 : is_block(t) ? t->heap->n : 1; }

/* The term's postings move to block b (its n set by the caller). */
static inline void set_heap(Term *t, Block *b) {
    if ((uint64_t)(uintptr_t)b >> 48) abort(); /* no platform this builds on hands out such an address */
    t->raw = (uint64_t)(uintptr_t)b;
}

/* n postings, when 2 or more in the block the term points to (0: none; 1: the inline one says so itself). */
static inline void set_term_n(Term *t, uint32_t n) {
    if (n >= 2) t->heap->n = n;
    else if (n == 0) t->raw = 0;
}

typedef struct {
    PyObject_HEAD
    double k1, b;
    /* terms */
    Term *terms;
    uint32_t nterms, terms_cap;
    /* terms [0, terms_sorted) are in byte order (a first build sorts them), found by binary search over every 16th's
       first 8 bytes (term_heads); the others through term_table: index - terms_sorted + 1 and hash tag (see entry),
       or EMPTY. Their bytes are in termbuf: first the sorted terms' records, GROUP to a group, group g's first at
       tgrp[g] (a record is the bytes shared with the term before, none for a group's first, and the bytes that
       follow: see put_term), then the others' bytes as they are, term i's from toff[i - terms_sorted] up to the
       next's. Sorted terms share most of their bytes with the one before (numbers, words of one stem). */
    uint32_t *term_table;
    uint32_t term_mask, terms_sorted;
    uint64_t *term_heads;
    char *termbuf;
    size_t termbuf_len, termbuf_cap;
    uint32_t *tgrp;
    uint32_t *toff;
    size_t toff_cap;
    uint32_t term_longest; /* the most bytes a term added had: room to decode any of them */
    /* documents, by slot: the slots' records lie in docbuf in slot order, GROUP slots to a group, the group's first
       record at grp_off[slot / GROUP]. A record is varint bytes shared with the previous record's id (0 for a
       group's first), varint bytes that follow, those bytes, varint length in tokens: ids in order share most of
       their bytes with the one before. */
    uint32_t nslots, slots_cap, live, dead;
    uint32_t *removed; /* the slots removed since the last compaction (dead of them), in the order they were */
    size_t removed_cap;
    uint8_t *alive;
    uint32_t *grp_off;
    size_t grp_cap;
    uint8_t *docbuf;
    size_t docbuf_len, docbuf_cap;
    char *scratch;        /* room for two ids of the longest length indexed (scratch_cap each): ids decoded */
    uint32_t scratch_cap;
    /* the slots from sorted_upto on (those in id order are found by binary search): slot - sorted_upto + 1 and hash
       tag, EMPTY or a tombstone (see entry). sorted_upto only moves while no slot lies past it, so the entries hold. */
    uint32_t *id_table;
    uint32_t id_mask, id_used;
    int64_t total_length;
    uint64_t last_scored; /* documents the last search scored in full (what pruning saves shows here) */
    BigTf *big;           /* the tf of postings marked TF_BIG (a term 65,535 times or more in one document) */
    size_t nbig, big_cap;
    uint32_t sorted_upto; /* slots [0, sorted_upto) hold ascending ids: a document there loses a tie to every earlier one */
} Index;

/* ------------------------------------------------------------------ helpers */

static uint32_t hash_bytes(const char *s, Py_ssize_t n) {
    uint64_t h = 1469598103934665603ull;
    for (Py_ssize_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ull;
    }
    h ^= h >> 29;
    return (uint32_t)(h ^ (h >> 32));
}

static int grow(void **buf, size_t *cap, size_t need, size_t item) {
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 16;
    while (c < need) c += c / 2 + 16;
    void *p = realloc(*buf, c * item);
    if (!p) {
        PyErr_NoMemory();
        return -1;
    }
    *buf = p;
    *cap = c;
    return 0;
}

static inline Posting *block_postings(Block *b) { return (Posting *)(b + 1); }

/* The postings a term holds unpacked (a block's tail, or the inline one), and how many. */
static inline Posting *postings(Term *t) { return is_block(t) ? block_postings(t->heap) : &t->inl; }

static inline uint32_t tail_n(const Term *t) {
    return is_block(t) ? t->heap->n - t->heap->nchunks * CHUNK : term_n(t);
}


/* The largest a varint of a uint32 takes. */
#define VARINT_MAX 5

static inline uint8_t *put_varint(uint8_t *p, uint32_t v) {
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

static inline uint32_t get_varint(const uint8_t **p) {
    const uint8_t *q = *p;
    uint32_t v = *q & 0x7F;
    for (int shift = 7; *q++ & 0x80; shift += 7) v |= (uint32_t)(*q & 0x7F) << shift;
    *p = q;
    return v;
}

/* ------------------------------------------------------------------ term bytes */

/* A sorted term's record: one byte, the bytes it shares with the term before (high 4 bits) and the bytes that follow
   (low 4), or 0xFF and the two as varints when either is 15 or more; then the bytes that follow. At most
   1 + 2 * VARINT_MAX bytes more than the term. The record's bytes after `shared` ones of prev (n bytes in all). */
#define TERM_RECORD_MAX(n) ((size_t)(n) + 1 + 2 * VARINT_MAX)

static inline uint32_t shared_prefix(const char *a, uint32_t la, const char *b, uint32_t lb) {
    uint32_t k = 0;
    while (k < la && k < lb && a[k] == b[k]) k++;
    return k;
}

static inline size_t term_record_size(uint32_t shared, uint32_t n) {
    uint32_t more = n - shared;
    return shared < 15 && more < 15 ? 1 + (size_t)more : TERM_RECORD_MAX(more);
}

static inline uint8_t *put_term(uint8_t *w, uint32_t shared, const char *s, uint32_t n) {
    uint32_t more = n - shared;
    if (shared < 15 && more < 15) {
        *w++ = (uint8_t)(shared << 4 | more);
    } else {
        *w++ = 0xFF;
        w = put_varint(w, shared);
        w = put_varint(w, more);
    }
    memcpy(w, s + shared, more);
    return w + more;
}

/* The record at r: the bytes shared with the term before and the bytes that follow, which begin where it returns. */
static inline const uint8_t *term_head(const uint8_t *r, uint32_t *shared, uint32_t *more) {
    uint8_t h = *r++;
    if (h != 0xFF) {
        *shared = h >> 4;
        *more = h & 15u;
        return r;
    }
    *shared = get_varint(&r);
    *more = get_varint(&r);
    return r;
}

/* Sorted terms read in order: the term so far in term (room for the longest), its n bytes. */
typedef struct {
    const uint8_t *r;
    char *term;
    uint32_t n;
} TermWalk;

static inline void term_next(TermWalk *w) {
    uint32_t shared, more;
    w->r = term_head(w->r, &shared, &more);
    memcpy(w->term + shared, w->r, more);
    w->r += more;
    w->n = shared + more;
}

/* ------------------------------------------------------------------ packed chunks */

static inline uint32_t bits_for(uint32_t v) { return v ? 32u - (uint32_t)__builtin_clz(v) : 0u; }

/* The w bits (1 to 32) at bit `bit` of d, least significant first. */
static inline uint64_t load_le64(const uint8_t *d) {
    uint64_t word;
    memcpy(&word, d, sizeof word);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    word = __builtin_bswap64(word);
#endif
    return word;
}

static inline uint32_t get_bits(const uint8_t *d, uint64_t bit, uint32_t w) {
    return (uint32_t)((load_le64(d + (bit >> 3)) >> (bit & 7)) & ((1ull << w) - 1));
}

/* A chunk's CHUNK values of W bits each at d, eight at a time (W bytes a group), for each W from 1 to 32: with W a
   constant each value is a load, a shift and a mask. unpack_W puts them in v; slots_W takes them for slot gaps, each
   slot the one before (from prev, the slot before the chunk's first) plus its gap plus one, into out[].slot. */
#define BITS(W, j) (uint32_t)((load_le64(d + (j * W) / 8) >> ((j * W) % 8)) & ((1ull << W) - 1))
#define UNPACK(W)                                                                                                  \
    static void unpack_##W(const uint8_t *d, uint32_t *v) {                                                       \
        for (uint32_t g = 0; g < CHUNK; g += 8, d += W) {                                                          \
            _Pragma("GCC unroll 8") for (uint32_t j = 0; j < 8; j++) v[g + j] = BITS(W, j);                       \
        }                                                                                                          \
    }                                                                                                              \
    static void slots_##W(const uint8_t *d, Posting *out, uint32_t prev) {                                        \
        for (uint32_t g = 0; g < CHUNK; g += 8, d += W) {                                                          \
            _Pragma("GCC unroll 8") for (uint32_t j = 0; j < 8; j++) out[g + j].slot = prev += BITS(W, j) + 1;    \
        }                                                                                                          \
    }
UNPACK(1) UNPACK(2) UNPACK(3) UNPACK(4) UNPACK(5) UNPACK(6) UNPACK(7) UNPACK(8)
UNPACK(9) UNPACK(10) UNPACK(11) UNPACK(12) UNPACK(13) UNPACK(14) UNPACK(15) UNPACK(16)
UNPACK(17) UNPACK(18) UNPACK(19) UNPACK(20) UNPACK(21) UNPACK(22) UNPACK(23) UNPACK(24)
UNPACK(25) UNPACK(26) UNPACK(27) UNPACK(28) UNPACK(29) UNPACK(30) UNPACK(31) UNPACK(32)
#undef UNPACK
#undef BITS

static void (*const unpack_w[33])(const uint8_t *, uint32_t *) = {
    NULL,      unpack_1,  unpack_2,  unpack_3,  unpack_4,  unpack_5,  unpack_6,  unpack_7,  unpack_8,
    unpack_9,  unpack_10, unpack_11, unpack_12, unpack_13, unpack_14, unpack_15, unpack_16, unpack_17,
    unpack_18, unpack_19, unpack_20, unpack_21, unpack_22, unpack_23, unpack_24, unpack_25, unpack_26,
    unpack_27, unpack_28, unpack_29, unpack_30, unpack_31, unpack_32};

static void (*const slots_w[33])(const uint8_t *, Posting *, uint32_t) = {
    NULL,     slots_1,  slots_2,  slots_3,  slots_4,  slots_5,  slots_6,  slots_7,  slots_8,  slots_9,  slots_10,
    slots_11, slots_12, slots_13, slots_14, slots_15, slots_16, slots_17, slots_18, slots_19, slots_20, slots_21,
    slots_22, slots_23, slots_24, slots_25, slots_26, slots_27, slots_28, slots_29, slots_30, slots_31, slots_32};

/* CHUNK values of w bits each (0 to 32; a multiple of 8 bits in all), least significant first; past the end. */
static uint8_t *put_bits(uint8_t *d, const uint32_t *v, uint32_t w) {
    if (!w) return d;
    uint64_t acc = 0;
    uint32_t have = 0;
    for (uint32_t i = 0; i < CHUNK; i++) {
        acc |= (uint64_t)v[i] << have;
        for (have += w; have >= 8; have -= 8) {
            *d++ = (uint8_t)acc;
            acc >>= 8;
        }
    }
    return d;
}

/* The block's postings tail[0..CHUNK) packed as its next chunk (they follow its last packed one). -1 with a
   MemoryError set when there is no room, the block as it was. */
static int pack_chunk(Block *b, const Posting *tail) {
    uint32_t gaps[CHUNK], tfs[CHUNK], lens[CHUNK], orgap = 0, ortf = 0, orlen = 0, lenbase = LEN_BIG;
    uint32_t prev = b->nchunks ? b->chunks[b->nchunks - 1].last : 0xFFFFFFFFu; /* the first gap from slot -1 */
    for (uint32_t i = 0; i < CHUNK; i++) {
        orgap |= gaps[i] = tail[i].slot - prev - 1;
        prev = tail[i].slot;
        ortf |= tfs[i] = tail[i].tf ? tail[i].tf - 1u : 0u; /* a removed document's: its slot tells */
        if (tail[i].len < lenbase) lenbase = tail[i].len;
    }
    for (uint32_t i = 0; i < CHUNK; i++) orlen |= lens[i] = tail[i].len - lenbase;
    const uint32_t ws = bits_for(orgap), wt = bits_for(ortf), wl = bits_for(orlen), bytes = CHUNK / 8 * (ws + wt + wl);
    if (b->packed_len + (size_t)bytes + 8 > 0xFFFFFFF0u) {
        PyErr_SetString(PyExc_OverflowError, "bm25 kernel: a term's postings too long");
        return -1;
    }
    size_t pcap = b->packed_cap, ccap = b->chunks_cap;
    if (grow((void **)&b->packed, &pcap, (size_t)b->packed_len + bytes + 8, 1) < 0) return -1;
    b->packed_cap = (uint32_t)pcap;
    if (grow((void **)&b->chunks, &ccap, (size_t)b->nchunks + 1, sizeof(Chunk)) < 0) return -1;
    b->chunks_cap = (uint32_t)ccap;
    uint8_t *w = put_bits(b->packed + b->packed_len, gaps, ws);
    w = put_bits(w, tfs, wt);
    w = put_bits(w, lens, wl);
    memset(w, 0, 8);
    Chunk *c = &b->chunks[b->nchunks++];
    c->last = prev;
    c->off = b->packed_len;
    c->wslot = (uint8_t)ws;
    c->wtf = (uint8_t)wt;
    c->wlen = (uint8_t)wl;
    c->lenbase = (uint16_t)lenbase;
    b->packed_len += bytes;
    return 0;
}

/* ------------------------------------------------------------------ records */

#define GROUP 16u

/* Records read in slot order: the id so far in id (room for the longest), its n bytes, the length in tokens. */
typedef struct {
    const uint8_t *r;
    char *id;
    uint32_t n, ntok;
} RecWalk;

static inline void rec_next(RecWalk *w) {
    uint32_t shared = get_varint(&w->r), more = get_varint(&w->r);
    memcpy(w->id + shared, w->r, more);
    w->r += more;
    w->n = shared + more;
    w->ntok = get_varint(&w->r);
}

/* The walk at the slot's record: decoded from its group's first. */
static inline void rec_at(const Index *ix, uint32_t slot, char *buf, RecWalk *w) {
    w->r = ix->docbuf + ix->grp_off[slot / GROUP];
    w->id = buf;
    w->n = w->ntok = 0;
    for (uint32_t s = slot & ~(GROUP - 1); s <= slot; s++) rec_next(w);
}

/* The slot's id (*n bytes, UTF-8) in scratch buffer `which` (0 or 1), valid until that buffer is next used. */
static inline const char *slot_id(const Index *ix, uint32_t slot, int which, uint32_t *n) {
    RecWalk w;
    rec_at(ix, slot, ix->scratch + (size_t)which * ix->scratch_cap, &w);
    *n = w.n;
    return w.id;
}

/* The slot's length in tokens. Out of line: only documents of 65,535 tokens or more and removals take it, and
   scoring's loop stays small. */
static __attribute__((noinline)) uint32_t doc_ntok(const Index *ix, uint32_t slot) {
    RecWalk w;
    rec_at(ix, slot, ix->scratch, &w);
    return w.ntok;
}

static inline float doc_length(const Index *ix, uint32_t slot) { return (float)doc_ntok(ix, slot); }

/* The bytes a slot's record shares with the record before it (whose id is prev, pn bytes): none at a group's start. */
static inline uint32_t shared_bytes(uint32_t slot, const char *id, uint32_t n, const char *prev, uint32_t pn) {
    uint32_t shared = 0;
    if (slot % GROUP)
        while (shared < n && shared < pn && id[shared] == prev[shared]) shared++;
    return shared;
}

/* The record of a document whose id is id (n bytes), shared of them as the record before, at w; the end of it. At
   most n + 3 * VARINT_MAX bytes. */
static uint8_t *put_record(uint8_t *w, uint32_t shared, const char *id, uint32_t n, uint32_t ntok) {
    w = put_varint(w, shared);
    w = put_varint(w, n - shared);
    memcpy(w, id + shared, n - shared);
    return put_varint(w + (n - shared), ntok);
}

/* UTF-8 byte order is code point order: the order Python sorts str in. Ids are short and differ early, so a byte
   loop beats a call to memcmp. */
static inline int bytes_cmp(const char *a, uint32_t la, const char *b, uint32_t lb) {
    const unsigned char *x = (const unsigned char *)a, *y = (const unsigned char *)b;
    uint32_t n = la < lb ? la : lb;
    for (uint32_t i = 0; i < n; i++)
        if (x[i] != y[i]) return x[i] < y[i] ? -1 : 1;
    return la < lb ? -1 : (la > lb ? 1 : 0);
}

static BigTf *big_entry(const Index *ix, uint32_t term, uint32_t slot) {
    for (size_t i = 0; i < ix->nbig; i++)
        if (ix->big[i].term == term && ix->big[i].slot == slot) return &ix->big[i];
    return NULL;
}

static inline float tf_of(const Index *ix, uint32_t term, const Posting *p) {
    if (p->tf != TF_BIG) return (float)p->tf;
    const BigTf *e = big_entry(ix, term, p->slot);
    return e ? e->tf : (float)TF_BIG;
}

static inline float len_of(const Index *ix, const Posting *p) {
    return p->len != LEN_BIG ? (float)p->len : doc_length(ix, p->slot);
}

/* Where a chunk's tfs and lengths lie once its slots are unpacked. */
typedef struct {
    const uint8_t *tfbits, *lenbits;
    uint32_t wtf, wlen, lenbase;
} Fill;

/* The slots of chunk k of the block into out[0..CHUNK), and where its tfs and lengths lie in *f. */
static void chunk_slots(const Block *b, uint32_t k, Posting *out, Fill *f) {
    const Chunk *c = &b->chunks[k];
    const uint8_t *d = b->packed + c->off;
    const uint32_t ws = c->wslot;
    uint32_t prev = k ? b->chunks[k - 1].last : 0xFFFFFFFFu;
    if (!ws) {
        for (uint32_t i = 0; i < CHUNK; i++) out[i].slot = prev + 1 + i;
    } else {
        slots_w[ws](d, out, prev);
    }
    f->tfbits = d + CHUNK / 8 * ws;
    f->lenbits = f->tfbits + CHUNK / 8 * c->wtf;
    f->wtf = c->wtf;
    f->wlen = c->wlen;
    f->lenbase = c->lenbase;
}

/* Whether the slot's document is live; every one is while none has been removed. */
static inline int live_slot(const Index *ix, uint32_t slot) { return !ix->dead || ix->alive[slot]; }

/* The tf of the chunk's i-th posting as packed (a removed document's included). */
static inline uint32_t chunk_tf(const Fill *f, uint32_t i) {
    return f->wtf ? get_bits(f->tfbits, (uint64_t)i * f->wtf, f->wtf) + 1 : 1;
}

/* The tf (0 for a removed document's) and length of out[i], the i-th posting of a chunk whose slots are in out. */
static inline void chunk_fill(const Index *ix, Posting *out, uint32_t i, const Fill *f) {
    out[i].tf = live_slot(ix, out[i].slot) ? (uint16_t)chunk_tf(f, i) : 0;
    out[i].len = (uint16_t)(f->lenbase + (f->wlen ? get_bits(f->lenbits, (uint64_t)i * f->wlen, f->wlen) : 0));
}

/* Every posting of a chunk whose slots are in out filled in. */
static void chunk_fill_all(const Index *ix, Posting *out, const Fill *f) {
    uint32_t tfs[CHUNK], lens[CHUNK];
    if (f->wtf) unpack_w[f->wtf](f->tfbits, tfs);
    if (f->wlen) unpack_w[f->wlen](f->lenbits, lens);
    const uint8_t *alive = ix->dead ? ix->alive : NULL;
    for (uint32_t i = 0; i < CHUNK; i++) {
        uint32_t tf = f->wtf ? tfs[i] + 1 : 1;
        out[i].tf = !alive || alive[out[i].slot] ? (uint16_t)tf : 0;
        out[i].len = (uint16_t)(f->lenbase + (f->wlen ? lens[i] : 0));
    }
}

/* Chunk k of the block unpacked into out[0..CHUNK): slots, tfs and lengths. */
static void chunk_decode(const Index *ix, const Block *b, uint32_t k, Posting *out) {
    Fill f;
    chunk_slots(b, k, out, &f);
    chunk_fill_all(ix, out, &f);
}

/* Every posting of the term in slot order into out (term_n of them), as chunk_decode gives them. */
static void all_postings(const Index *ix, Term *t, Posting *out) {
    uint32_t k = 0;
    if (is_block(t))
        for (; k < t->heap->nchunks; k++) chunk_decode(ix, t->heap, k, out + (size_t)k * CHUNK);
    memcpy(out + (size_t)k * CHUNK, postings(t), (size_t)tail_n(t) * sizeof(Posting));
}

static inline uint32_t advance(const Posting *p, uint32_t n, uint32_t pos, uint32_t target);

/* Whether the term's block holds a posting of the slot: in its tail, or in the first chunk whose last slot reaches it. */
static int block_holds(const Term *t, uint32_t slot) {
    Block *b = t->heap;
    const Posting *tail = block_postings(b);
    const uint32_t tn = tail_n(t);
    if (tn && slot >= tail[0].slot) {
        uint32_t at = advance(tail, tn, 0, slot);
        return at < tn && tail[at].slot == slot;
    }
    uint32_t lo = 0, hi = b->nchunks;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (b->chunks[mid].last < slot)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == b->nchunks) return 0;
    Posting buf[CHUNK];
    Fill f;
    chunk_slots(b, lo, buf, &f);
    uint32_t at = advance(buf, CHUNK, 0, slot);
    return at < CHUNK && buf[at].slot == slot;
}

/* Live documents holding the term. A removal does not visit the terms of the document (no list of them is kept): the
   slot goes on the index's removed list, and a block's df is brought up to date when it is next asked for, by looking
   for each slot removed since in its postings, or by counting its live postings when that is less work. A term with
   one posting holds a live document or none. */
static uint32_t term_df(const Index *ix, Term *t) {
    if (!is_block(t)) return term_n(t) && live_slot(ix, t->inl.slot);
    Block *b = t->heap;
    const uint32_t pending = ix->dead - b->seen;
    if (!pending) return b->df;
    if (pending > b->nchunks) { /* about what looking each one up would cost */
        const Posting *tail = block_postings(b);
        const uint32_t tn = tail_n(t);
        uint32_t df = 0;
        Posting buf[CHUNK];
        Fill f;
        for (uint32_t k = 0; k < b->nchunks; k++) {
            chunk_slots(b, k, buf, &f);
            for (uint32_t i = 0; i < CHUNK; i++) df += ix->alive[buf[i].slot];
        }
        for (uint32_t i = 0; i < tn; i++) df += ix->alive[tail[i].slot];
        b->df = df;
    } else {
        for (uint32_t r = b->seen; r < ix->dead; r++) b->df -= (uint32_t)block_holds(t, ix->removed[r]);
    }
    b->seen = ix->dead;
    return b->df;
}

/* The MaxScore bound's inputs: a term with one posting takes them from it. */
static inline float term_maxtf(const Index *ix, const Term *t, uint32_t tid) {
    if (is_block(t)) return t->heap->maxtf;
    return term_n(t) ? tf_of(ix, tid, &t->inl) : 0.0f;
}

static inline float term_minlen(const Index *ix, const Term *t) {
    if (is_block(t)) return t->heap->minlen;
    return term_n(t) ? len_of(ix, &t->inl) : INFINITY;
}

static inline int idcmp(const Index *ix, uint32_t a, uint32_t b) {
    uint32_t la, lb;
    const char *x = slot_id(ix, a, 0, &la);
    const char *y = slot_id(ix, b, 1, &lb);
    return bytes_cmp(x, la, y, lb);
}

static void free_block(Block *b) {
    if (!b) return;
    free(b->chunks);
    free(b->packed);
    free(b);
}

static void free_all(Index *ix) {
    for (uint32_t i = 0; i < ix->nterms; i++)
        if (is_block(&ix->terms[i])) free_block(ix->terms[i].heap);
    free(ix->terms);
    free(ix->term_table);
    free(ix->term_heads);
    free(ix->termbuf);
    free(ix->tgrp);
    free(ix->toff);
    free(ix->alive);
    free(ix->grp_off);
    free(ix->docbuf);
    free(ix->scratch);
    free(ix->id_table);
    free(ix->big);
    free(ix->removed);
    ix->removed = NULL;
    ix->removed_cap = 0;
    ix->big = NULL;
    ix->nbig = ix->big_cap = 0;
    ix->terms = NULL;
    ix->term_table = NULL;
    ix->term_heads = NULL;
    ix->terms_sorted = 0;
    ix->termbuf = NULL;
    ix->tgrp = ix->toff = NULL;
    ix->toff_cap = 0;
    ix->term_longest = 0;
    ix->alive = NULL;
    ix->grp_off = NULL;
    ix->grp_cap = 0;
    ix->docbuf = NULL;
    ix->scratch = NULL;
    ix->scratch_cap = 0;
    ix->id_table = NULL;
    ix->nterms = ix->terms_cap = ix->term_mask = 0;
    ix->termbuf_len = ix->termbuf_cap = 0;
    ix->nslots = ix->slots_cap = ix->live = ix->dead = 0;
    ix->docbuf_len = ix->docbuf_cap = 0;
    ix->id_mask = ix->id_used = 0;
    ix->total_length = 0;
    ix->sorted_upto = 0;
}

/* ------------------------------------------------------------------ term table */

/* Both tables probe linearly and are kept at most 3/4 full; a table is rebuilt at least twice the entries it holds.
   An entry holds the index + 1 in its low bits (as many as the table has positions: at most 3/4 full, an index + 1
   never sets them all) and the hash's bits above those as a tag, so a probe reads the term or id only when the tag
   matches (the id table is also sized past the slot numbers it holds). EMPTY is 0; an entry whose low bits are all
   set is a removed id's tombstone. */
static inline uint32_t entry(uint32_t index, uint32_t h, uint32_t mask) { return (index + 1) | (h & ~mask); }

static inline int tag_matches(uint32_t e, uint32_t h, uint32_t mask) { return ((e ^ h) & ~mask) == 0; }

static inline int table_full(uint32_t used, uint32_t mask) { return ((size_t)used + 1) * 4 > ((size_t)mask + 1) * 3; }

static uint32_t table_size(size_t entries) {
    size_t size = 1024;
    while (size < entries * 2 + 2) size *= 2;
    return (uint32_t)size;
}

/* A table of `size` positions (none at 0): 0 with *table set, or -1 with a MemoryError set. */
static int table_alloc(uint32_t size, uint32_t **table) {
    *table = size ? calloc(size, sizeof(uint32_t)) : NULL;
    if (size && !*table) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

/* Term i's bytes (*n of them), i at terms_sorted or later. */
static inline const char *loose_term(const Index *ix, uint32_t i, uint32_t *n) {
    const uint32_t j = i - ix->terms_sorted;
    const size_t start = ix->toff[j], end = i + 1 < ix->nterms ? ix->toff[j + 1] : ix->termbuf_len;
    *n = (uint32_t)(end - start);
    return ix->termbuf + start;
}

/* The first term of sorted group g (kept whole), *n bytes. */
static inline const char *group_first(const Index *ix, uint32_t g, uint32_t *n) {
    uint32_t shared;
    return (const char *)term_head((const uint8_t *)ix->termbuf + ix->tgrp[g], &shared, n);
}

/* The term table, `size` positions (table from table_alloc), filled with the terms from terms_sorted on. */
static void term_table_fill(Index *ix, uint32_t *table, uint32_t size) {
    uint32_t mask = size ? size - 1 : 0;
    for (uint32_t i = ix->terms_sorted; size && i < ix->nterms; i++) {
        uint32_t n;
        const char *t = loose_term(ix, i, &n);
        uint32_t h = hash_bytes(t, n), at = h & mask;
        while (table[at] != EMPTY) at = (at + 1) & mask;
        table[at] = entry(i - ix->terms_sorted, h, mask);
    }
    free(ix->term_table);
    ix->term_table = table;
    ix->term_mask = mask;
}

/* The first 8 bytes, big-endian, zero-padded: in the order of the bytes wherever two differ. */
static inline uint64_t prefix8(const char *s, uint32_t n) {
    uint64_t v = 0;
    for (uint32_t j = 0; j < 8; j++) v = v << 8 | (j < n ? (unsigned char)s[j] : 0u);
    return v;
}

static inline uint64_t *alloc_heads(uint32_t sorted) {
    return malloc((size_t)((sorted + GROUP - 1) / GROUP + 1) * sizeof(uint64_t));
}

/* The sorted terms' groups' first 8 bytes in heads (from alloc_heads), once termbuf and tgrp hold them. */
static void install_heads(Index *ix, uint64_t *heads) {
    for (uint32_t g = 0; g * GROUP < ix->terms_sorted; g++) {
        uint32_t n;
        const char *first = group_first(ix, g, &n);
        heads[g] = prefix8(first, n);
    }
    free(ix->term_heads);
    ix->term_heads = heads;
}

/* The index of the term s (n bytes) in sorted group g, or -1. The records are compared with s as they are, not
   decoded: m is how many first bytes the term at hand shares with s, and every term before it sorts before s. */
static int64_t group_find(const Index *ix, uint32_t g, const char *s, uint32_t n) {
    const uint8_t *r = (const uint8_t *)ix->termbuf + ix->tgrp[g];
    const uint32_t end = g * GROUP + GROUP < ix->terms_sorted ? g * GROUP + GROUP : ix->terms_sorted;
    uint32_t m = 0;
    for (uint32_t t = g * GROUP; t < end; t++) {
        uint32_t shared, more;
        const uint8_t *x = term_head(r, &shared, &more);
        r = x + more;
        if (shared < m) return -1; /* it differs from the term before where that one agreed with s: above s */
        if (shared > m) continue;  /* it agrees with the term before where that one was below s */
        uint32_t j = 0;
        while (j < more && m + j < n && x[j] == (unsigned char)s[m + j]) j++;
        m += j;
        if (j == more) {
            if (m == n) return t;
            continue; /* a prefix of s */
        }
        if (m == n || x[j] > (unsigned char)s[m]) return -1; /* s is a prefix of it, or it sorts after s */
    }
    return -1;
}

/* The term's index, or -1 when absent. */
static int64_t term_find(const Index *ix, const char *s, Py_ssize_t n, uint32_t h) {
    if (ix->term_table) {
        const uint32_t mask = ix->term_mask;
        for (uint32_t i = h & mask;; i = (i + 1) & mask) {
            uint32_t e = ix->term_table[i];
            if (e == EMPTY) break;
            if (tag_matches(e, h, mask)) {
                uint32_t len, t = (e & mask) - 1 + ix->terms_sorted;
                const char *bytes = loose_term(ix, t, &len);
                if (len == (uint32_t)n && memcmp(bytes, s, n) == 0) return t;
            }
        }
    }
    if (!ix->terms_sorted) return -1;
    /* the group: the last whose first term is <= s */
    const uint64_t key = prefix8(s, (uint32_t)n);
    uint32_t lo = 0, hi = (ix->terms_sorted + GROUP - 1) / GROUP;
    while (hi - lo > 1) {
        uint32_t mid = lo + (hi - lo) / 2;
        uint64_t head = ix->term_heads[mid];
        int below = head < key;
        if (head == key) { /* the first 8 bytes alike: the whole first term */
            uint32_t len;
            const char *first = group_first(ix, mid, &len);
            below = bytes_cmp(first, len, s, (uint32_t)n) <= 0;
        }
        if (below) lo = mid;
        else hi = mid;
    }
    return group_find(ix, lo, s, (uint32_t)n);
}

static int64_t term_get_or_add(Index *ix, const char *s, Py_ssize_t n) {
    uint32_t h = hash_bytes(s, n);
    int64_t found = term_find(ix, s, n, h);
    if (found >= 0) return found;
    if (ix->nterms >= 0xFFFFFFF0u || ix->termbuf_len + (size_t)n > 0xFFFFFFF0u) {
        PyErr_SetString(PyExc_OverflowError, "bm25 kernel: too many distinct terms");
        return -1;
    }
    const uint32_t rel = ix->nterms - ix->terms_sorted; /* its index in the table */
    if (!ix->term_table || table_full(rel, ix->term_mask)) {
        uint32_t size = table_size((size_t)rel + 1), *table;
        if (table_alloc(size, &table) < 0) return -1;
        term_table_fill(ix, table, size);
    }
    size_t cap = ix->terms_cap;
    if (grow((void **)&ix->terms, &cap, ix->nterms + 1, sizeof(Term)) < 0) return -1;
    ix->terms_cap = (uint32_t)cap;
    if (grow((void **)&ix->termbuf, &ix->termbuf_cap, ix->termbuf_len + n, 1) < 0) return -1;
    if (grow((void **)&ix->toff, &ix->toff_cap, (size_t)rel + 1, sizeof(uint32_t)) < 0) return -1;
    memcpy(ix->termbuf + ix->termbuf_len, s, n);
    ix->terms[ix->nterms].raw = 0;
    ix->toff[rel] = (uint32_t)ix->termbuf_len;
    ix->termbuf_len += n;
    if ((uint32_t)n > ix->term_longest) ix->term_longest = (uint32_t)n;
    uint32_t i = h & ix->term_mask;
    while (ix->term_table[i] != EMPTY) i = (i + 1) & ix->term_mask;
    ix->term_table[i] = entry(rel, h, ix->term_mask);
    return ix->nterms++;
}

/* ------------------------------------------------------------------ id table */

/* The id table, `size` positions (table from table_alloc), filled with the live slots past sorted_upto. */
static void id_table_fill(Index *ix, uint32_t *table, uint32_t size) {
    uint32_t mask = size ? size - 1 : 0, used = 0;
    if (size && ix->nslots > ix->sorted_upto) {
        RecWalk w;
        rec_at(ix, ix->sorted_upto, ix->scratch, &w);
        for (uint32_t s = ix->sorted_upto;; ) {
            if (ix->alive[s]) {
                uint32_t h = hash_bytes(w.id, w.n), at = h & mask;
                while (table[at] != EMPTY) at = (at + 1) & mask;
                table[at] = entry(s - ix->sorted_upto, h, mask);
                used++;
            }
            if (++s == ix->nslots) break;
            rec_next(&w);
        }
    }
    free(ix->id_table);
    ix->id_table = table;
    ix->id_mask = mask;
    ix->id_used = used;
}

/* The id table rebuilt at `size` positions (none at 0). */
static int id_table_resize(Index *ix, uint32_t size) {
    uint32_t *table;
    if (table_alloc(size, &table) < 0) return -1;
    id_table_fill(ix, table, size);
    return 0;
}

/* The slot of the document with the id among slots [0, sorted_upto), dead ones included, by binary search over
   their groups' first ids, or -1. */
static int64_t sorted_find(const Index *ix, const char *s, uint32_t n) {
    if (!ix->sorted_upto) return -1;
    uint32_t lo = 0, hi = (ix->sorted_upto + GROUP - 1) / GROUP; /* the group: the last whose first id is <= s */
    while (hi - lo > 1) {
        uint32_t mid = lo + (hi - lo) / 2;
        const uint8_t *r = ix->docbuf + ix->grp_off[mid];
        get_varint(&r); /* a group's first record shares nothing */
        uint32_t len = get_varint(&r);
        if (bytes_cmp((const char *)r, len, s, n) <= 0) lo = mid;
        else hi = mid;
    }
    RecWalk w = {ix->docbuf + ix->grp_off[lo], ix->scratch, 0, 0};
    uint32_t end = lo * GROUP + GROUP < ix->sorted_upto ? lo * GROUP + GROUP : ix->sorted_upto;
    for (uint32_t slot = lo * GROUP; slot < end; slot++) {
        rec_next(&w);
        int c = bytes_cmp(w.id, w.n, s, n);
        if (c == 0) return slot;
        if (c > 0) break;
    }
    return -1;
}

/* The slot of the live document with the id, or -1. *pos is its id table position, or -1 when it lies before
   sorted_upto. */
static int64_t id_find(const Index *ix, const char *s, Py_ssize_t n, int64_t *pos) {
    *pos = -1;
    if (ix->id_table) {
        const uint32_t mask = ix->id_mask, h = hash_bytes(s, n);
        for (uint32_t i = h & mask;; i = (i + 1) & mask) {
            uint32_t e = ix->id_table[i];
            if (e == EMPTY) break;
            if ((e & mask) != mask && tag_matches(e, h, mask)) {
                uint32_t len, slot = (e & mask) - 1 + ix->sorted_upto;
                const char *id = slot_id(ix, slot, 0, &len);
                if (len == (uint32_t)n && memcmp(id, s, n) == 0) {
                    *pos = i;
                    return slot;
                }
            }
        }
    }
    int64_t slot = sorted_find(ix, s, (uint32_t)n);
    return slot >= 0 && ix->alive[slot] ? slot : -1;
}

/* ------------------------------------------------------------------ maintenance */

static void forget_postings(Term *t) {
    if (is_block(t)) free_block(t->heap);
    set_heap(t, NULL);
    set_term_n(t, 0);
}

/* The live document at the slot removed (pos: its id table position, as id_find gives it): its slot dead, and on
   the removed list (see term_df). -1 with a MemoryError set when the list has no room, the index as it was. */
static int remove_slot(Index *ix, uint32_t slot, int64_t pos) {
    if (grow((void **)&ix->removed, &ix->removed_cap, (size_t)ix->dead + 1, sizeof(uint32_t)) < 0) return -1;
    if (pos >= 0) ix->id_table[pos] = ix->id_mask; /* a tombstone */
    ix->alive[slot] = 0;
    ix->live--;
    ix->removed[ix->dead++] = slot;
    ix->total_length -= (int64_t)doc_ntok(ix, slot);
    return 0;
}

/* A term with a block down to its first posting, a live one in the tail: that posting back inline. */
static void move_inline(Term *t) {
    Posting only = block_postings(t->heap)[0];
    free_block(t->heap);
    t->inl = only;
    set_term_n(t, 1);
}

/* realloc to a smaller size; the block as it was when that fails (a smaller block is only ever a saving). */
static int shrink_block(void **p, size_t bytes) {
    if (!bytes) return 0;
    void *q = realloc(*p, bytes);
    if (!q) return 0;
    *p = q;
    return 1;
}

/* Hand back the arrays' capacity a compaction left unused. (Not after a first build: there the unused capacity is
   pages never touched, which hold no memory, and the next adds would pay to grow the arrays back.) */
static void shrink_to_fit(Index *ix) {
    if (ix->terms_cap > ix->nterms && shrink_block((void **)&ix->terms, (size_t)ix->nterms * sizeof(Term)))
        ix->terms_cap = ix->nterms;
    if (ix->termbuf_cap > ix->termbuf_len && shrink_block((void **)&ix->termbuf, ix->termbuf_len))
        ix->termbuf_cap = ix->termbuf_len;
    if (ix->docbuf_cap > ix->docbuf_len && shrink_block((void **)&ix->docbuf, ix->docbuf_len))
        ix->docbuf_cap = ix->docbuf_len;
    if (ix->slots_cap > ix->nslots && shrink_block((void **)&ix->alive, ix->nslots)) ix->slots_cap = ix->nslots;
}

/* The block's packed bytes, chunk list and tail cut to what they hold. */
static void fit_block(Term *t) {
    Block *b = t->heap;
    const uint32_t tn = tail_n(t);
    if (b->packed_cap > b->packed_len + 8 && shrink_block((void **)&b->packed, (size_t)b->packed_len + 8))
        b->packed_cap = b->packed_len + 8;
    if (b->chunks_cap > b->nchunks && shrink_block((void **)&b->chunks, (size_t)b->nchunks * sizeof(Chunk)))
        b->chunks_cap = b->nchunks;
    void *heap = b;
    if (tn < b->cap && shrink_block(&heap, sizeof(Block) + (size_t)tn * sizeof(Posting))) {
        set_heap(t, heap);
        t->heap->cap = tn;
    }
}

/* Every postings block cut to its postings. After a first build most of a block's spare room lies in heap memory
   reused from the smaller blocks it grew out of, so it is held, unlike the untouched pages past the arrays' ends; the
   terms the next adds extend grow again by half. */
static void fit_all_postings(Index *ix) {
    for (uint32_t i = 0; i < ix->nterms; i++)
        if (is_block(&ix->terms[i])) fit_block(&ix->terms[i]);
}

/* A block of the k >= 2 postings in p (live, in slot order), all but the last k % CHUNK packed; NULL with a
   MemoryError set when there is no room. */
static Block *block_of(const Posting *p, uint32_t k, uint32_t df, float maxtf, float minlen) {
    const uint32_t packed = k / CHUNK, tn = k - packed * CHUNK;
    Block *b = malloc(sizeof(Block) + (size_t)tn * sizeof(Posting));
    if (!b) {
        PyErr_NoMemory();
        return NULL;
    }
    memset(b, 0, sizeof(Block));
    b->cap = tn;
    b->df = df;
    b->maxtf = maxtf;
    b->minlen = minlen;
    for (uint32_t c = 0; c < packed; c++) {
        if (pack_chunk(b, p + (size_t)c * CHUNK) < 0) {
            free_block(b);
            return NULL;
        }
    }
    memcpy(block_postings(b), p + (size_t)packed * CHUNK, (size_t)tn * sizeof(Posting));
    b->n = k;
    Term t;
    set_heap(&t, b);
    fit_block(&t);
    return t.heap;
}

/* Renumber live slots densely, drop dead postings and unused terms, rebuild both tables. Every block, the records,
   the term bytes and both tables are made before anything changes, so running out of memory leaves the index as it
   was, only not compacted. */
static int compact(Index *ix) {
    uint32_t most = 1;
    for (uint32_t i = 0; i < ix->nterms; i++)
        if (term_n(&ix->terms[i]) > most) most = term_n(&ix->terms[i]);
    uint32_t *new_slot = malloc((size_t)(ix->nslots ? ix->nslots : 1) * sizeof(uint32_t));
    uint32_t *new_tid = malloc((size_t)(ix->nterms ? ix->nterms : 1) * sizeof(uint32_t));
    /* the kept terms' bytes, grown should the sorted ones' records take more (a term dropped, the next shares less) */
    size_t termbuf_cap = ix->termbuf_len + 64, tb = 0, toff_cap = 0;
    char *termbuf = malloc(termbuf_cap);
    uint32_t *tgrp = NULL, *toff = NULL, *term_table = NULL, *id_table = NULL;
    uint64_t *heads = NULL;
    char *tw = malloc(2 * (size_t)ix->term_longest + 2); /* a sorted term decoded, and the last one kept */
    /* the live records only, grown should one take more than it did (a group's first shares nothing) */
    size_t docbuf_cap = ix->docbuf_len + 64, docbuf_len = 0;
    uint8_t *docbuf = malloc(docbuf_cap);
    char *prev = ix->scratch + ix->scratch_cap; /* the last live id copied: the second scratch buffer */
    size_t grp_cap = (size_t)ix->live / GROUP + 1;
    uint32_t *grp_off = malloc(grp_cap * sizeof(uint32_t));
    Block **fresh = calloc(ix->nterms ? ix->nterms : 1, sizeof(Block *));
    Posting *all = malloc((size_t)most * sizeof(Posting));
    if (!new_slot || !new_tid || !termbuf || !tw || !docbuf || !grp_off || !fresh || !all) {
        PyErr_NoMemory();
        goto fail;
    }
    uint32_t live = 0;
    for (uint32_t s = 0; s < ix->nslots; s++) new_slot[s] = ix->alive[s] ? live++ : TOMB;
    /* the terms' new blocks (a term with one posting keeps it inline, or is dropped): postings of live slots only,
       the slots renumbered, bounds recomputed exactly; new_tid holds how many each keeps until the terms move */
    for (uint32_t i = 0; i < ix->nterms; i++) {
        Term *t = &ix->terms[i];
        new_tid[i] = term_n(t) == 1 && ix->alive[t->inl.slot];
        if (!is_block(t)) continue;
        all_postings(ix, t, all);
        uint32_t k = 0;
        float maxtf = 0.0f, minlen = INFINITY;
        for (uint32_t j = 0, n = term_n(t); j < n; j++) {
            uint32_t s = all[j].slot;
            if (!ix->alive[s]) continue;
            float len = len_of(ix, &all[j]), tf = tf_of(ix, i, &all[j]);
            if (tf > maxtf) maxtf = tf;
            if (len < minlen) minlen = len;
            all[k] = all[j];
            all[k].slot = new_slot[s];
            k++;
        }
        new_tid[i] = k;
        if (k && !(fresh[i] = block_of(all, k, k, maxtf, minlen))) goto fail;
    }
    /* documents: the live records written again, in groups of the new slots */
    RecWalk rw = {ix->docbuf, ix->scratch, 0, 0};
    uint32_t pn = 0, sorted = 0; /* the new slots from 0 in ascending id order */
    for (uint32_t s = 0; s < ix->nslots; s++) {
        rec_next(&rw);
        if (!ix->alive[s]) continue;
        uint32_t d = new_slot[s];
        if (grow((void **)&docbuf, &docbuf_cap, docbuf_len + rw.n + 3 * VARINT_MAX, 1) < 0) goto fail;
        if (d % GROUP == 0) grp_off[d / GROUP] = (uint32_t)docbuf_len;
        uint32_t shared = shared_bytes(d, rw.id, rw.n, prev, pn);
        docbuf_len = (size_t)(put_record(docbuf + docbuf_len, shared, rw.id, rw.n, rw.ntok) - docbuf);
        if (sorted == d && (!d || bytes_cmp(prev, pn, rw.id, rw.n) < 0)) sorted = d + 1;
        memcpy(prev, rw.id, rw.n);
        pn = rw.n;
    }
    /* the kept terms' bytes: the sorted ones' records written again, the others' bytes as they are; both tables */
    uint32_t tsorted = 0, nloose = 0;
    for (uint32_t i = 0; i < ix->nterms; i++)
        if (new_tid[i]) *(i < ix->terms_sorted ? &tsorted : &nloose) += 1;
    tgrp = malloc(((size_t)(tsorted + GROUP - 1) / GROUP + 1) * sizeof(uint32_t));
    toff_cap = (size_t)nloose + 1;
    toff = malloc(toff_cap * sizeof(uint32_t));
    heads = alloc_heads(tsorted);
    const uint32_t term_size = nloose ? table_size(nloose) : 0;
    const uint32_t id_size = live > sorted ? table_size(live - sorted) : 0;
    if (!tgrp || !toff || !heads) {
        PyErr_NoMemory();
        goto fail;
    }
    if (table_alloc(term_size, &term_table) < 0 || table_alloc(id_size, &id_table) < 0) goto fail;
    {
        TermWalk w = {(const uint8_t *)ix->termbuf, tw, 0};
        char *last = tw + ix->term_longest + 1; /* the last sorted term kept */
        uint32_t ln = 0, k = 0;
        for (uint32_t i = 0; i < ix->terms_sorted; i++) {
            term_next(&w);
            if (new_tid[i] == 0) continue;
            uint32_t shared = k % GROUP ? shared_prefix(last, ln, w.term, w.n) : 0;
            if (grow((void **)&termbuf, &termbuf_cap, tb + TERM_RECORD_MAX(w.n), 1) < 0) goto fail;
            if (k % GROUP == 0) tgrp[k / GROUP] = (uint32_t)tb;
            tb = (size_t)(put_term((uint8_t *)termbuf + tb, shared, w.term, w.n) - (uint8_t *)termbuf);
            memcpy(last + shared, w.term + shared, w.n - shared);
            ln = w.n;
            k++;
        }
        k = 0;
        for (uint32_t i = ix->terms_sorted; i < ix->nterms; i++) {
            if (new_tid[i] == 0) continue;
            uint32_t n;
            const char *t = loose_term(ix, i, &n);
            if (grow((void **)&termbuf, &termbuf_cap, tb + n, 1) < 0) goto fail;
            toff[k++] = (uint32_t)tb;
            memcpy(termbuf + tb, t, n);
            tb += n;
        }
        if (tb > 0xFFFFFFF0u) {
            PyErr_SetString(PyExc_OverflowError, "bm25 kernel: too many distinct terms");
            goto fail;
        }
    }
    /* from here on nothing fails */
    uint32_t nt = 0;
    for (uint32_t i = 0; i < ix->nterms; i++) {
        Term *t = &ix->terms[i];
        if (new_tid[i] == 0) { /* no live document holds it */
            if (is_block(t)) free_block(t->heap);
            new_tid[i] = TOMB;
            continue;
        }
        if (is_block(t)) {
            free_block(t->heap);
            set_heap(t, fresh[i]); /* its n is the postings kept, new_tid[i] */
            if (new_tid[i] == 1) move_inline(t);
        } else {
            t->inl.slot = new_slot[t->inl.slot];
        }
        new_tid[i] = nt;
        ix->terms[nt++] = *t;
    }
    /* overflow tfs follow their postings */
    size_t kept = 0;
    for (size_t e = 0; e < ix->nbig; e++) {
        BigTf b = ix->big[e];
        if (!ix->alive[b.slot] || new_tid[b.term] == TOMB) continue;
        b.slot = new_slot[b.slot];
        b.term = new_tid[b.term];
        ix->big[kept++] = b;
    }
    ix->nbig = kept;
    for (uint32_t s = 0; s < ix->nslots; s++)
        if (ix->alive[s]) ix->alive[new_slot[s]] = 1;
    free(new_slot);
    free(new_tid);
    free(fresh);
    free(all);
    free(tw);
    free(ix->termbuf);
    free(ix->tgrp);
    free(ix->toff);
    free(ix->docbuf);
    ix->termbuf = termbuf;
    ix->termbuf_cap = termbuf_cap;
    ix->termbuf_len = tb;
    ix->tgrp = tgrp;
    ix->toff = toff;
    ix->toff_cap = toff_cap;
    ix->terms_sorted = tsorted;
    ix->docbuf = docbuf;
    ix->docbuf_cap = docbuf_cap;
    ix->docbuf_len = docbuf_len;
    free(ix->grp_off);
    ix->grp_off = grp_off;
    ix->grp_cap = grp_cap;
    ix->nterms = nt;
    ix->nslots = live;
    ix->dead = 0; /* the removed list empty: every block's df is exact again */
    free(ix->removed);
    ix->removed = NULL;
    ix->removed_cap = 0;
    ix->sorted_upto = sorted;
    shrink_to_fit(ix);
    install_heads(ix, heads);
    term_table_fill(ix, term_table, term_size);
    id_table_fill(ix, id_table, id_size);
    return 0;
fail:
    if (fresh)
        for (uint32_t i = 0; i < ix->nterms; i++) free_block(fresh[i]);
    free(new_slot);
    free(new_tid);
    free(termbuf);
    free(tgrp);
    free(toff);
    free(heads);
    free(term_table);
    free(id_table);
    free(tw);
    free(docbuf);
    free(grp_off);
    free(fresh);
    free(all);
    return -1;
}

static int maybe_compact(Index *ix) {
    if (ix->dead > (ix->live > 1024 ? ix->live : 1024)) return compact(ix);
    return 0;
}

typedef struct {
    const char *s;
    Py_ssize_t n;
} Bytes;

/* Add one document: its id's bytes and its ntok tokens, as bytes (toks) or as the ids of terms the index holds already
   (pre, each below nterms: the caller checked). fresh: the caller knows the index holds no document of that id. */
static int add_doc_core(Index *ix, const char *ids, Py_ssize_t idn, const Bytes *toks, const uint32_t *pre,
                        Py_ssize_t ntok, int fresh) {
    uint32_t *tids = PyMem_Malloc((ntok ? ntok : 1) * sizeof(uint32_t)); /* the distinct terms, as first seen */
    if (!tids) {
        PyErr_NoMemory();
        return -1;
    }
    /* the most the slot's record takes: the id and three varints */
    size_t record = (size_t)idn + 3 * VARINT_MAX;
    if (ix->nslots >= 0xFFFFFFF0u || ix->docbuf_len + record > 0xFFFFFFF0u) {
        PyErr_SetString(PyExc_OverflowError, "bm25 kernel: too many documents");
        goto fail;
    }
    if ((uint64_t)idn > 0xFFFFFFFFu || (uint64_t)ntok > 0xFFFFFFFFu) {
        PyErr_SetString(PyExc_OverflowError, "bm25 kernel: a document id or token list too long");
        goto fail;
    }
    if ((uint32_t)idn > ix->scratch_cap) { /* room to decode the longest id, twice */
        char *p = realloc(ix->scratch, 2 * (size_t)idn);
        if (!p) goto nomem;
        ix->scratch = p;
        ix->scratch_cap = (uint32_t)idn;
    }
    if (!fresh) { /* the id's document is replaced */
        int64_t pos, found = id_find(ix, ids, idn, &pos);
        if (found >= 0 && remove_slot(ix, (uint32_t)found, pos) < 0) goto fail;
    }
    /* room for everything first, so a failure leaves the index as it was (less the replaced document) */
    uint32_t slot = ix->nslots;
    if ((size_t)slot + 1 > ix->slots_cap) {
        size_t c = ix->slots_cap ? ix->slots_cap + ix->slots_cap / 2 : 1024;
        void *p = realloc(ix->alive, c);
        if (!p) goto nomem;
        ix->alive = p;
        ix->slots_cap = (uint32_t)c;
    }
    if (grow((void **)&ix->grp_off, &ix->grp_cap, (size_t)slot / GROUP + 1, sizeof(uint32_t)) < 0) goto fail;
    if (grow((void **)&ix->docbuf, &ix->docbuf_cap, ix->docbuf_len + record, 1) < 0) goto fail;
    /* the record's bytes shared with the one before, and whether the slot keeps the slots in id order */
    uint32_t shared = 0;
    int in_order = ix->sorted_upto == slot;
    if (slot) {
        uint32_t pn;
        const char *prev = slot_id(ix, slot - 1, 1, &pn);
        shared = shared_bytes(slot, ids, (uint32_t)idn, prev, pn);
        in_order = in_order && bytes_cmp(prev, pn, ids, (uint32_t)idn) < 0;
    }
    /* the id table holds the slots past sorted_upto, dead ones included: it has room for this one */
    if (!in_order && (!ix->id_table || table_full(ix->id_used, ix->id_mask) ||
                      (size_t)(slot - ix->sorted_upto) + 2 > ix->id_mask)) {
        if (id_table_resize(ix, table_size((size_t)(slot - ix->sorted_upto) + 1)) < 0) goto fail;
    }
    const uint16_t len16 = ntok < (Py_ssize_t)LEN_BIG ? (uint16_t)ntok : (uint16_t)LEN_BIG;
    uint32_t distinct = 0;
    for (Py_ssize_t i = 0; i < ntok; i++) {
        int64_t tid = pre ? (int64_t)pre[i] : term_get_or_add(ix, toks[i].s, toks[i].n);
        if (tid < 0) goto fail_partial;
        Term *t = &ix->terms[tid];
        Posting *p = postings(t);
        uint32_t tn = tail_n(t); /* this slot's posting, once made, is the tail's last */
        if (tn && p[tn - 1].slot == slot) {
            Posting *q = &p[tn - 1];
            if (q->tf == TF_BIG) {
                big_entry(ix, (uint32_t)tid, slot)->tf += 1.0f;
            } else if (q->tf == TF_BIG - 1) {
                if (grow((void **)&ix->big, &ix->big_cap, ix->nbig + 1, sizeof(BigTf)) < 0) goto fail_partial;
                ix->big[ix->nbig].term = (uint32_t)tid;
                ix->big[ix->nbig].slot = slot;
                ix->big[ix->nbig++].tf = (float)TF_BIG;
                q->tf = TF_BIG;
            } else {
                q->tf++;
            }
            continue;
        }
        uint32_t n = term_n(t);
        if (n == 1 && !live_slot(ix, t->inl.slot)) n = 0; /* a removed document's: this one takes its place */
        if (n == 0) {
            t->inl.slot = slot;
            t->inl.tf = 1;
            t->inl.len = len16;
        } else {
            if (n == 1) { /* a second posting: the term's postings move to a block, its bound inputs with them */
                Block *b = malloc(sizeof(Block) + 4 * sizeof(Posting));
                if (!b) {
                    PyErr_NoMemory();
                    goto fail_partial;
                }
                memset(b, 0, sizeof(Block));
                block_postings(b)[0] = t->inl;
                b->cap = 4;
                b->df = 1;
                b->seen = ix->dead; /* the one posting is a live document's: none of the removals logged is in it */
                b->maxtf = tf_of(ix, (uint32_t)tid, &t->inl);
                b->minlen = len_of(ix, &t->inl);
                set_heap(t, b);
            } else if (tn == CHUNK) { /* a full tail: packed, and this posting begins the next */
                if (pack_chunk(t->heap, block_postings(t->heap)) < 0) goto fail_partial;
                tn = 0;
            } else if (tn + 1 > t->heap->cap) {
                uint32_t c = t->heap->cap + t->heap->cap / 2 + 2;
                if (c > CHUNK) c = CHUNK;
                Block *b = realloc(t->heap, sizeof(Block) + (size_t)c * sizeof(Posting));
                if (!b) {
                    PyErr_NoMemory();
                    goto fail_partial;
                }
                b->cap = c;
                set_heap(t, b);
            }
            Posting *q = &block_postings(t->heap)[tn];
            q->slot = slot;
            q->tf = 1;
            q->len = len16;
            t->heap->df++;
        }
        set_term_n(t, n + 1);
        tids[distinct++] = (uint32_t)tid;
    }
    float len = (float)ntok;
    for (uint32_t j = 0; j < distinct; j++) {
        uint32_t tid = tids[j];
        Term *t = &ix->terms[tid];
        if (!is_block(t)) continue; /* its one posting gives the bound inputs */
        Block *b = t->heap;
        float tf = tf_of(ix, tid, &block_postings(b)[tail_n(t) - 1]);
        if (tf > b->maxtf) b->maxtf = tf;
        if (len < b->minlen) b->minlen = len;
    }
    if (slot % GROUP == 0) ix->grp_off[slot / GROUP] = (uint32_t)ix->docbuf_len;
    ix->docbuf_len = (size_t)(put_record(ix->docbuf + ix->docbuf_len, shared, ids, (uint32_t)idn, (uint32_t)ntok) -
                              ix->docbuf);
    ix->alive[slot] = 1;
    ix->nslots++;
    ix->live++;
    ix->total_length += ntok;
    if (in_order) {
        ix->sorted_upto = slot + 1; /* the id table holds nothing: no slot lies past sorted_upto */
    } else {
        const uint32_t mask = ix->id_mask, h = hash_bytes(ids, idn);
        uint32_t i = h & mask;
        while (ix->id_table[i] != EMPTY && (ix->id_table[i] & mask) != mask) i = (i + 1) & mask;
        if (ix->id_table[i] == EMPTY) ix->id_used++;
        ix->id_table[i] = entry(slot - ix->sorted_upto, h, mask);
    }
    PyMem_Free(tids);
    return maybe_compact(ix);
fail_partial:
    /* postings already appended for this slot are taken back */
    for (uint32_t j = 0; j < distinct; j++) {
        Term *t = &ix->terms[tids[j]];
        uint32_t n = term_n(t);
        if (n == 1) {
            forget_postings(t);
        } else if (n == 2) { /* back inline: the posting before this slot's was the term's only one, a live one */
            move_inline(t);
        } else {
            set_term_n(t, n - 1);
            if (--t->heap->df == 0) forget_postings(t);
        }
    }
    {
        size_t kept = 0;
        for (size_t e = 0; e < ix->nbig; e++)
            if (ix->big[e].slot != slot) ix->big[kept++] = ix->big[e];
        ix->nbig = kept;
    }
    goto fail;
nomem:
    PyErr_NoMemory();
fail:
    PyMem_Free(tids);
    return -1;
}

static int add_doc(Index *ix, PyObject *doc_id, PyObject *tokens) {
    Py_ssize_t idn;
    const char *ids = PyUnicode_AsUTF8AndSize(doc_id, &idn);
    if (!ids) return -1;
    PyObject *seq = PySequence_Fast(tokens, "tokens must be a sequence of str");
    if (!seq) return -1;
    Py_ssize_t ntok = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    Bytes *toks = PyMem_Malloc((ntok ? ntok : 1) * sizeof(Bytes));
    int rc = -1;
    if (!toks) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < ntok; i++) { /* every token checked before anything changes */
        if (!PyUnicode_Check(items[i])) {
            PyErr_Format(PyExc_TypeError, "tokens must be str, not %.80s", Py_TYPE(items[i])->tp_name);
            goto done;
        }
        toks[i].s = PyUnicode_AsUTF8AndSize(items[i], &toks[i].n);
        if (!toks[i].s) goto done;
    }
    rc = add_doc_core(ix, ids, idn, toks, NULL, ntok, 0);
done:
    PyMem_Free(toks);
    Py_DECREF(seq);
    return rc;
}

/* ------------------------------------------------------------------ search */

/* Documents shorter than this have their length normalisation and single-occurrence contributions cached per query
   (the same float operations, done once per length instead of once per posting). */
#define SHORT 256

typedef struct {
    float k1, b, one_minus_b, avgdl, scale;
    float norm[SHORT]; /* 0: not computed yet */
} Consts;

/* A term's postings a segment at a time: each packed chunk (unpacked into buf as it is reached), then the tail (read in
   place). p[pos] is the posting at hand, and pos < n until the term's postings are all read. Cursors only move on. */
typedef struct {
    const Posting *p;
    const Index *ix;
    const Block *blk; /* NULL for a term with its one posting inline */
    Posting *buf;     /* CHUNK postings */
    uint32_t seg, nseg, tailn; /* the segment at hand; segments nseg (the tail) and before */
    Fill fill;       /* a chunk's slots are unpacked as it is reached, its tfs and lengths when read: */
    uint32_t filled; /* all of them once filled, else each as it is read */
    float *once; /* the contribution of tf 1 by document length (< SHORT); 0: not computed yet */
    uint32_t n, pos;
    float idf;
    double ub;
    uint32_t df, tid;
    const char *s;
    uint32_t slen;
    float maxtf, minlen; /* the term's bound inputs */
    int exact;           /* its bound at (maxtf, length) is the float32 contribution itself, not inflated */
    double *reach;       /* by length (< SHORT): the most a document holding the term once can score; < 0: not yet */
    uint32_t hope_tries, hope_skips; /* heads skip_hopeless looked at, postings it skipped: it gives up on few */
} Cursor;

typedef struct {
    double score;
    uint32_t slot;
} Hit;

static int cursor_order(const void *a, const void *b) { /* rarest first, ties by term */
    const Cursor *x = a, *y = b;
    if (x->df != y->df) return x->df < y->df ? -1 : 1;
    int c = memcmp(x->s, y->s, x->slen < y->slen ? x->slen : y->slen);
    if (c) return c;
    return x->slen < y->slen ? -1 : (x->slen > y->slen ? 1 : 0);
}

/* Whether slot a's id sorts after slot b's: among slots in id order the slots tell, without reading the ids. */
static inline int id_after(const Index *ix, uint32_t a, uint32_t b) {
    if (a < ix->sorted_upto && b < ix->sorted_upto) return a > b;
    return idcmp(ix, a, b) > 0;
}

/* a ranks below b: a lower score, or the same score and a later id */
static inline int worse(const Index *ix, double as, uint32_t aslot, double bs, uint32_t bslot) {
    if (as != bs) return as < bs;
    return id_after(ix, aslot, bslot);
}

static void sift_down(const Index *ix, Hit *h, uint32_t n, uint32_t i) {
    for (;;) {
        uint32_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && worse(ix, h[l].score, h[l].slot, h[m].score, h[m].slot)) m = l;
        if (r < n && worse(ix, h[r].score, h[r].slot, h[m].score, h[m].slot)) m = r;
        if (m == i) return;
        Hit tmp = h[i];
        h[i] = h[m];
        h[m] = tmp;
        i = m;
    }
}

static void sift_up(const Index *ix, Hit *h, uint32_t i) {
    while (i) {
        uint32_t parent = (i - 1) / 2;
        if (!worse(ix, h[i].score, h[i].slot, h[parent].score, h[parent].slot)) return;
        Hit tmp = h[i];
        h[i] = h[parent];
        h[parent] = tmp;
        i = parent;
    }
}

static inline float norm_of(Consts *k, float len) {
    uint32_t l = (uint32_t)len;
    if (l < SHORT) {
        float v = k->norm[l];
        if (v == 0.0f) v = k->norm[l] = k->k1 * (k->one_minus_b + (k->b * len) / k->avgdl);
        return v;
    }
    return k->k1 * (k->one_minus_b + (k->b * len) / k->avgdl);
}

/* idf * (tf * (k1 + 1)) / (tf + k1 * (1 - b + b * len / avgdl)), in float32 as the numpy path computes it */
static inline float contribution(const Cursor *c, Consts *k, float tf, float len) {
    uint32_t l = (uint32_t)len;
    if (tf == 1.0f && l < SHORT) {
        float v = c->once[l];
        if (v == 0.0f) v = c->once[l] = (c->idf * (tf * k->scale)) / (tf + norm_of(k, len));
        return v;
    }
    return (c->idf * (tf * k->scale)) / (tf + norm_of(k, len));
}

static inline uint32_t advance(const Posting *p, uint32_t n, uint32_t pos, uint32_t target) {
    if (pos >= n || p[pos].slot >= target) return pos;
    uint32_t lo = pos, hi, step = 1;
    for (;;) {
        hi = lo + step;
        if (hi >= n) {
            hi = n;
            break;
        }
        if (p[hi].slot >= target) break;
        lo = hi;
        step <<= 1;
    }
    lo++; /* p[lo - 1] < target; the answer is in [lo, hi] */
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (p[mid].slot < target)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static void cursor_load(Cursor *c, uint32_t k) {
    c->seg = k;
    c->pos = 0;
    if (k < c->nseg) {
        chunk_slots(c->blk, k, c->buf, &c->fill);
        c->p = c->buf;
        c->n = CHUNK;
        c->filled = 0;
    } else {
        c->p = c->blk ? block_postings((Block *)c->blk) : c->p;
        c->n = c->tailn;
        c->filled = 1;
    }
}

/* The posting at hand, its tf and length read. */
static inline const Posting *cursor_posting(Cursor *c) {
    if (!c->filled) chunk_fill(c->ix, c->buf, c->pos, &c->fill);
    return &c->p[c->pos];
}

/* The tf of the posting at hand, a live document's (its length is known): only its tf bits are read. */
static inline float cursor_tf(Cursor *c) {
    Posting q = c->p[c->pos];
    if (!c->filled) q.tf = (uint16_t)chunk_tf(&c->fill, c->pos);
    return tf_of(c->ix, c->tid, &q);
}

/* Every posting of the segment at hand read, for a loop over them. */
static inline void cursor_fill(Cursor *c) {
    if (c->filled) return;
    chunk_fill_all(c->ix, c->buf, &c->fill);
    c->filled = 1;
}

/* The next posting, past the segment's end into the next segment, read whole: what moves a posting at a time reads
   each one. */
static inline void cursor_next(Cursor *c) {
    if (++c->pos >= c->n && c->seg < c->nseg) {
        cursor_load(c, c->seg + 1);
        cursor_fill(c);
    }
}

/* cursor_seek past the segment at hand. */
static __attribute__((noinline)) void cursor_seek_on(Cursor *c, uint32_t target) {
    if (c->seg >= c->nseg) { /* the tail, and every posting in it below target */
        c->pos = c->n;
        return;
    }
    /* the first later chunk whose last slot reaches target, else the tail: galloping from the chunk at hand */
    const Chunk *ch = c->blk->chunks;
    uint32_t lo = c->seg + 1, hi = lo, step = 1;
    while (hi < c->nseg && ch[hi].last < target) {
        lo = hi + 1;
        hi += step;
        step <<= 1;
    }
    if (hi > c->nseg) hi = c->nseg;
    while (lo < hi) { /* the answer is in [lo, hi]: ch[hi] reaches target, or hi is the tail */
        uint32_t mid = lo + (hi - lo) / 2;
        if (ch[mid].last < target)
            lo = mid + 1;
        else
            hi = mid;
    }
    cursor_load(c, lo);
    c->pos = advance(c->p, c->n, 0, target);
}

/* The first posting of a slot >= target (or the end). */
static inline void cursor_seek(Cursor *c, uint32_t target) {
    if (c->pos >= c->n) return;
    if (c->p[c->n - 1].slot >= target)
        c->pos = advance(c->p, c->n, c->pos, target);
    else
        cursor_seek_on(c, target);
}

/* Queries of at most this many terms get exact bound sums (summed in the score's order) and per-length bound rows. */
#define EXACT_TERMS 64
/* and at most this many, bounds of the essential split taken at one document length */
#define SPLIT_TERMS 24

/* The most the term adds to a document of length len: nothing below its shortest document, else its contribution at
   its highest tf. Contributions fall with length exactly (each float operation is monotone), and rise with tf; when
   the term is exact that rise is far above float32 rounding (or every tf is 1) so the float32 value itself bounds every
   posting, which lets a bound equal a score and a tie at the cut-off be settled by id. Otherwise it is inflated. */
static inline double term_bound(Cursor *c, Consts *k, float len) {
    if (len < c->minlen) return 0.0;
    double v = (double)contribution(c, k, c->maxtf, len);
    return c->exact ? v : v * (1.0 + 1e-5) + 1e-9;
}

/* row[r]: the bounds at length len of the terms ord[0..r], summed (cached per short length). */
static const double *length_row(Cursor *cur, Consts *k, const uint32_t *ord, uint32_t m, double *rows, uint8_t *done,
                                double *scratch, float len) {
    uint32_t l = (uint32_t)len;
    int cached = rows && l < SHORT;
    double *row = cached ? rows + (size_t)l * m : scratch;
    if (cached && done[l]) return row;
    double run = 0.0;
    for (uint32_t r = 0; r < m; r++) row[r] = run += term_bound(&cur[ord[r]], k, len);
    if (cached) done[l] = 1;
    return row;
}

/* A document's bound summed exactly as its score would be (over the query's terms rarest first, in double): the
   contributions found, the bound at len of the terms not looked up yet (rank <= last), nothing for the others. Each
   part is at least the score's and rounding is monotone, so the bound is never below the score. */
static double ordered_bound(Cursor *cur, Consts *k, uint32_t m, const uint32_t *rank, uint32_t last,
                            const uint32_t *touched, const float *values, uint32_t nt, double *scratch, float len) {
    for (uint32_t j = 0; j < m; j++) scratch[j] = rank[j] <= last ? term_bound(&cur[j], k, len) : 0.0;
    for (uint32_t a = 0; a < nt; a++) scratch[touched[a]] = (double)values[a];
    double sum = 0.0;
    for (uint32_t j = 0; j < m; j++) sum += scratch[j];
    return sum;
}

/* Skip the postings of tf 1 whose documents cannot reach cut even if they held every other query term (each at its
   bound at the document's length): whichever term a skipped document is met by later, it scores below cut. */
static double reach_at(Cursor *cur, Consts *k, uint32_t m, Cursor *c, double *full, uint32_t l) {
    float len = (float)l;
    double all = full[l];
    if (all < 0.0) {
        all = 0.0;
        for (uint32_t j = 0; j < m; j++) all += term_bound(&cur[j], k, len);
        full[l] = all;
    }
    return c->reach[l] = all - term_bound(c, k, len) + (double)contribution(c, k, 1.0f, len);
}

static inline void skip_hopeless(Cursor *cur, Consts *k, uint32_t m, Cursor *c, double *full, double cut) {
    if (c->hope_tries >= 256 && c->hope_skips < c->hope_tries / 2) return;
    c->hope_tries++;
    for (;;) {
        cursor_fill(c);
        const Posting *q = c->p + c->pos, *end = c->p + c->n;
        for (; q < end && q->tf == 1 && q->len < SHORT; q++) {
            double v = c->reach[q->len];
            if (v < 0.0) v = reach_at(cur, k, m, c, full, q->len);
            if (v >= cut) break;
        }
        c->hope_skips += (uint32_t)(q - (c->p + c->pos));
        c->pos = (uint32_t)(q - c->p);
        if (q < end || c->seg >= c->nseg) return;
        cursor_load(c, c->seg + 1);
    }
}

/* What a search carries from one document to the next. */
typedef struct {
    Index *ix;
    Cursor *cur;
    Consts *consts;
    uint32_t m;
    const uint32_t *ord, *rank; /* the terms by ascending bound; each term's place in ord */
    double *rows, *lrow, *scratch;
    uint8_t *done_len;
    uint32_t *touched; /* the terms found in the document at hand, and their contributions */
    float *values;
    Hit *heap;
    uint32_t heap_size, hn;
    double thr; /* the k-th best score once the heap is full, else -1 */
    uint64_t scored;
} Search;

/* Whether the term ord[r] holds document d (of length len), its contribution then appended to touched/values at nt
   and put in *v. Its cursor moves to d, so documents are to be read in slot order. */
static inline int read_term(Search *s, uint32_t r, uint32_t d, float len, uint32_t nt, float *v) {
    Cursor *c = &s->cur[s->ord[r]];
    cursor_seek(c, d);
    if (c->pos >= c->n || c->p[c->pos].slot != d) return 0;
    s->touched[nt] = s->ord[r];
    s->values[nt] = *v = contribution(c, s->consts, cursor_tf(c), len);
    return 1;
}

/* The contributions to document d of the terms ord[p..m), appended after the nt in touched/values; the new count. */
static uint32_t read_terms(Search *s, uint32_t p, uint32_t d, float len, uint32_t nt) {
    float v;
    for (uint32_t r = p; r < s->m; r++) nt += read_term(s, r, d, len, nt, &v);
    return nt;
}

/* Document d (of length len), for which the terms ord[p..m) have been read (nt contributions in touched/values, summed
   in partial): the other terms are looked up highest bound first, each bounded at d's length, and d is dropped once
   its bound is below the k-th best, or equal to it with a later id (a bound that close is summed as the score is, so
   an equal bound means the score can at best tie). Else d is scored and offered to the heap. Returns whether the heap
   is full and its k-th best has changed. */
static int offer(Search *s, uint32_t p, uint32_t d, float len, uint32_t nt, double partial, int unread) {
    Index *ix = s->ix;
    Cursor *cur = s->cur;
    uint32_t *touched = s->touched;
    float *values = s->values;
    const double thr = s->thr;
    /* unread: partial is the essential terms' sum but their contributions are read only when needed (found in
       touched/values), which a document dropped on its bound never is */
    const double *row = p && thr >= 0.0 ? length_row(cur, s->consts, s->ord, s->m, s->rows, s->done_len, s->lrow, len) : NULL;
    for (uint32_t r = p; r-- > 0;) {
        Cursor *c = &cur[s->ord[r]];
        if (row) {
            double a = partial + row[r], tol = thr * 1e-9;
            if (a < thr - tol) return 0;
            if (a <= thr + tol) {
                if (unread) nt = read_terms(s, p, d, len, nt);
                unread = 0;
                double e = ordered_bound(cur, s->consts, s->m, s->rank, r, touched, values, nt, s->scratch, len);
                if (e < thr || (e == thr && id_after(ix, d, s->heap[0].slot))) return 0;
            }
        }
        if (len < c->minlen) continue; /* too short to hold the term */
        float v;
        if (read_term(s, r, d, len, nt, &v)) {
            nt++;
            partial += v;
        }
    }
    if (unread) nt = read_terms(s, p, d, len, nt);
    /* the score, summed over the document's terms rarest first */
    for (uint32_t a = 1; a < nt; a++) {
        uint32_t x = touched[a];
        float xv = values[a];
        uint32_t b2 = a;
        while (b2 && touched[b2 - 1] > x) {
            touched[b2] = touched[b2 - 1];
            values[b2] = values[b2 - 1];
            b2--;
        }
        touched[b2] = x;
        values[b2] = xv;
    }
    double score = 0.0;
    for (uint32_t a = 0; a < nt; a++) score += (double)values[a];
    s->scored++;
    Hit *heap = s->heap;
    if (s->hn < s->heap_size) {
        heap[s->hn].score = score;
        heap[s->hn].slot = d;
        sift_up(ix, heap, s->hn++);
        return s->hn == s->heap_size;
    }
    if (!worse(ix, heap[0].score, heap[0].slot, score, d)) return 0;
    heap[0].score = score;
    heap[0].slot = d;
    sift_down(ix, heap, s->hn, 0);
    return 1;
}

/* Document-at-a-time MaxScore over the documents in slots below end, from the split p (non-essential terms: ord[0..p),
   tie_split as below), the split moved as soon as the k-th best rises; prune = 0 scores every posting. Long queries
   (no bound rows) take it for every slot, the window search for windows where few terms are essential. */
static void daat_search(Search *s, const double *prefix, double *reach, int prune, uint32_t p, int tie_split,
                        uint32_t end) {
    Index *ix = s->ix;
    Cursor *cur = s->cur;
    Consts *consts = s->consts;
    const uint32_t m = s->m, *ord = s->ord;
    /* tie_split: the split admits ties, for the documents still to come sit in id order after the heap's */
    for (;;) {
        uint32_t d = 0xFFFFFFFFu;
        for (uint32_t r = p; r < m; r++) {
            const Cursor *c = &cur[ord[r]];
            if (c->pos < c->n && c->p[c->pos].slot < d) d = c->p[c->pos].slot;
        }
        if (tie_split && d >= ix->sorted_upto) {
            /* past the slots in id order: a document only the non-essential terms hold may tie and win again */
            tie_split = 0;
            uint32_t q = 0;
            while (q < p && prefix[q] < s->thr) q++;
            for (uint32_t r = q; r < p; r++) {
                cursor_seek(&cur[ord[r]], ix->sorted_upto);
            }
            p = q;
            continue;
        }
        if (d >= end) break;
        int live_doc = -1; /* told once, at the first posting found */
        float len = 0.0f;
        uint32_t nt = 0;
        double partial = 0.0;
        for (uint32_t r = p; r < m; r++) {
            Cursor *c = &cur[ord[r]];
            if (c->pos < c->n && c->p[c->pos].slot == d) {
                const Posting *q = cursor_posting(c);
                if (live_doc < 0) {
                    live_doc = live_slot(ix, d);
                    len = len_of(ix, q);
                }
                if (live_doc) {
                    float v = contribution(c, consts, tf_of(ix, c->tid, q), len);
                    s->touched[nt] = ord[r];
                    s->values[nt++] = v;
                    partial += v;
                }
                cursor_next(c);
                /* with more lists read in full the merge costs what a skip would save */
                if (reach && s->thr > 0.0 && m - p <= 2) skip_hopeless(cur, consts, m, c, reach, s->thr - s->thr * 1e-9);
            }
        }
        if (!live_doc || !offer(s, p, d, len, nt, partial, 0) || !prune) continue;
        s->thr = s->heap[0].score;
        /* Among slots in id order every later document loses a tie, so one that only terms summing to exactly the
           k-th best hold cannot enter either. */
        tie_split = d < ix->sorted_upto;
        while (p < m && (prefix[p] < s->thr || (tie_split && prefix[p] == s->thr))) p++;
        if (reach && m - p <= 2)
            for (uint32_t r = p; r < m; r++) skip_hopeless(cur, consts, m, &cur[ord[r]], reach, s->thr - s->thr * 1e-9);
    }
}

/* The window search reads the essential terms' postings a window of slots at a time, the first windows short so the
   split settles early, then WINDOW_SLOTS wide. */
#define WINDOW_FIRST 16u
#define WINDOW_SLOTS 16384u
/* Queries of fewer terms are merged document at a time throughout: with so few lists the merge is cheap, and it skips
   hopeless postings the window search would read. */
#define WINDOW_TERMS 6u

/* A contribution v to the window's document o (of length len): its sum begun or added to. */
static inline void gather(double *acc, uint64_t *bits, float *lens, uint32_t o, float len, float v) {
    uint64_t bit = 1ull << (o & 63);
    if (bits[o >> 6] & bit) {
        acc[o] += (double)v;
    } else {
        bits[o >> 6] |= bit;
        acc[o] = (double)v;
        lens[o] = len;
    }
}

/* MaxScore a window of slots at a time. The split into essential and non-essential terms is set at each window's
   start from the k-th best so far; the essential terms' postings in the window are read straight through, each
   contribution added to its document's sum (in whatever order: that sum only filters), and only documents whose sum
   plus the non-essential terms' bounds at their length can reach the k-th best are then read exactly (offer), in slot
   order. A tight loop over contiguous postings instead of a merge across terms per document. Returns 0 with a
   MemoryError set if its buffers cannot be had. */
static int window_search(Search *s, const double *prefix, double *reach) {
    Index *ix = s->ix;
    Cursor *cur = s->cur;
    Consts *consts = s->consts;
    const uint32_t m = s->m, *ord = s->ord;
    uint32_t wmax = ix->nslots < WINDOW_SLOTS ? (ix->nslots + 63) & ~63u : WINDOW_SLOTS;
    double *acc = PyMem_Malloc((size_t)wmax * sizeof(double));
    float *lens = PyMem_Malloc((size_t)wmax * sizeof(float));
    uint64_t *bits = PyMem_Calloc(wmax / 64, sizeof(uint64_t));
    double rest[SHORT];
    int ok = acc && lens && bits;
    if (!ok) PyErr_NoMemory();
    uint32_t width = WINDOW_FIRST;
    for (uint32_t w = 0; ok && w < ix->nslots;) {
        uint32_t end = ix->nslots - w > width ? w + width : ix->nslots;
        if (w < ix->sorted_upto && end > ix->sorted_upto) end = ix->sorted_upto;
        if (width < wmax) width = width * 2 < wmax ? width * 2 : wmax;
        /* Every document of the window comes after every one held; within the slots in id order it also loses a tie
           to each of them, so terms summing to exactly the k-th best need not be read either. */
        int ties_lose = s->hn == s->heap_size && end <= ix->sorted_upto;
        uint32_t p = 0;
        if (s->thr >= 0.0)
            while (p < m && (prefix[p] < s->thr || (ties_lose && prefix[p] == s->thr))) p++;
        /* The two highest-bound terms that could be left out are read anyway: a non-essential term costs a look-up
           in its list for every candidate, which on a long query (a save's lookup) costs more than reading its
           postings through. Always exact (fewer terms left out only prunes less); measured with
           benchmarks/recall.py, lookup p50 at 1M 2.2 -> 1.6 ms (recall unchanged). Not when every term can be left
           out: then no document of the window can enter, and nothing is read. */
        if (p < m) p = p > 2 ? p - 2 : 0;
        for (uint32_t r = p; r < m; r++) cursor_seek(&cur[ord[r]], w);
        if (reach && s->thr > 0.0 && m - p <= 2) {
            /* one or two lists to read: merged, their hopeless postings skipped unread */
            daat_search(s, prefix, reach, 1, p, ties_lose, end);
            w = end;
            continue;
        }
        for (uint32_t l = 0; l < SHORT; l++) rest[l] = -1.0;
        for (uint32_t r = p; r < m; r++) {
            Cursor *c = &cur[ord[r]];
            /* read through the window's segments, then back to where it begins: the documents that pass are read
               exactly from there on */
            const uint32_t seg = c->seg, pos = c->pos;
            for (;;) {
                cursor_fill(c);
                const Posting *q = c->p + c->pos, *stop = c->p + c->n;
                /* a removed document's posting: tf 0 in a chunk, its alive flag in the tail */
                const uint8_t *dead_in = c->seg >= c->nseg && ix->dead ? ix->alive : NULL;
                for (; q < stop && q->slot < end; q++) {
                    if (!q->tf || (dead_in && !dead_in[q->slot])) continue;
                    float len = len_of(ix, q);
                    gather(acc, bits, lens, q->slot - w, len, contribution(c, consts, tf_of(ix, c->tid, q), len));
                }
                if (q < stop || c->seg >= c->nseg) break;
                cursor_load(c, c->seg + 1);
            }
            if (c->seg != seg) cursor_load(c, seg);
            c->pos = pos;
        }
        for (uint32_t wi = 0, words = (end - w + 63) / 64; wi < words; wi++) {
            uint64_t word = bits[wi];
            bits[wi] = 0;
            while (word) {
                uint32_t o = wi * 64 + (uint32_t)__builtin_ctzll(word);
                word &= word - 1;
                float len = lens[o];
                if (s->thr >= 0.0) {
                    double bound = acc[o];
                    if (p) { /* the non-essential terms' bounds at the document's length, summed */
                        uint32_t l = (uint32_t)len;
                        double v = l < SHORT ? rest[l] : -1.0;
                        if (v < 0.0) {
                            v = length_row(cur, consts, ord, m, s->rows, s->done_len, s->lrow, len)[p - 1];
                            if (l < SHORT) rest[l] = v;
                        }
                        bound += v;
                    }
                    if (bound < s->thr - s->thr * 1e-9) continue;
                }
                if (offer(s, p, w + o, len, 0, acc[o], 1)) s->thr = s->heap[0].score;
            }
        }
        w = end;
    }
    PyMem_Free(acc);
    PyMem_Free(lens);
    PyMem_Free(bits);
    return ok;
}

/* The k best (slot, score) of the query, best first, ties by id; prune = 0 scores every posting. */
static PyObject *search_impl(Index *ix, PyObject *tokens, Py_ssize_t k, int prune) {
    if (k <= 0 || ix->live == 0) return PyList_New(0);
    PyObject *seq = PySequence_Fast(tokens, "query tokens must be a sequence of str");
    if (!seq) return NULL;
    Py_ssize_t nq = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    Cursor *cur = PyMem_Malloc((nq ? nq : 1) * sizeof(Cursor));
    uint32_t *ord = PyMem_Malloc((nq ? nq : 1) * sizeof(uint32_t));
    double *prefix = PyMem_Malloc((nq ? nq : 1) * sizeof(double));
    uint32_t *touched = PyMem_Malloc((nq ? nq : 1) * sizeof(uint32_t));
    float *values = PyMem_Malloc((nq ? nq : 1) * sizeof(float));
    float *once = PyMem_Calloc((nq ? nq : 1) * SHORT, sizeof(float));
    Consts *consts = PyMem_Calloc(1, sizeof(Consts));
    uint32_t *rank = PyMem_Malloc((nq ? nq : 1) * sizeof(uint32_t));
    double *scratch = PyMem_Malloc((nq ? nq : 1) * sizeof(double));
    double *lrow = PyMem_Malloc((nq ? nq : 1) * sizeof(double));
    double *rows = nq <= EXACT_TERMS ? PyMem_Malloc((size_t)(nq ? nq : 1) * SHORT * sizeof(double)) : NULL;
    uint8_t *done_len = PyMem_Calloc(SHORT, 1);
    double *reach = nq <= EXACT_TERMS ? PyMem_Malloc((size_t)((nq ? nq : 1) + 1) * SHORT * sizeof(double)) : NULL;
    uint32_t heap_size = (uint32_t)(k < (Py_ssize_t)ix->live ? k : (Py_ssize_t)ix->live);
    Hit *heap = PyMem_Malloc((size_t)heap_size * sizeof(Hit));
    Posting *bufs = PyMem_Malloc((size_t)(nq ? nq : 1) * CHUNK * sizeof(Posting));
    PyObject *out = NULL;
    if (!cur || !ord || !prefix || !touched || !values || !heap || !bufs || !once || !consts || !rank || !scratch ||
        !lrow || !done_len || (nq <= EXACT_TERMS && (!rows || !reach))) {
        PyErr_NoMemory();
        goto done;
    }
    uint32_t m = 0;
    for (Py_ssize_t i = 0; i < nq; i++) {
        if (!PyUnicode_Check(items[i])) {
            PyErr_Format(PyExc_TypeError, "query tokens must be str, not %.80s", Py_TYPE(items[i])->tp_name);
            goto done;
        }
        Py_ssize_t n;
        const char *s = PyUnicode_AsUTF8AndSize(items[i], &n);
        if (!s) goto done;
        int64_t tid = term_find(ix, s, n, hash_bytes(s, n));
        if (tid < 0 || term_df(ix, &ix->terms[tid]) == 0) continue;
        Term *t = &ix->terms[tid];
        int seen = 0; /* a query term repeated counts once */
        for (uint32_t j = 0; j < m && !seen; j++) seen = cur[j].tid == (uint32_t)tid;
        if (seen) continue;
        cur[m].ix = ix;
        cur[m].buf = bufs + (size_t)m * CHUNK;
        cur[m].blk = is_block(t) ? t->heap : NULL;
        cur[m].nseg = is_block(t) ? t->heap->nchunks : 0;
        cur[m].tailn = tail_n(t);
        cur[m].p = postings(t);
        cursor_load(&cur[m], 0);
        cur[m].df = term_df(ix, t);
        cur[m].tid = (uint32_t)tid;
        cur[m].s = s; /* the term's bytes: the query token's, alive as long as the query */
        cur[m].slen = (uint32_t)n;
        cur[m].maxtf = term_maxtf(ix, t, (uint32_t)tid);
        cur[m].minlen = term_minlen(ix, t);
        m++;
    }
    if (m == 0) {
        out = PyList_New(0);
        goto done;
    }
    qsort(cur, m, sizeof(Cursor), cursor_order);
    const double n_docs = (double)ix->live;
    const double avgdl = (double)ix->total_length / n_docs;
    const float avg32 = (float)(avgdl != 0.0 ? avgdl : 1.0);
    consts->k1 = (float)ix->k1;
    consts->b = (float)ix->b;
    consts->one_minus_b = (float)(1.0 - ix->b);
    consts->scale = (float)(ix->k1 + 1.0);
    consts->avgdl = avg32;
    const double avg_or_1 = avgdl != 0.0 ? avgdl : 1.0;
    for (uint32_t j = 0; j < m; j++) {
        double df = (double)cur[j].df;
        cur[j].idf = (float)log(1.0 + (n_docs - df + 0.5) / (df + 0.5));
        cur[j].once = once + (size_t)j * SHORT;
        cur[j].reach = reach ? reach + (size_t)(j + 1) * SHORT : NULL;
        cur[j].hope_tries = cur[j].hope_skips = 0;
        /* Exact when every tf is 1, or when one more occurrence raises the real contribution by a relative
           norm / ((tf)(tf + 1 + norm)) > 1e-5 up to maxtf even in the term's shortest document (float32 rounding
           is below 1e-6 relative): then a lower tf's float32 contribution never exceeds maxtf's. */
        double tf_top = (double)cur[j].maxtf;
        double norm = ix->k1 * (1.0 - ix->b + ix->b * (double)cur[j].minlen / avg_or_1);
        cur[j].exact = tf_top == 1.0 || (tf_top < 4096.0 && norm > 0.0 && norm / ((tf_top - 1.0) * (tf_top + norm)) > 1e-5);
        /* The most the term adds to any document: its bound at its shortest document. */
        cur[j].ub = term_bound(&cur[j], consts, cur[j].minlen);
        ord[j] = j;
    }
    /* non-essential candidates by ascending bound (insertion sort: m is small) */
    for (uint32_t a = 1; a < m; a++) {
        uint32_t x = ord[a], b2 = a;
        while (b2 && cur[ord[b2 - 1]].ub > cur[x].ub) {
            ord[b2] = ord[b2 - 1];
            b2--;
        }
        ord[b2] = x;
    }
    for (uint32_t r = 0; r < m; r++) rank[ord[r]] = r;
    if (reach)
        for (size_t i = 0; i < (size_t)(m + 1) * SHORT; i++) reach[i] = -1.0; /* reach[0..SHORT): all terms' bounds */
    /* prefix[r]: the most a document holding only the terms ord[0..r] can score, summed as a score is when the query
       is short enough, else inflated past the rounding of a sum in another order */
    double run = 0.0;
    for (uint32_t r = 0; r < m; r++) {
        run += cur[ord[r]].ub;
        if (m > EXACT_TERMS) {
            prefix[r] = run * (1.0 + (double)m * 1e-15);
            continue;
        }
        /* Summed over the terms' bounds at one length, whichever length is worst: each bound falls with length from
           the term's shortest document on, so those lengths are the ones to try. Longer queries sum each term's
           highest bound. */
        double best = 0.0;
        for (uint32_t i = 0; i <= r; i++) {
            float len = cur[ord[i]].minlen;
            uint32_t same = 0;
            while (same < i && cur[ord[same]].minlen != len) same++;
            if (same < i) continue; /* that length was tried */
            double sum = 0.0;
            for (uint32_t j = 0; j < m; j++)
                if (rank[j] <= r) sum += m > SPLIT_TERMS ? cur[j].ub : term_bound(&cur[j], consts, len);
            if (sum > best) best = sum;
            if (m > SPLIT_TERMS) break;
        }
        prefix[r] = best;
    }

    Search s = {ix, cur, consts, m, ord, rank, rows, lrow, scratch, done_len, touched, values, heap, heap_size, 0, -1.0, 0};
    if (prune && rows && m >= WINDOW_TERMS) {
        if (!window_search(&s, prefix, reach)) goto done;
    } else {
        daat_search(&s, prefix, reach, prune, 0, 0, 0xFFFFFFFFu);
    }
    uint32_t hn = s.hn;
    ix->last_scored = s.scored;
    out = PyList_New(hn);
    if (!out) goto done;
    for (uint32_t i = hn; i-- > 0;) { /* the worst leaves the heap first */
        Hit h = heap[0];
        heap[0] = heap[i];
        sift_down(ix, heap, i, 0);
        uint32_t idn;
        const char *ids = slot_id(ix, h.slot, 0, &idn);
        PyObject *id = PyUnicode_DecodeUTF8(ids, idn, NULL);
        PyObject *sc = id ? PyFloat_FromDouble(h.score) : NULL;
        PyObject *pair = sc ? PyTuple_Pack(2, id, sc) : NULL;
        Py_XDECREF(id);
        Py_XDECREF(sc);
        if (!pair) {
            Py_CLEAR(out);
            goto done;
        }
        PyList_SET_ITEM(out, i, pair);
    }
done:
    PyMem_Free(cur);
    PyMem_Free(ord);
    PyMem_Free(prefix);
    PyMem_Free(touched);
    PyMem_Free(values);
    PyMem_Free(once);
    PyMem_Free(consts);
    PyMem_Free(heap);
    PyMem_Free(bufs);
    PyMem_Free(rank);
    PyMem_Free(scratch);
    PyMem_Free(lrow);
    PyMem_Free(rows);
    PyMem_Free(done_len);
    PyMem_Free(reach);
    Py_DECREF(seq);
    return out;
}

/* ------------------------------------------------------------------ Python type */

static int Index_init(Index *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"k1", "b", NULL};
    double k1 = 1.2, b = 0.75;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|dd", kwlist, &k1, &b)) return -1;
    free_all(self);
    self->k1 = k1;
    self->b = b;
    return 0;
}

static void Index_dealloc(Index *self) {
    free_all(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Index_clear(Index *self, PyObject *Py_UNUSED(ignored)) {
    free_all(self);
    Py_RETURN_NONE;
}

static PyObject *Index_add(Index *self, PyObject *args) {
    PyObject *doc_id, *tokens;
    if (!PyArg_ParseTuple(args, "UO", &doc_id, &tokens)) return NULL;
    if (add_doc(self, doc_id, tokens) < 0) return NULL;
    Py_RETURN_NONE;
}

typedef struct {
    uint64_t head[2]; /* the id's first 16 bytes, big-endian, zero-padded: most comparisons end here */
    const char *s;
    Py_ssize_t n, i;
} IdRef;

static void idref_set(IdRef *r, const char *s, Py_ssize_t n, Py_ssize_t i) {
    unsigned char pad[16] = {0};
    memcpy(pad, s, (size_t)(n < 16 ? n : 16));
    for (int w = 0; w < 2; w++) {
        uint64_t v = 0;
        for (int j = 0; j < 8; j++) v = v << 8 | pad[8 * w + j];
        r->head[w] = v;
    }
    r->s = s;
    r->n = n;
    r->i = i;
}

static int idref_order(const void *a, const void *b) { /* by id bytes (idcmp's order), then as given */
    const IdRef *x = a, *y = b;
    for (int w = 0; w < 2; w++)
        if (x->head[w] != y->head[w]) return x->head[w] < y->head[w] ? -1 : 1;
    int c = memcmp(x->s, y->s, (size_t)(x->n < y->n ? x->n : y->n));
    if (c) return c;
    if (x->n != y->n) return x->n < y->n ? -1 : 1;
    return x->i < y->i ? -1 : (x->i > y->i);
}

/* After a first build: the terms renumbered in byte order and their bytes front-coded, found from then on by binary
   search, so the term table (at its fullest 8 bytes a term) and the offsets of their bytes go. Nothing changes when
   there is no memory for it. */
static void sort_terms(Index *ix) {
    const uint32_t n = ix->nterms;
    if (!n || ix->terms_sorted) return; /* a first build: every term is one of the others */
    IdRef *order = malloc((size_t)n * sizeof(IdRef));
    uint32_t *new_tid = malloc((size_t)n * sizeof(uint32_t));
    Term *terms = malloc((size_t)n * sizeof(Term));
    uint32_t *tgrp = malloc(((size_t)(n + GROUP - 1) / GROUP + 1) * sizeof(uint32_t));
    uint64_t *heads = alloc_heads(n);
    char *termbuf = NULL;
    if (!order || !new_tid || !terms || !tgrp || !heads) goto fail;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t len;
        const char *t = loose_term(ix, i, &len);
        idref_set(&order[i], t, len, i);
    }
    qsort(order, n, sizeof(IdRef), idref_order);
    size_t size = 0; /* the records' bytes, counted first: they are far fewer than the terms' */
    for (uint32_t k = 0; k < n; k++) {
        uint32_t shared = k % GROUP ? shared_prefix(order[k - 1].s, (uint32_t)order[k - 1].n, order[k].s,
                                                    (uint32_t)order[k].n)
                                    : 0;
        size += term_record_size(shared, (uint32_t)order[k].n);
    }
    if (size > 0xFFFFFFF0u || !(termbuf = malloc(size ? size : 1))) goto fail;
    uint8_t *w = (uint8_t *)termbuf;
    for (uint32_t k = 0; k < n; k++) {
        uint32_t i = (uint32_t)order[k].i, len = (uint32_t)order[k].n;
        uint32_t shared = k % GROUP ? shared_prefix(order[k - 1].s, (uint32_t)order[k - 1].n, order[k].s, len) : 0;
        if (k % GROUP == 0) tgrp[k / GROUP] = (uint32_t)(w - (uint8_t *)termbuf);
        w = put_term(w, shared, order[k].s, len);
        terms[k] = ix->terms[i];
        new_tid[i] = k;
    }
    for (size_t e = 0; e < ix->nbig; e++) ix->big[e].term = new_tid[ix->big[e].term];
    free(ix->terms);
    free(ix->termbuf);
    free(ix->toff);
    ix->terms = terms;
    ix->terms_cap = n;
    ix->termbuf = termbuf;
    ix->termbuf_len = ix->termbuf_cap = size;
    ix->toff = NULL;
    ix->toff_cap = 0;
    free(ix->tgrp);
    ix->tgrp = tgrp;
    ix->terms_sorted = n;
    install_heads(ix, heads);
    free(ix->term_table);
    ix->term_table = NULL;
    ix->term_mask = 0;
    free(order);
    free(new_tid);
    return;
fail:
    free(terms);
    free(tgrp);
    free(heads);
    free(order);
    free(new_tid);
}

/* The documents are added in id order, whatever order they come in: slots then hold ascending ids (sorted_upto
   covers them all), so a search settles ties at the cut-off by slot number. A build that fails part way leaves an
   index that was empty empty again. */
static PyObject *Index_add_many(Index *self, PyObject *args) {
    PyObject *ids, *lists;
    if (!PyArg_ParseTuple(args, "OO", &ids, &lists)) return NULL;
    PyObject *a = PySequence_Fast(ids, "doc ids must be a sequence");
    if (!a) return NULL;
    PyObject *b = PySequence_Fast(lists, "token lists must be a sequence");
    IdRef *order = NULL;
    const int was_empty = self->nslots == 0;
    if (!b) {
        Py_DECREF(a);
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(a);
    if (n != PySequence_Fast_GET_SIZE(b)) {
        PyErr_SetString(PyExc_ValueError, "add_many: as many doc ids as token lists");
        goto fail;
    }
    order = PyMem_Malloc((n ? n : 1) * sizeof(IdRef));
    if (!order) {
        PyErr_NoMemory();
        goto fail;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *doc_id = PySequence_Fast_GET_ITEM(a, i);
        if (!PyUnicode_Check(doc_id)) {
            PyErr_Format(PyExc_TypeError, "doc ids must be str, not %.80s", Py_TYPE(doc_id)->tp_name);
            goto fail;
        }
        Py_ssize_t len;
        const char *id = PyUnicode_AsUTF8AndSize(doc_id, &len);
        if (!id) goto fail;
        idref_set(&order[i], id, len, i);
    }
    qsort(order, (size_t)n, sizeof(IdRef), idref_order);
    for (Py_ssize_t k = 0; k < n; k++) {
        Py_ssize_t i = order[k].i;
        /* In id order the documents lie scattered in memory: fetch ahead in three steps (the list, its items, the
           tokens), each once the step before has arrived. */
        if (k + 16 < n) __builtin_prefetch(PySequence_Fast_GET_ITEM(b, order[k + 16].i));
        if (k + 8 < n) {
            PyObject *list = PySequence_Fast_GET_ITEM(b, order[k + 8].i);
            if (PyList_CheckExact(list)) __builtin_prefetch(((PyListObject *)list)->ob_item);
        }
        if (k + 4 < n) {
            PyObject *list = PySequence_Fast_GET_ITEM(b, order[k + 4].i);
            if (PyList_CheckExact(list))
                for (Py_ssize_t j = 0; j < PyList_GET_SIZE(list) && j < 32; j++)
                    __builtin_prefetch(PyList_GET_ITEM(list, j));
        }
        if (add_doc(self, PySequence_Fast_GET_ITEM(a, i), PySequence_Fast_GET_ITEM(b, i)) < 0) goto fail;
    }
    fit_all_postings(self);
    if (was_empty) sort_terms(self);
    PyMem_Free(order);
    Py_DECREF(a);
    Py_DECREF(b);
    Py_RETURN_NONE;
fail:
    if (was_empty) free_all(self);
    PyMem_Free(order);
    Py_DECREF(a);
    Py_DECREF(b);
    return NULL;
}

/* ------------------------------------------------------------------ a build from arrays (a persisted index) */

/* A buffer of a given item size, read without alignment assumptions. */
typedef struct {
    Py_buffer view;
    int held;
    Py_ssize_t count; /* items */
} Arr;

static int arr_get(PyObject *obj, Arr *a, Py_ssize_t itemsize, const char *name) {
    if (PyObject_GetBuffer(obj, &a->view, PyBUF_C_CONTIGUOUS) < 0) return -1;
    a->held = 1;
    if (a->view.len % itemsize) {
        PyErr_Format(PyExc_ValueError, "add_arrays: %s is not of %zd-byte items", name, itemsize);
        return -1;
    }
    a->count = a->view.len / itemsize;
    return 0;
}

static inline int64_t rd_i64(const Arr *a, Py_ssize_t i) {
    int64_t v;
    memcpy(&v, (const char *)a->view.buf + 8 * i, 8);
    return v;
}

static inline int32_t rd_i32(const Arr *a, Py_ssize_t i) {
    int32_t v;
    memcpy(&v, (const char *)a->view.buf + 4 * i, 4);
    return v;
}

/* Offsets into `total` items: count + 1 of them, from 0 to total, never decreasing. */
static int check_offsets(const Arr *off, Py_ssize_t count, Py_ssize_t total, const char *name) {
    if (off->count != count + 1) {
        PyErr_Format(PyExc_ValueError, "add_arrays: %s holds %zd offsets, not %zd", name, off->count, count + 1);
        return -1;
    }
    int64_t prev = 0;
    if (rd_i64(off, 0) != 0 || rd_i64(off, count) != (int64_t)total) {
        PyErr_Format(PyExc_ValueError, "add_arrays: %s does not span its items", name);
        return -1;
    }
    for (Py_ssize_t i = 1; i <= count; i++) {
        int64_t v = rd_i64(off, i);
        if (v < prev || v > (int64_t)total) {
            PyErr_Format(PyExc_ValueError, "add_arrays: %s has offsets out of order or out of range", name);
            return -1;
        }
        prev = v;
    }
    return 0;
}

/* Whether s[0:n] is well-formed UTF-8 (no overlong forms, surrogates or code points past U+10FFFF): what Python's
   strict decoder accepts, so every id and term is a str again when read back. */
static int utf8_valid(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned char c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t k;
        uint32_t cp, min;
        if ((c & 0xE0) == 0xC0) {
            k = 1, cp = c & 0x1F, min = 0x80;
        } else if ((c & 0xF0) == 0xE0) {
            k = 2, cp = c & 0x0F, min = 0x800;
        } else if ((c & 0xF8) == 0xF0) {
            k = 3, cp = c & 0x07, min = 0x10000;
        } else {
            return 0;
        }
        if (n - i <= k) return 0;
        for (size_t j = 1; j <= k; j++) {
            if ((s[i + j] & 0xC0) != 0x80) return 0;
            cp = cp << 6 | (s[i + j] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
        i += k + 1;
    }
    return 1;
}

/* Strings blob[off[i]:off[i + 1]], each well-formed UTF-8. */
static int check_strings(const Arr *blob, const Arr *off, Py_ssize_t count, const char *name) {
    for (Py_ssize_t i = 0; i < count; i++) {
        int64_t a = rd_i64(off, i), b = rd_i64(off, i + 1);
        if (b - a > 0xFFFFFFF0ll) {
            PyErr_Format(PyExc_ValueError, "add_arrays: a string of %s is too long", name);
            return -1;
        }
        if (!utf8_valid((const unsigned char *)blob->view.buf + a, (size_t)(b - a))) {
            PyErr_Format(PyExc_ValueError, "add_arrays: %s is not UTF-8 text", name);
            return -1;
        }
    }
    return 0;
}

/* add_many of the documents the arrays hold, into an empty index: document i's id is ids_utf8[ids_off[i]:ids_off[i +
   1]] and its tokens the terms vocab[term_ids[j]] for j in doc_off[i]:doc_off[i + 1], term t being
   vocab_utf8[vocab_off[t]:vocab_off[t + 1]]. The same index as add_many of those strings, with no Python object made
   per id or token. Everything is checked before anything is added (sizes, offsets in order and in range, term ids
   in range, UTF-8, no id twice); a build that fails part way leaves the index empty. */
static PyObject *Index_add_arrays(Index *self, PyObject *args) {
    PyObject *objs[6];
    static const char *names[6] = {"ids_utf8", "ids_off", "vocab_utf8", "vocab_off", "term_ids", "doc_off"};
    static const Py_ssize_t sizes[6] = {1, 8, 1, 8, 4, 8};
    Arr arr[6];
    memset(arr, 0, sizeof(arr));
    IdRef *order = NULL;
    uint32_t *term_of = NULL, *doc = NULL;
    int started = 0;
    PyObject *result = NULL;
    if (!PyArg_ParseTuple(args, "OOOOOO", &objs[0], &objs[1], &objs[2], &objs[3], &objs[4], &objs[5])) return NULL;
    for (int i = 0; i < 6; i++)
        if (arr_get(objs[i], &arr[i], sizes[i], names[i]) < 0) goto done;
    const Arr *ids = &arr[0], *ids_off = &arr[1], *vocab = &arr[2], *vocab_off = &arr[3], *tids = &arr[4],
              *doc_off = &arr[5];
    if (self->nslots || self->nterms) {
        PyErr_SetString(PyExc_ValueError, "add_arrays builds an empty index");
        goto done;
    }
    const Py_ssize_t n = ids_off->count - 1, nv = vocab_off->count - 1;
    if (n < 0 || nv < 0 || n >= 0xFFFFFFF0ll || nv >= 0xFFFFFFF0ll) {
        PyErr_SetString(PyExc_ValueError, "add_arrays: the offsets are malformed");
        goto done;
    }
    if (check_offsets(ids_off, n, ids->count, "ids_off") < 0 ||
        check_offsets(vocab_off, nv, vocab->count, "vocab_off") < 0 ||
        check_offsets(doc_off, n, tids->count, "doc_off") < 0)
        goto done;
    if (check_strings(ids, ids_off, n, "ids_utf8") < 0 || check_strings(vocab, vocab_off, nv, "vocab_utf8") < 0)
        goto done;
    for (Py_ssize_t j = 0; j < tids->count; j++) {
        int32_t t = rd_i32(tids, j);
        if (t < 0 || (Py_ssize_t)t >= nv) {
            PyErr_SetString(PyExc_ValueError, "add_arrays: term_ids names a term the vocabulary does not hold");
            goto done;
        }
    }
    Py_ssize_t longest = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t len = (Py_ssize_t)(rd_i64(doc_off, i + 1) - rd_i64(doc_off, i));
        if (len > longest) longest = len;
    }
    order = PyMem_Malloc((n ? n : 1) * sizeof(IdRef));
    term_of = PyMem_Malloc((nv ? nv : 1) * sizeof(uint32_t));
    doc = PyMem_Malloc((longest ? longest : 1) * sizeof(uint32_t));
    if (!order || !term_of || !doc) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t a = rd_i64(ids_off, i), b = rd_i64(ids_off, i + 1);
        idref_set(&order[i], (const char *)ids->view.buf + a, (Py_ssize_t)(b - a), i);
    }
    Py_ssize_t ordered = 1;
    while (ordered < n && idref_order(&order[ordered - 1], &order[ordered]) < 0) ordered++;
    if (ordered < n) qsort(order, (size_t)n, sizeof(IdRef), idref_order);
    for (Py_ssize_t k = 1; k < n; k++) {
        if (order[k].n == order[k - 1].n && !memcmp(order[k].s, order[k - 1].s, (size_t)order[k].n)) {
            PyErr_SetString(PyExc_ValueError, "add_arrays: a doc id appears more than once");
            goto done;
        }
    }
    started = 1;
    { /* room for every term at once: no table rebuilt or array moved while they are added */
        uint32_t size = table_size((size_t)nv), *table;
        size_t cap = self->terms_cap;
        if (table_alloc(size, &table) < 0) goto done;
        term_table_fill(self, table, size);
        if (grow((void **)&self->terms, &cap, (size_t)nv, sizeof(Term)) < 0) goto done;
        self->terms_cap = (uint32_t)cap;
        if (grow((void **)&self->termbuf, &self->termbuf_cap, (size_t)vocab->count, 1) < 0 ||
            grow((void **)&self->toff, &self->toff_cap, (size_t)nv, sizeof(uint32_t)) < 0)
            goto done;
    }
    for (Py_ssize_t t = 0; t < nv; t++) { /* a term the vocabulary holds twice is one term */
        int64_t a = rd_i64(vocab_off, t), b = rd_i64(vocab_off, t + 1);
        int64_t tid = term_get_or_add(self, (const char *)vocab->view.buf + a, (Py_ssize_t)(b - a));
        if (tid < 0) goto done;
        term_of[t] = (uint32_t)tid;
    }
    for (Py_ssize_t k = 0; k < n; k++) {
        Py_ssize_t i = order[k].i;
        int64_t a = rd_i64(doc_off, i), b = rd_i64(doc_off, i + 1);
        for (int64_t j = a; j < b; j++) doc[j - a] = term_of[rd_i32(tids, (Py_ssize_t)j)];
        if (add_doc_core(self, order[k].s, order[k].n, NULL, doc, (Py_ssize_t)(b - a), 1) < 0) goto done;
    }
    fit_all_postings(self);
    sort_terms(self);
    result = Py_None;
    Py_INCREF(result);
done:
    if (!result && started) free_all(self);
    PyMem_Free(order);
    PyMem_Free(term_of);
    PyMem_Free(doc);
    for (int i = 0; i < 6; i++)
        if (arr[i].held) PyBuffer_Release(&arr[i].view);
    return result;
}

static PyObject *Index_remove(Index *self, PyObject *arg) {
    Py_ssize_t n;
    const char *s = PyUnicode_AsUTF8AndSize(arg, &n);
    if (!s) return NULL;
    int64_t pos, slot = id_find(self, s, n, &pos);
    if (slot < 0) Py_RETURN_FALSE;
    if (remove_slot(self, (uint32_t)slot, pos) < 0 || maybe_compact(self) < 0) return NULL;
    Py_RETURN_TRUE;
}

static PyObject *Index_contains(Index *self, PyObject *arg) {
    if (!PyUnicode_Check(arg)) Py_RETURN_FALSE;
    Py_ssize_t n;
    const char *s = PyUnicode_AsUTF8AndSize(arg, &n);
    if (!s) return NULL;
    int64_t pos;
    return PyBool_FromLong(id_find(self, s, n, &pos) >= 0);
}

static PyObject *Index_doc_freq(Index *self, PyObject *arg) {
    if (!PyUnicode_Check(arg)) return PyLong_FromLong(0);
    Py_ssize_t n;
    const char *s = PyUnicode_AsUTF8AndSize(arg, &n);
    if (!s) return NULL;
    int64_t tid = term_find(self, s, n, hash_bytes(s, n));
    return PyLong_FromUnsignedLong(tid < 0 ? 0 : term_df(self, &self->terms[tid]));
}

static PyObject *Index_ids(Index *self, PyObject *Py_UNUSED(ignored)) {
    PyObject *out = PyList_New(self->live);
    if (!out) return NULL;
    Py_ssize_t k = 0;
    RecWalk w = {self->docbuf, self->scratch, 0, 0};
    for (uint32_t s = 0; s < self->nslots; s++) {
        rec_next(&w);
        if (!self->alive[s]) continue;
        PyObject *id = PyUnicode_DecodeUTF8(w.id, w.n, NULL);
        if (!id) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, k++, id);
    }
    return out;
}

static PyObject *Index_search(Index *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"tokens", "k", "prune", NULL};
    PyObject *tokens;
    Py_ssize_t k;
    int prune = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "On|p", kwlist, &tokens, &k, &prune)) return NULL;
    return search_impl(self, tokens, k, prune);
}

static PyObject *Index_stats(Index *self, PyObject *Py_UNUSED(ignored)) {
    return Py_BuildValue("(kkLK)", (unsigned long)self->live, (unsigned long)self->dead, (long long)self->total_length,
                         (unsigned long long)self->last_scored);
}

static Py_ssize_t Index_len(Index *self) { return self->live; }

static PyObject *Index_memory(Index *self, PyObject *Py_UNUSED(ignored)) {
    size_t packed = 0, packed_cap = 0, tails = 0, tails_cap = 0, headers = 0;
    for (uint32_t i = 0; i < self->nterms; i++) {
        const Term *t = &self->terms[i];
        if (!is_block(t)) continue;
        const Block *b = t->heap;
        packed += (b->packed_cap ? b->packed_len + 8 : 0) + (size_t)b->nchunks * sizeof(Chunk);
        packed_cap += b->packed_cap + (size_t)b->chunks_cap * sizeof(Chunk);
        tails += (size_t)tail_n(t) * sizeof(Posting);
        tails_cap += (size_t)b->cap * sizeof(Posting);
        headers += sizeof(Block);
    }
    return Py_BuildValue("{s:n,s:n,s:n,s:n,s:n,s:n,s:n,s:n,s:n,s:n,s:n,s:n,s:n}", "terms",
                         (Py_ssize_t)self->nterms * sizeof(Term), "term_table",
                         (Py_ssize_t)((self->term_table ? (self->term_mask + 1) * sizeof(uint32_t) : 0) +
                                      (self->terms_sorted + GROUP - 1) / GROUP * sizeof(uint64_t)),
                         "term_bytes",
                         (Py_ssize_t)(self->termbuf_len + (self->terms_sorted + GROUP - 1) / GROUP * sizeof(uint32_t) +
                                      (size_t)(self->nterms - self->terms_sorted) * sizeof(uint32_t)), "postings", (Py_ssize_t)(packed + tails), "postings_capacity",
                         (Py_ssize_t)(packed_cap + tails_cap), "postings_headers", (Py_ssize_t)headers, "slots",
                         (Py_ssize_t)(self->nslots + (self->nslots + GROUP - 1) / GROUP * sizeof(uint32_t)),
                         "slots_capacity", (Py_ssize_t)(self->slots_cap + self->grp_cap * sizeof(uint32_t)),
                         "records", (Py_ssize_t)self->docbuf_len, "records_capacity", (Py_ssize_t)self->docbuf_cap,
                         "id_table", (Py_ssize_t)(self->id_table ? (self->id_mask + 1) * sizeof(uint32_t) : 0),
                         "big_tf", (Py_ssize_t)(self->nbig * sizeof(BigTf)), "removed",
                         (Py_ssize_t)(self->removed_cap * sizeof(uint32_t)));
}

static PyMethodDef Index_methods[] = {
    {"clear", (PyCFunction)Index_clear, METH_NOARGS, "Forget every document."},
    {"add", (PyCFunction)Index_add, METH_VARARGS, "add(doc_id, tokens): index tokens under doc_id, replacing it."},
    {"add_many", (PyCFunction)Index_add_many, METH_VARARGS, "add_many(doc_ids, token_lists): add each in turn."},
    {"add_arrays", (PyCFunction)Index_add_arrays, METH_VARARGS,
     "add_arrays(ids_utf8, ids_off, vocab_utf8, vocab_off, term_ids, doc_off): add_many of the documents they hold "
     "(uint8, int64, uint8, int64, int32, int64 buffers), checked first."},
    {"remove", (PyCFunction)Index_remove, METH_O, "remove(doc_id) -> whether it was indexed."},
    {"contains", (PyCFunction)Index_contains, METH_O, "contains(doc_id) -> bool."},
    {"doc_freq", (PyCFunction)Index_doc_freq, METH_O, "doc_freq(term) -> live documents holding it."},
    {"ids", (PyCFunction)Index_ids, METH_NOARGS, "The live ids in slot order."},
    {"search", (PyCFunction)(void (*)(void))Index_search, METH_VARARGS | METH_KEYWORDS,
     "search(tokens, k, prune=True) -> the k best (doc_id, score), best first, ties by doc_id."},
    {"memory", (PyCFunction)Index_memory, METH_NOARGS,
     "Bytes by part: terms, term_table (with the sorted terms' heads), term_bytes, postings (of terms with two or "
     "more: packed chunks, their entries and the postings after them; one posting is inline in its term), "
     "postings_headers (those terms' block headers), slots (alive flags, record offsets), records (ids and lengths), "
     "id_table, big_tf, removed (the slots removed since the last compaction); *_capacity what is allocated."},
    {"stats", (PyCFunction)Index_stats, METH_NOARGS, "(live documents, dead slots, total length, documents the last search scored in full)."},
    {NULL, NULL, 0, NULL},
};

static PySequenceMethods Index_as_sequence = {
    .sq_length = (lenfunc)Index_len,
};

static PyTypeObject IndexType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "dream_assets.text._bm25kernel.Index",
    .tp_basicsize = sizeof(Index),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "An incremental Okapi BM25 index with exact MaxScore top-k.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Index_init,
    .tp_dealloc = (destructor)Index_dealloc,
    .tp_methods = Index_methods,
    .tp_as_sequence = &Index_as_sequence,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_bm25kernel", "The compiled BM25 index behind dream_assets.text.bm25.", -1, NULL,
};

PyMODINIT_FUNC PyInit__bm25kernel(void) {
    if (PyType_Ready(&IndexType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&IndexType);
    if (PyModule_AddObject(m, "Index", (PyObject *)&IndexType) < 0) {
        Py_DECREF(&IndexType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
