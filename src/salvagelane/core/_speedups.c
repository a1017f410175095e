/* The scanner's three hot loops, compiled, and a constructor for the values they
   produce (docs/adr/0015-compiled-scan-loops.md).

   The loops are pure functions over a str: no I/O, no allocation that outlives
   a call, no recursion on input nesting. Each one answers a question the
   pure-Python core answers too, and says "not sure" rather than guess: the
   Python code stays the reference, and the tests check that both give the same
   answers.

   match_container(text, start, bound) -> (end, depth) | None
       The container opening at `start` (`{` or `[`) closed before `bound`, with
       every string well formed and every closer matching its opener; what lies
       between strings and brackets is not looked at. What
       lexis.SHALLOW_CONTAINERS matches, at any depth.

   item_run(text, pos, key, dead_start, dead_end, shallow)
       The run of intact items from `pos` that the scanner's items loop would
       take one by one on its fast path (see item_run below).

   check_strict(text, start, end) -> int
       Is text[start:end] one strict JSON value (RFC 8259, whitespace around it
       allowed)? 0 when it is not; otherwise STRICT_GRAMMAR plus flags for what
       the caller must still look at: DUPLICATE_KEY (two members of one object
       spelled the same), KEYS_UNPROVEN (an object whose keys cannot be compared
       as raw text: an escape in a key, or more than MAX_COMPARED members),
       NEEDS_CHECK (a \u0000 or surrogate escape, a raw surrogate, an integer of
       more than 18 digits, which a 64-bit parser may not keep exact).

   strict_items(text, path, make_span, make_candidate, closed)
       For a text check_strict proves strict with no flag left, whose root holds
       an array at `path` (a tuple of keys): where the root and the array are,
       one candidate per element (built by the caller's constructors), and each
       member of the objects on the path, off it. None for any other text.

   builder(cls, names) -> Builder
       A positional constructor for one frozen, slotted dataclass, for the
       values the loops produce one per item (see the builders section).

   Invariant: every loop iteration consumes at least one character, so each
   call is linear in the text it reads (key comparisons are bounded by
   MAX_COMPARED per member).
*/
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>
#include <structmember.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define STRICT_GRAMMAR 1
#define DUPLICATE_KEY 2
#define KEYS_UNPROVEN 4
#define NEEDS_CHECK 8

/* Members per object whose keys are compared pairwise: beyond it the keys are
   left to the caller (KEYS_UNPROVEN), so comparison stays linear. */
#define MAX_COMPARED 64

typedef struct {
    int kind;
    const void *data;
    Py_ssize_t n;
} Text;

/* The loops are written once over a Text and inlined into one copy per string kind
   (see the entry points), so that every character read is a plain load. */
#define HOT static inline __attribute__((always_inline))

/* Run STATEMENT with `t`, the Text of `str`, whose kind is a constant in each branch. */
#define BY_KIND(str, STATEMENT)                                                            \
    do {                                                                                   \
        const void *data_ = PyUnicode_DATA(str);                                           \
        Py_ssize_t n_ = PyUnicode_GET_LENGTH(str);                                         \
        if (PyUnicode_KIND(str) == PyUnicode_1BYTE_KIND) {                                 \
            const Text t = {PyUnicode_1BYTE_KIND, data_, n_};                              \
            STATEMENT;                                                                     \
        }                                                                                  \
        else if (PyUnicode_KIND(str) == PyUnicode_2BYTE_KIND) {                            \
            const Text t = {PyUnicode_2BYTE_KIND, data_, n_};                              \
            STATEMENT;                                                                     \
        }                                                                                  \
        else {                                                                             \
            const Text t = {PyUnicode_4BYTE_KIND, data_, n_};                              \
            STATEMENT;                                                                     \
        }                                                                                  \
    } while (0)

/* Characters a string body stops at: the quote, the backslash, control characters. */
static const unsigned char STRING_STOP[128] = {
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    ['"'] = 1, ['\\'] = 1,
};

/* Characters the bracket matcher stops at: quotes and brackets. */
static const unsigned char BRACKET_STOP[128] = {
    ['"'] = 1, ['{'] = 1, ['}'] = 1, ['['] = 1, [']'] = 1,
};

HOT Py_UCS4
at(const Text *t, Py_ssize_t i)
{
    return PyUnicode_READ(t->kind, t->data, i);
}

HOT int
is_ws(Py_UCS4 c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

HOT int
is_hex(Py_UCS4 c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* A growable stack of bytes or of Py_ssize_t; small ones live on the C stack. */
typedef struct {
    char small[64];
    char *items;
    Py_ssize_t len;
    Py_ssize_t cap;
} ByteStack;

static void
bytes_init(ByteStack *s)
{
    s->items = s->small;
    s->len = 0;
    s->cap = (Py_ssize_t)sizeof(s->small);
}

static int
bytes_push(ByteStack *s, char c)
{
    if (s->len == s->cap) {
        Py_ssize_t cap = s->cap * 2;
        char *grown = PyMem_Malloc((size_t)cap);
        if (grown == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        memcpy(grown, s->items, (size_t)s->len);
        if (s->items != s->small) {
            PyMem_Free(s->items);
        }
        s->items = grown;
        s->cap = cap;
    }
    s->items[s->len++] = c;
    return 0;
}

static void
bytes_free(ByteStack *s)
{
    if (s->items != s->small) {
        PyMem_Free(s->items);
    }
}

/* Past the run of usual string characters from `i`: none of `"`, `\\`, a control
   character or a surrogate, the characters string_end stops at. Sixteen bytes at a
   time where SSE2 is there and the text has one or two bytes per character (model
   output with a dash or a curly quote is two); otherwise `i` itself, and string_end
   reads them one by one. */
HOT Py_ssize_t
usual_run_end(const Text *t, Py_ssize_t i, Py_ssize_t bound)
{
#if defined(__SSE2__)
    if (t->kind == PyUnicode_1BYTE_KIND) {
        const unsigned char *data = (const unsigned char *)t->data;
        const __m128i quote = _mm_set1_epi8('"');
        const __m128i backslash = _mm_set1_epi8('\\');
        const __m128i control_max = _mm_set1_epi8(0x1F);
        while (i + 16 <= bound) {
            __m128i chunk = _mm_loadu_si128((const __m128i *)(data + i));
            /* min(c, 0x1F) == c exactly when c <= 0x1F, compared unsigned */
            __m128i stop = _mm_or_si128(
                _mm_or_si128(_mm_cmpeq_epi8(chunk, quote), _mm_cmpeq_epi8(chunk, backslash)),
                _mm_cmpeq_epi8(_mm_min_epu8(chunk, control_max), chunk));
            int mask = _mm_movemask_epi8(stop);
            if (mask != 0) {
                return i + __builtin_ctz((unsigned)mask);
            }
            i += 16;
        }
    }
    else if (t->kind == PyUnicode_2BYTE_KIND) {
        /* Eight characters at a time; SSE2 compares 16-bit lanes signed only, so each
           unsigned range test is made on values with their top bit flipped. */
        const Py_UCS2 *data = (const Py_UCS2 *)t->data;
        const __m128i flip = _mm_set1_epi16((short)0x8000);
        const __m128i quote = _mm_set1_epi16('"');
        const __m128i backslash = _mm_set1_epi16('\\');
        const __m128i below_space = _mm_set1_epi16((short)(0x20 ^ 0x8000));
        const __m128i surrogate_base = _mm_set1_epi16((short)0xD800);
        const __m128i below_surrogate_end = _mm_set1_epi16((short)(0x800 ^ 0x8000));
        while (i + 8 <= bound) {
            __m128i chunk = _mm_loadu_si128((const __m128i *)(data + i));
            __m128i control = _mm_cmplt_epi16(_mm_xor_si128(chunk, flip), below_space);
            __m128i surrogate = _mm_cmplt_epi16(
                _mm_xor_si128(_mm_sub_epi16(chunk, surrogate_base), flip), below_surrogate_end);
            __m128i stop = _mm_or_si128(
                _mm_or_si128(_mm_cmpeq_epi16(chunk, quote), _mm_cmpeq_epi16(chunk, backslash)),
                _mm_or_si128(control, surrogate));
            int mask = _mm_movemask_epi8(stop);
            if (mask != 0) {
                return i + __builtin_ctz((unsigned)mask) / 2;
            }
            i += 8;
        }
    }
#endif
    return i;
}

/* The end (past the closing quote) of the well-formed string opening at `quote`,
   or -1. `flags` (may be NULL) collects NEEDS_CHECK; `escaped` (may be NULL) is
   set when the string holds an escape. Never reads at or past `bound`. */
HOT Py_ssize_t
string_end(const Text *t, Py_ssize_t quote, Py_ssize_t bound, int *flags, int *escaped)
{
    Py_ssize_t i = quote + 1;
    while (i < bound) {
        i = usual_run_end(t, i, bound);
        if (i >= bound) {
            break;
        }
        Py_UCS4 c = at(t, i);
        if (c < 128 ? !STRING_STOP[c] : (c < 0xD800 || c > 0xDFFF)) {
            i++;  /* the usual character: nothing to check */
            continue;
        }
        if (c == '"') {
            return i + 1;
        }
        if (c < 0x20) {
            return -1;
        }
        if (c == '\\') {
            if (i + 1 >= bound) {
                return -1;
            }
            Py_UCS4 e = at(t, i + 1);
            if (escaped != NULL) {
                *escaped = 1;
            }
            if (e == 'u') {
                if (i + 5 >= bound || !is_hex(at(t, i + 2)) || !is_hex(at(t, i + 3))
                    || !is_hex(at(t, i + 4)) || !is_hex(at(t, i + 5))) {
                    return -1;
                }
                if (flags != NULL) {
                    Py_UCS4 h0 = at(t, i + 2), h1 = at(t, i + 3);
                    int surrogate = (h0 == 'd' || h0 == 'D')
                                    && ((h1 >= '8' && h1 <= '9') || (h1 >= 'a' && h1 <= 'f')
                                        || (h1 >= 'A' && h1 <= 'F'));
                    int nul = h0 == '0' && h1 == '0' && at(t, i + 4) == '0'
                              && at(t, i + 5) == '0';
                    if (surrogate || nul) {
                        *flags |= NEEDS_CHECK;
                    }
                }
                i += 6;
                continue;
            }
            if (e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n'
                || e == 'r' || e == 't') {
                i += 2;
                continue;
            }
            return -1;
        }
        if (flags != NULL && c >= 0xD800 && c <= 0xDFFF) {
            *flags |= NEEDS_CHECK;
        }
        i++;
    }
    return -1;
}

/* ------------------------------------------------------------ match_container */

/* End of the well-formed container opening at `start` and closed before `bound`,
   with its depth in *depth; -1 if there is none; -2 with an exception set. */
HOT Py_ssize_t
container_end(const Text *t, Py_ssize_t start, Py_ssize_t bound, Py_ssize_t *depth)
{
    Py_UCS4 first = at(t, start);
    if (first != '{' && first != '[') {
        return -1;
    }
    ByteStack stack;
    bytes_init(&stack);
    if (bytes_push(&stack, (char)first) < 0) {
        return -2;
    }
    Py_ssize_t result = -1;
    *depth = 1;
    Py_ssize_t i = start + 1;
    while (i < bound) {
        Py_UCS4 c = at(t, i);
        if (c >= 128 || !BRACKET_STOP[c]) {
            i++;
            continue;
        }
        if (c == '"') {
            i = string_end(t, i, bound, NULL, NULL);
            if (i < 0) {
                break;
            }
            continue;
        }
        if (c == '{' || c == '[') {
            if (bytes_push(&stack, (char)c) < 0) {
                result = -2;
                break;
            }
            if (stack.len > *depth) {
                *depth = stack.len;
            }
        }
        else if (c == '}' || c == ']') {
            if (stack.items[stack.len - 1] != (c == '}' ? '{' : '[')) {
                break;
            }
            if (--stack.len == 0) {
                result = i + 1;
                break;
            }
        }
        i++;
    }
    bytes_free(&stack);
    return result;
}

static int
as_index(PyObject *arg, Py_ssize_t *out)
{
    *out = PyLong_AsSsize_t(arg);
    return *out == -1 && PyErr_Occurred() ? -1 : 0;
}

static PyObject *
match_container(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t start, bound, depth;
    if (nargs != 3 || !PyUnicode_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "match_container(text: str, start: int, bound: int)");
        return NULL;
    }
    if (as_index(args[1], &start) < 0 || as_index(args[2], &bound) < 0) {
        return NULL;
    }
    if (bound > PyUnicode_GET_LENGTH(args[0])) {
        bound = PyUnicode_GET_LENGTH(args[0]);
    }
    if (start < 0 || start >= bound) {
        Py_RETURN_NONE;
    }
    Py_ssize_t end;
    BY_KIND(args[0], end = container_end(&t, start, bound, &depth));
    if (end == -2) {
        return NULL;
    }
    if (end < 0) {
        Py_RETURN_NONE;
    }
    return Py_BuildValue("(nn)", end, depth);
}

/* ------------------------------------------------------------------ item_run */

HOT Py_ssize_t
skip_ws(const Text *t, Py_ssize_t i)
{
    while (i < t->n && is_ws(at(t, i))) {
        i++;
    }
    return i;
}

/* Does the item signature `{` ws* key ws* `:` start at `i`? */
HOT int
signature_at(const Text *t, Py_ssize_t i, const Text *key)
{
    i = skip_ws(t, i + 1);
    if (t->n - i < key->n) {
        return 0;
    }
    for (Py_ssize_t k = 0; k < key->n; k++) {
        if (at(t, i + k) != at(key, k)) {
            return 0;
        }
    }
    i = skip_ws(t, i + key->n);
    return i < t->n && at(t, i) == ':';
}

/* The indentation of `pos` if only spaces or tabs precede it on its line, else -1. */
HOT Py_ssize_t
line_indent(const Text *t, Py_ssize_t pos)
{
    Py_ssize_t back = pos;
    while (back > 0 && (at(t, back - 1) == ' ' || at(t, back - 1) == '\t')) {
        back--;
    }
    if (back == 0 || at(t, back - 1) == '\r' || at(t, back - 1) == '\n') {
        return pos - back;
    }
    return -1;
}

/* item_run(text, pos, key, dead_start, dead_end, shallow)
       -> (spans, pos, separated, first_indent)

   The run of intact items from `pos`, each taken exactly as the scanner's items
   loop takes an item on its fast path: `{` after whitespace, outside the dead-quote
   region, a well-formed container with no item signature inside it (the signature's
   `key` is the raw key, quotes included), and, deeper than `shallow`, clear of the
   dead region; then `,` not followed by `,` or `]`. Stops before the first item that
   is not one (or after one with no such separator: `separated` is then false).
   `spans` is flat: start, end, depth per item. `first_indent` is the line
   indentation of the first item that starts its line, or -1. */
HOT PyObject *item_run_body(const Text *text, const Text *key_text, Py_ssize_t pos,
                           Py_ssize_t dead_start, Py_ssize_t dead_end, Py_ssize_t shallow);

static PyObject *
item_run(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t pos, dead_start, dead_end, shallow;
    if (nargs != 6 || !PyUnicode_Check(args[0]) || !PyUnicode_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError,
                        "item_run(text: str, pos: int, key: str, dead_start: int, "
                        "dead_end: int, shallow: int)");
        return NULL;
    }
    if (as_index(args[1], &pos) < 0 || as_index(args[3], &dead_start) < 0
        || as_index(args[4], &dead_end) < 0 || as_index(args[5], &shallow) < 0) {
        return NULL;
    }
    Text key = {PyUnicode_KIND(args[2]), PyUnicode_DATA(args[2]), PyUnicode_GET_LENGTH(args[2])};
    PyObject *result;
    BY_KIND(args[0], result = item_run_body(&t, &key, pos, dead_start, dead_end, shallow));
    return result;
}

HOT PyObject *
item_run_body(const Text *text, const Text *key_text, Py_ssize_t pos, Py_ssize_t dead_start,
              Py_ssize_t dead_end, Py_ssize_t shallow)
{
    const Text t = *text;
    const Text key = *key_text;
    PyObject *spans = PyList_New(0);
    if (spans == NULL) {
        return NULL;
    }
    int separated = 1;
    Py_ssize_t first_indent = -1;
    Py_ssize_t signature = -1;  /* the next signature found, moving forward only: linear */
    if (pos < 0) {
        pos = 0;
    }
    for (;;) {
        Py_ssize_t start = skip_ws(&t, pos), depth, end;
        if (start >= t.n || at(&t, start) != '{' || (dead_start < start && start < dead_end)) {
            break;
        }
        /* Like the scanner, an item never reads past the next signature: one inside it
           (in a string too) is for the loop to judge. */
        if (signature <= start) {
            signature = start + 1;
            while (signature < t.n && !(at(&t, signature) == '{' && signature_at(&t, signature, &key))) {
                signature++;
            }
        }
        end = container_end(&t, start, signature, &depth);
        if (end == -2) {
            Py_DECREF(spans);
            return NULL;
        }
        if (end < 0 || (depth > shallow && dead_start < end && start < dead_end)) {
            break;
        }
        PyObject *triple[3] = {PyLong_FromSsize_t(start), PyLong_FromSsize_t(end),
                               PyLong_FromSsize_t(depth)};
        for (int k = 0; k < 3; k++) {
            if (triple[k] == NULL || PyList_Append(spans, triple[k]) < 0) {
                for (int j = 0; j < 3; j++) {
                    Py_XDECREF(triple[j]);
                }
                Py_DECREF(spans);
                return NULL;
            }
        }
        for (int k = 0; k < 3; k++) {
            Py_DECREF(triple[k]);
        }
        if (first_indent < 0) {
            first_indent = line_indent(&t, start);
        }
        Py_ssize_t comma = skip_ws(&t, end);
        if (comma < t.n && at(&t, comma) == ',') {
            Py_ssize_t after = skip_ws(&t, comma + 1);
            if (!(after < t.n && (at(&t, after) == ',' || at(&t, after) == ']'))) {
                pos = comma + 1;
                continue;
            }
        }
        pos = end;
        separated = 0;
        break;
    }
    return Py_BuildValue("(Nnin)", spans, pos, separated, first_indent);
}

/* --------------------------------------------------------------- check_strict */

typedef enum { E_VALUE, E_VALUE_OR_CLOSE, E_KEY, E_KEY_OR_CLOSE, E_COLON, E_COMMA_OR_CLOSE, E_END } Expect;

typedef struct {
    char kind;             /* '{' or '[' */
    char unproven;         /* an escaped key, or too many members to compare */
    char role;             /* for strict_items: ROLE_OBJECT, ROLE_CONTAINER or 0 */
    Py_ssize_t members;
    Py_ssize_t key_base;   /* index of this object's first key in the key list */
} Level;

typedef struct {
    Level *levels;
    Py_ssize_t len;
    Py_ssize_t cap;
    Py_ssize_t *keys;      /* start, end pairs of the compared keys of open objects */
    Py_ssize_t keys_len;
    Py_ssize_t keys_cap;
} Nesting;

static int
grow(void **items, Py_ssize_t *cap, size_t size)
{
    Py_ssize_t new_cap = *cap ? *cap * 2 : 16;
    void *grown = PyMem_Realloc(*items, (size_t)new_cap * size);
    if (grown == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    *items = grown;
    *cap = new_cap;
    return 0;
}

HOT int
same_text(const Text *t, Py_ssize_t a, Py_ssize_t a_end, Py_ssize_t b, Py_ssize_t b_end)
{
    if (a_end - a != b_end - b) {
        return 0;
    }
    if (t->kind == PyUnicode_1BYTE_KIND) {
        return memcmp((const Py_UCS1 *)t->data + a, (const Py_UCS1 *)t->data + b,
                      (size_t)(a_end - a)) == 0;
    }
    for (Py_ssize_t k = 0; k < a_end - a; k++) {
        if (at(t, a + k) != at(t, b + k)) {
            return 0;
        }
    }
    return 1;
}

/* The key from `start` to `end` (quotes included) as a member of the innermost open
   object: compared with its earlier keys when that can prove or refute uniqueness. */
HOT int
note_key(const Text *t, Nesting *nest, Py_ssize_t start, Py_ssize_t end, int escaped, int *flags)
{
    Level *level = &nest->levels[nest->len - 1];
    level->members++;
    if (level->unproven) {
        return 0;
    }
    if (escaped || level->members > MAX_COMPARED) {
        /* "a" and "\u0061" are one key: raw text cannot tell. */
        level->unproven = 1;
        *flags |= KEYS_UNPROVEN;
        return 0;
    }
    for (Py_ssize_t k = level->key_base; k < nest->keys_len; k += 2) {
        if (same_text(t, nest->keys[k], nest->keys[k + 1], start, end)) {
            *flags |= DUPLICATE_KEY;
        }
    }
    if (nest->keys_len + 2 > nest->keys_cap
        && grow((void **)&nest->keys, &nest->keys_cap, sizeof(Py_ssize_t)) < 0) {
        return -1;
    }
    nest->keys[nest->keys_len++] = start;
    nest->keys[nest->keys_len++] = end;
    return 0;
}

static int
open_level(Nesting *nest, char kind)
{
    if (nest->len == nest->cap && grow((void **)&nest->levels, &nest->cap, sizeof(Level)) < 0) {
        return -1;
    }
    Level *level = &nest->levels[nest->len++];
    level->kind = kind;
    level->unproven = 0;
    level->role = 0;
    level->members = 0;
    level->key_base = nest->keys_len;
    return 0;
}

static void
close_level(Nesting *nest)
{
    nest->keys_len = nest->levels[nest->len - 1].key_base;
    nest->len--;
}

/* Past the run of one or more digits at `i`, or -1. */
HOT Py_ssize_t
digits_end(const Text *t, Py_ssize_t i, Py_ssize_t end)
{
    if (i >= end || at(t, i) < '0' || at(t, i) > '9') {
        return -1;
    }
    while (i < end && at(t, i) >= '0' && at(t, i) <= '9') {
        i++;
    }
    return i;
}

/* Past the number starting at `i` (RFC 8259 grammar), or -1. */
HOT Py_ssize_t
number_end(const Text *t, Py_ssize_t i, Py_ssize_t end, int *flags)
{
    Py_ssize_t digits_start;
    int fraction_or_exponent = 0;
    if (i < end && at(t, i) == '-') {
        i++;
    }
    digits_start = i;
    if (i >= end) {
        return -1;
    }
    if (at(t, i) == '0') {
        i++;
    }
    else if (at(t, i) >= '1' && at(t, i) <= '9') {
        while (i < end && at(t, i) >= '0' && at(t, i) <= '9') {
            i++;
        }
    }
    else {
        return -1;
    }
    Py_ssize_t int_digits = i - digits_start;
    if (i < end && at(t, i) == '.') {
        i = digits_end(t, i + 1, end);
        if (i < 0) {
            return -1;
        }
        fraction_or_exponent = 1;
    }
    if (i < end && (at(t, i) == 'e' || at(t, i) == 'E')) {
        i++;
        if (i < end && (at(t, i) == '+' || at(t, i) == '-')) {
            i++;
        }
        i = digits_end(t, i, end);
        if (i < 0) {
            return -1;
        }
        fraction_or_exponent = 1;
    }
    if (!fraction_or_exponent && int_digits > 18) {
        *flags |= NEEDS_CHECK;  /* may not fit in 64 bits */
    }
    return i;
}

HOT int
literal_at(const Text *t, Py_ssize_t i, Py_ssize_t end, const char *word)
{
    Py_ssize_t len = (Py_ssize_t)strlen(word);
    if (end - i < len) {
        return 0;
    }
    for (Py_ssize_t k = 0; k < len; k++) {
        if (at(t, i + k) != (Py_UCS4)(unsigned char)word[k]) {
            return 0;
        }
    }
    return 1;
}

/* What strict_value records for strict_items, as it reads a document: where the
   items array at a path of keys is, each element's span and depth, and each member
   of the objects on that path (the envelope), in document order. */
#define ROLE_OBJECT 'o'     /* an object on the path: its members are read one by one */
#define ROLE_CONTAINER 'c'  /* the items array: each element is recorded */
#define ROLE_FIELD 'f'      /* a member of an object on the path, off the path */

typedef struct {
    PyObject *path;              /* tuple of str */
    Py_ssize_t path_len;
    int declined;                /* not shaped as the path says: no answer */
    char next_role;              /* of the value after the key just read */
    Py_ssize_t key_start, key_end;
    Py_ssize_t root_start, root_end, container_start, container_end;
    Py_ssize_t rec_base;         /* nesting where the recorded value opened; -1: none */
    Py_ssize_t rec_start, rec_max, rec_level, rec_key_start, rec_key_end;
    char rec_kind;               /* ROLE_CONTAINER: an element; ROLE_FIELD: a member */
    Py_ssize_t *items;           /* start, end, depth per element */
    Py_ssize_t items_len, items_cap;
    Py_ssize_t *fields;          /* level, key start, key end, start, end, depth per member */
    Py_ssize_t fields_len, fields_cap;
} Track;

static int
push_values(Py_ssize_t **values, Py_ssize_t *len, Py_ssize_t *cap, const Py_ssize_t *add,
            Py_ssize_t count)
{
    if (*len + count > *cap && grow((void **)values, cap, sizeof(Py_ssize_t)) < 0) {
        return -1;
    }
    memcpy(*values + *len, add, (size_t)count * sizeof(Py_ssize_t));
    *len += count;
    return 0;
}

/* The value starting at `i` with `c`: an element or a member to record, or the next
   object or array on the path; `*role` is the role of the container `c` may open. */
HOT void
track_value(Track *tr, const Nesting *nest, Py_ssize_t i, Py_UCS4 c, char *role)
{
    char wanted;
    if (nest->len == 0) {
        tr->root_start = i;
        wanted = tr->path_len ? ROLE_OBJECT : ROLE_CONTAINER;
    }
    else {
        char parent = nest->levels[nest->len - 1].role;
        if (parent == ROLE_CONTAINER || (parent == ROLE_OBJECT && tr->next_role == ROLE_FIELD)) {
            tr->rec_kind = parent == ROLE_CONTAINER ? ROLE_CONTAINER : ROLE_FIELD;
            tr->rec_base = nest->len;
            tr->rec_start = i;
            tr->rec_max = 0;
            tr->rec_level = nest->len - 1;
            tr->rec_key_start = tr->key_start;
            tr->rec_key_end = tr->key_end;
            return;
        }
        if (parent != ROLE_OBJECT) {
            return;  /* inside a recorded value */
        }
        wanted = tr->next_role;
    }
    if ((wanted == ROLE_OBJECT && c != '{') || (wanted == ROLE_CONTAINER && c != '[')) {
        tr->declined = 1;  /* the scanner names this conflict: its path answers */
        return;
    }
    if (wanted == ROLE_CONTAINER) {
        tr->container_start = i;
    }
    *role = wanted;
}

/* A key read at `level`, an object on the path: is it the path's next key? */
HOT void
track_key(const Text *t, Track *tr, Py_ssize_t level, Py_ssize_t start, Py_ssize_t end)
{
    PyObject *want = PyTuple_GET_ITEM(tr->path, level);
    Py_ssize_t len = PyUnicode_GET_LENGTH(want);
    int same = end - start - 2 == len;
    for (Py_ssize_t k = 0; same && k < len; k++) {
        same = at(t, start + 1 + k) == PyUnicode_READ_CHAR(want, k);
    }
    /* An escaped key compares unequal here, and keeps the document unproven. */
    tr->next_role = !same ? ROLE_FIELD : level + 1 == tr->path_len ? ROLE_CONTAINER : ROLE_OBJECT;
    tr->key_start = start;
    tr->key_end = end;
}

/* The value being recorded ended at `end` if the nesting is back where it opened. */
HOT int
track_end(Track *tr, Py_ssize_t nesting, Py_ssize_t end)
{
    if (tr->rec_base != nesting) {
        return 0;
    }
    tr->rec_base = -1;
    if (tr->rec_kind == ROLE_CONTAINER) {
        Py_ssize_t item[3] = {tr->rec_start, end, tr->rec_max};
        return push_values(&tr->items, &tr->items_len, &tr->items_cap, item, 3);
    }
    Py_ssize_t member[6] = {tr->rec_level, tr->rec_key_start, tr->rec_key_end,
                            tr->rec_start,  end,              tr->rec_max};
    return push_values(&tr->fields, &tr->fields_len, &tr->fields_cap, member, 6);
}

/* A container closed at `end`, its role `closed`; the nesting is now `nest->len`. */
HOT int
track_close(Track *tr, const Nesting *nest, char closed, Py_ssize_t end)
{
    if (closed == ROLE_CONTAINER) {
        tr->container_end = end;
    }
    if (nest->len == 0) {
        tr->root_end = end;
    }
    return track_end(tr, nest->len, end);
}

/* 0: not one strict value; otherwise STRICT_GRAMMAR | flags; -1 with an exception set.
   With `tr`, it also records what strict_items returns (check_strict passes NULL,
   and the inlined copy it gets has no tracking in it). */
HOT int
strict_value(const Text *t, Py_ssize_t i, Py_ssize_t end, Track *tr)
{
    Nesting nest = {NULL, 0, 0, NULL, 0, 0};
    Expect expect = E_VALUE;
    int flags = 0;
    int result = 0;
    for (;;) {
        while (i < end && is_ws(at(t, i))) {
            i++;
        }
        if (i >= end) {
            result = expect == E_END ? STRICT_GRAMMAR | flags : 0;
            break;
        }
        if (expect == E_END) {
            break;
        }
        Py_UCS4 c = at(t, i);
        if (expect == E_COLON) {
            if (c != ':') {
                break;
            }
            expect = E_VALUE;
            i++;
            continue;
        }
        if (expect == E_COMMA_OR_CLOSE) {
            char kind = nest.levels[nest.len - 1].kind;
            if (c == ',') {
                expect = kind == '{' ? E_KEY : E_VALUE;
                i++;
                continue;
            }
            if ((c == '}' && kind == '{') || (c == ']' && kind == '[')) {
                char closed = nest.levels[nest.len - 1].role;
                close_level(&nest);
                i++;
                if (tr != NULL && track_close(tr, &nest, closed, i) < 0) {
                    result = -1;
                    break;
                }
                expect = nest.len ? E_COMMA_OR_CLOSE : E_END;
                continue;
            }
            break;
        }
        if (expect == E_KEY || expect == E_KEY_OR_CLOSE) {
            if (c == '}' && expect == E_KEY_OR_CLOSE) {
                char closed = nest.levels[nest.len - 1].role;
                close_level(&nest);
                i++;
                if (tr != NULL && track_close(tr, &nest, closed, i) < 0) {
                    result = -1;
                    break;
                }
                expect = nest.len ? E_COMMA_OR_CLOSE : E_END;
                continue;
            }
            if (c != '"') {
                break;
            }
            int escaped = 0;
            Py_ssize_t key_end = string_end(t, i, end, &flags, &escaped);
            if (key_end < 0) {
                break;
            }
            if (note_key(t, &nest, i, key_end, escaped, &flags) < 0) {
                result = -1;
                break;
            }
            if (tr != NULL && nest.levels[nest.len - 1].role == ROLE_OBJECT) {
                track_key(t, tr, nest.len - 1, i, key_end);
            }
            i = key_end;
            expect = E_COLON;
            continue;
        }
        /* E_VALUE or E_VALUE_OR_CLOSE */
        if (c == ']' && expect == E_VALUE_OR_CLOSE) {
            char closed = nest.levels[nest.len - 1].role;
            close_level(&nest);
            i++;
            if (tr != NULL && track_close(tr, &nest, closed, i) < 0) {
                result = -1;
                break;
            }
            expect = nest.len ? E_COMMA_OR_CLOSE : E_END;
            continue;
        }
        char role = 0;
        if (tr != NULL && !tr->declined) {
            track_value(tr, &nest, i, c, &role);
        }
        if (c == '{' || c == '[') {
            if (open_level(&nest, (char)c) < 0) {
                result = -1;
                break;
            }
            nest.levels[nest.len - 1].role = role;
            if (tr != NULL && tr->rec_base >= 0 && nest.len - tr->rec_base > tr->rec_max) {
                tr->rec_max = nest.len - tr->rec_base;
            }
            i++;
            expect = c == '{' ? E_KEY_OR_CLOSE : E_VALUE_OR_CLOSE;
            continue;
        }
        if (c == '"') {
            i = string_end(t, i, end, &flags, NULL);
        }
        else if (c == '-' || (c >= '0' && c <= '9')) {
            i = number_end(t, i, end, &flags);
        }
        else if (literal_at(t, i, end, "true")) {
            i += 4;
        }
        else if (literal_at(t, i, end, "false")) {
            i += 5;
        }
        else if (literal_at(t, i, end, "null")) {
            i += 4;
        }
        else {
            break;
        }
        if (i < 0) {
            break;
        }
        if (tr != NULL && track_end(tr, nest.len, i) < 0) {
            result = -1;
            break;
        }
        expect = nest.len ? E_COMMA_OR_CLOSE : E_END;
    }
    PyMem_Free(nest.levels);
    PyMem_Free(nest.keys);
    return result;
}

static PyObject *
check_strict(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyUnicode_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "check_strict(text: str, start: int, end: int)");
        return NULL;
    }
    Py_ssize_t start = PyLong_AsSsize_t(args[1]);
    if (start == -1 && PyErr_Occurred()) {
        return NULL;
    }
    Py_ssize_t end = PyLong_AsSsize_t(args[2]);
    if (end == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (end > PyUnicode_GET_LENGTH(args[0])) {
        end = PyUnicode_GET_LENGTH(args[0]);
    }
    if (start < 0) {
        start = 0;
    }
    int result = 0;
    if (start < end) {
        BY_KIND(args[0], result = strict_value(&t, start, end, NULL));
    }
    if (result < 0) {
        return NULL;
    }
    return PyLong_FromLong(result);
}

/* -------------------------------------------------------------- strict_items */

static PyObject *
as_list(const Py_ssize_t *values, Py_ssize_t len)
{
    PyObject *list = PyList_New(len);
    if (list == NULL) {
        return NULL;
    }
    for (Py_ssize_t k = 0; k < len; k++) {
        PyObject *value = PyLong_FromSsize_t(values[k]);
        if (value == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, k, value);
    }
    return list;
}

/* One candidate per recorded element, made by the caller's constructors: `make_span`
   (start, end) and `make_candidate` (index, span, closure, depth, defect, stray). */
static PyObject *
as_candidates(const Track *tr, PyObject *make_span, PyObject *make_candidate, PyObject *closed)
{
    Py_ssize_t count = tr->items_len / 3;
    PyObject *candidates = PyTuple_New(count);
    PyObject *no_defect = PyUnicode_FromStringAndSize("", 0);
    if (candidates == NULL || no_defect == NULL) {
        Py_XDECREF(candidates);
        Py_XDECREF(no_defect);
        return NULL;
    }
    for (Py_ssize_t k = 0; k < count; k++) {
        const Py_ssize_t *item = tr->items + 3 * k;
        PyObject *span = NULL, *candidate = NULL;
        PyObject *start = PyLong_FromSsize_t(item[0]);
        PyObject *end = PyLong_FromSsize_t(item[1]);
        PyObject *index = PyLong_FromSsize_t(k);
        PyObject *depth = PyLong_FromSsize_t(item[2]);
        if (start != NULL && end != NULL && index != NULL && depth != NULL) {
            PyObject *span_args[2] = {start, end};
            span = PyObject_Vectorcall(make_span, span_args, 2, NULL);
        }
        if (span != NULL) {
            PyObject *args[6] = {index, span, closed, depth, no_defect, Py_False};
            candidate = PyObject_Vectorcall(make_candidate, args, 6, NULL);
        }
        Py_XDECREF(start);
        Py_XDECREF(end);
        Py_XDECREF(index);
        Py_XDECREF(depth);
        Py_XDECREF(span);
        if (candidate == NULL) {
            Py_DECREF(candidates);
            Py_DECREF(no_defect);
            return NULL;
        }
        PyTuple_SET_ITEM(candidates, k, candidate);
    }
    Py_DECREF(no_defect);
    return candidates;
}

static PyObject *
strict_items(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5 || !PyUnicode_Check(args[0]) || !PyTuple_Check(args[1])
        || !PyCallable_Check(args[2]) || !PyCallable_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError,
                        "strict_items(text: str, path: tuple[str, ...], make_span, "
                        "make_candidate, closed)");
        return NULL;
    }
    Py_ssize_t path_len = PyTuple_GET_SIZE(args[1]);
    for (Py_ssize_t k = 0; k < path_len; k++) {
        if (!PyUnicode_Check(PyTuple_GET_ITEM(args[1], k))) {
            PyErr_SetString(PyExc_TypeError, "strict_items: every key of the path is a str");
            return NULL;
        }
    }
    Track tr = {
        .path = args[1], .path_len = path_len, .key_start = -1, .key_end = -1,
        .root_start = -1, .root_end = -1, .container_start = -1, .container_end = -1,
        .rec_base = -1,
    };
    Py_ssize_t n = PyUnicode_GET_LENGTH(args[0]);
    int result = 0;
    if (n > 0) {
        BY_KIND(args[0], result = strict_value(&t, 0, n, &tr));
    }
    PyObject *answer = NULL;
    if (result < 0) {
        goto done;
    }
    if (result != STRICT_GRAMMAR || tr.declined || tr.container_start < 0
        || tr.container_end < 0) {
        answer = Py_NewRef(Py_None);
        goto done;
    }
    PyObject *candidates = as_candidates(&tr, args[2], args[3], args[4]);
    PyObject *fields = candidates == NULL ? NULL : as_list(tr.fields, tr.fields_len);
    if (fields != NULL) {
        answer = Py_BuildValue("(nnnnNN)", tr.root_start, tr.root_end, tr.container_start,
                               tr.container_end, candidates, fields);
    }
    else {
        Py_XDECREF(candidates);
    }
done:
    PyMem_Free(tr.items);
    PyMem_Free(tr.fields);
    return answer;
}

/* ------------------------------------------------------------------ builders */

/* A positional constructor for one frozen, slotted dataclass: it allocates the
   instance and stores each value in its slot, as unpickling does, without the
   generated __init__ (whose object.__setattr__ per field costs more than the
   scan loops that produce the values). speedups.builder checks in Python that
   the names are the class's fields in order and that it has no __post_init__. */

#define MAX_FIELDS 16

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyTypeObject *cls;
    Py_ssize_t nfields;
    Py_ssize_t offsets[MAX_FIELDS];
} Builder;

static PyObject *
builder_call(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Builder *b = (Builder *)self;
    Py_ssize_t n = PyVectorcall_NARGS(nargsf);
    if (kwnames != NULL && PyTuple_GET_SIZE(kwnames) > 0) {
        PyErr_Format(PyExc_TypeError, "builder of %s takes its %zd values by position",
                     b->cls->tp_name, b->nfields);
        return NULL;
    }
    if (n != b->nfields) {
        PyErr_Format(PyExc_TypeError, "builder of %s: expected %zd values, got %zd",
                     b->cls->tp_name, b->nfields, n);
        return NULL;
    }
    PyObject *obj = b->cls->tp_alloc(b->cls, 0);
    if (obj == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_INCREF(args[i]);
        *(PyObject **)((char *)obj + b->offsets[i]) = args[i];
    }
    return obj;
}

static void
builder_dealloc(PyObject *self)
{
    Py_XDECREF(((Builder *)self)->cls);
    Py_TYPE(self)->tp_free(self);
}

static PyTypeObject BuilderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "salvagelane.core._speedups.Builder",
    .tp_basicsize = sizeof(Builder),
    .tp_dealloc = builder_dealloc,
    .tp_vectorcall_offset = offsetof(Builder, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "A positional constructor for one frozen, slotted dataclass.",
};

static PyObject *
builder(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyType_Check(args[0]) || !PyTuple_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "builder(cls, names): a class and a tuple of names");
        return NULL;
    }
    PyTypeObject *cls = (PyTypeObject *)args[0];
    PyObject *names = args[1];
    Py_ssize_t n = PyTuple_GET_SIZE(names);
    if (n > MAX_FIELDS) {
        PyErr_Format(PyExc_TypeError, "builder: %s has %zd fields, at most %d are supported",
                     cls->tp_name, n, MAX_FIELDS);
        return NULL;
    }
    if (cls->tp_itemsize != 0 || cls->tp_alloc == NULL || cls->tp_dict == NULL) {
        PyErr_Format(PyExc_TypeError, "builder: %s is not a plain slotted class", cls->tp_name);
        return NULL;
    }
    Builder *b = PyObject_New(Builder, &BuilderType);
    if (b == NULL) {
        return NULL;
    }
    b->vectorcall = builder_call;
    b->nfields = n;
    Py_INCREF(cls);
    b->cls = cls;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *name = PyTuple_GET_ITEM(names, i);
        /* The class's own slot: a member descriptor in its own dict, holding an object. */
        PyObject *slot =
            PyUnicode_Check(name) ? PyDict_GetItemWithError(cls->tp_dict, name) : NULL;
        if (slot == NULL || !Py_IS_TYPE(slot, &PyMemberDescr_Type)
            || ((PyMemberDescrObject *)slot)->d_member->type != T_OBJECT_EX
            || (((PyMemberDescrObject *)slot)->d_member->flags & READONLY)) {
            if (!PyErr_Occurred()) {
                PyErr_Format(PyExc_TypeError, "builder: %R is not a slot of %s", name,
                             cls->tp_name);
            }
            Py_DECREF(b);
            return NULL;
        }
        b->offsets[i] = ((PyMemberDescrObject *)slot)->d_member->offset;
    }
    return (PyObject *)b;
}

/* -------------------------------------------------------------------- module */

static PyMethodDef methods[] = {
    {"match_container", (PyCFunction)(void (*)(void))match_container, METH_FASTCALL,
     "match_container(text, start, bound) -> (end, depth) | None"},
    {"item_run", (PyCFunction)(void (*)(void))item_run, METH_FASTCALL,
     "item_run(text, pos, key, dead_start, dead_end, shallow) -> (spans, pos, separated, indent)"},
    {"check_strict", (PyCFunction)(void (*)(void))check_strict, METH_FASTCALL,
     "check_strict(text, start, end) -> int (0: not one strict JSON value)"},
    {"strict_items", (PyCFunction)(void (*)(void))strict_items, METH_FASTCALL,
     "strict_items(text, path, make_span, make_candidate, closed) -> (root_start, root_end, "
     "container_start, container_end, candidates, fields) | None"},
    {"builder", (PyCFunction)(void (*)(void))builder, METH_FASTCALL,
     "builder(cls, names) -> a positional constructor of a frozen, slotted dataclass"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_speedups",
    "The scanner's hot loops, compiled; the pure-Python core is the reference.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    if (PyType_Ready(&BuilderType) < 0) {
        return NULL;
    }
    PyObject *module = PyModule_Create(&module_def);
    if (module == NULL) {
        return NULL;
    }
    if (PyModule_AddIntConstant(module, "STRICT_GRAMMAR", STRICT_GRAMMAR) < 0
        || PyModule_AddIntConstant(module, "DUPLICATE_KEY", DUPLICATE_KEY) < 0
        || PyModule_AddIntConstant(module, "KEYS_UNPROVEN", KEYS_UNPROVEN) < 0
        || PyModule_AddIntConstant(module, "NEEDS_CHECK", NEEDS_CHECK) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
