/* The block kernel as a program, for comparing its builds across architectures
 * (tests/native/test_aarch64_kernels.py): block_matmul.c is compiled into it whole, at the level the
 * compiler's flags give it (-DTERCET_PORTABLE: the portable path, the definition of the bits).
 *
 *     block_matmul_driver OUT_DIR CASE...
 *
 * Each CASE file holds, little-endian: six int64 (kind: 0 Q4, 1 Q8; rows; k; n; the units' bytes;
 * the dtype of x and y: 0 bfloat16, 1 float32), then x ([rows, k]) and the packed units
 * (tercet_block_pack's layout). For each, the driver writes into OUT_DIR, under the case file's name:
 *
 * - NAME.y: y ([rows, n]) from one tercet_block_matmul (or tercet_block_matmul_f32) call;
 * - NAME.steps: the stages before y's rounding, which bfloat16 would mostly hide: for each chunk of
 *   ROW_CHUNK rows, the quantized rows (xq, then sx, sx Σ xq and 128 Σ xq, as Rows holds them) and
 *   every tile's float32 sums (the tiles in order, [rows of the chunk][16] each).
 *
 * It prints "vectorized V" first (tercet_block_matmul_vectorized()). Exit status 0, or 1 with a message.
 *
 * Build (from the repository root), e.g.:
 *     aarch64-linux-gnu-gcc -O2 -std=c11 -static -march=armv8.2-a+dotprod -Icore/native/include
 *         -Iplugins/linear_layers tests/native/block_matmul_driver.c -o driver -lm
 */
#include "block_matmul.c"

#include <stdio.h>

static unsigned char *read_file(const char *path, size_t *size) {
    FILE *file = fopen(path, "rb");
    if (!file) return NULL;
    unsigned char *data = NULL;
    if (fseek(file, 0, SEEK_END) == 0) {
        long length = ftell(file);
        if (length >= 0 && fseek(file, 0, SEEK_SET) == 0) {
            data = malloc(length ? (size_t)length : 1);
            if (data && fread(data, 1, (size_t)length, file) != (size_t)length) {
                free(data);
                data = NULL;
            }
            *size = (size_t)length;
        }
    }
    fclose(file);
    return data;
}

static int write_file(const char *out_dir, const char *case_path, const char *suffix, const void *data,
                      size_t size) {
    const char *slash = strrchr(case_path, '/');
    char path[4096];
    snprintf(path, sizeof path, "%s/%s%s", out_dir, slash ? slash + 1 : case_path, suffix);
    FILE *out = fopen(path, "wb");
    int failed = !out || fwrite(data, 1, size, out) != size;
    if (out && fclose(out)) failed = 1;
    if (failed) fprintf(stderr, "%s: cannot write\n", path);
    return failed;
}

/* tercet_block_matmul's steps one by one (as tercet_block_matmul_on takes them without AMX), each
 * stage's bytes appended to `steps` (a buffer of the size steps_size gives). */
static size_t steps_size(int64_t rows, int64_t k, int64_t n) {
    int64_t blocks = k / BLOCK, tiles = (n + COLUMNS - 1) / COLUMNS;
    return (size_t)(rows * k + rows * blocks * 12 + rows * tiles * COLUMNS * 4);
}

static int run_steps(const void *x, int dtype, int64_t rows, int64_t k, const uint8_t *units, int kind, int64_t n,
                     unsigned char *steps) {
    int64_t blocks = k / BLOCK, tiles = (n + COLUMNS - 1) / COLUMNS, bytes = unit_bytes(kind);
    static float acc[2][COLUMNS * ROW_CHUNK];
    Rows prepared;
    if (allocate_rows(rows, k, &prepared)) return 1;
#define APPEND(source, size)                                    \
    do {                                                        \
        memcpy(steps, (source), (size_t)(size));                \
        steps += (size_t)(size);                                \
    } while (0)
    for (int64_t first = 0; first < rows; first += ROW_CHUNK) {
        int64_t count = rows - first < ROW_CHUNK ? rows - first : ROW_CHUNK;
        prepare_rows(past(x, dtype, first * k), k, dtype, count, blocks, &prepared);
        APPEND(prepared.xq, count * k);
        APPEND(prepared.scales, count * blocks * 4);
        APPEND(prepared.sums, count * blocks * 4);
        APPEND(prepared.offsets, count * blocks * 4);
        for (int64_t left = 0; left < tiles; left += 2) {
            int64_t right = left + 1 < tiles ? left + 1 : left;
            memset(acc, 0, sizeof acc);
            multiply_tiles(&prepared, count, units + left * blocks * bytes, units + right * blocks * bytes, blocks,
                           kind, acc[0], acc[1]);
            APPEND(acc[0], count * COLUMNS * 4);
            if (right != left) APPEND(acc[1], count * COLUMNS * 4);
        }
    }
#undef APPEND
    free_rows(&prepared);
    return 0;
}

static int run_case(const char *out_dir, const char *path) {
    size_t size = 0;
    unsigned char *data = read_file(path, &size);
    if (!data) {
        fprintf(stderr, "%s: cannot read\n", path);
        return 1;
    }
    int64_t header[6] = {0};
    if (size >= sizeof header) memcpy(header, data, sizeof header);
    const int64_t kind = header[0], rows = header[1], k = header[2], n = header[3], units_size = header[4];
    const int dtype = (int)header[5];
    const size_t element = dtype == DTYPE_F32 ? 4 : 2;
    const int valid = size >= sizeof header && (kind == Q4 || kind == Q8) && rows >= 1 && k >= BLOCK &&
                      k % BLOCK == 0 && n >= 1 && (dtype == DTYPE_BF16 || dtype == DTYPE_F32) &&
                      units_size == (n + COLUMNS - 1) / COLUMNS * (k / BLOCK) * unit_bytes((int)kind) &&
                      size == sizeof header + (size_t)(rows * k) * element + (size_t)units_size;
    if (!valid) {
        fprintf(stderr, "%s: inconsistent header or size\n", path);
        free(data);
        return 1;
    }
    /* Copies: the kernel's loads want no more alignment than their element's, which malloc gives. */
    const size_t x_size = (size_t)(rows * k) * element, y_size = (size_t)(rows * n) * element;
    void *x = malloc(x_size), *y = malloc(y_size);
    uint8_t *units = malloc((size_t)units_size);
    unsigned char *steps = malloc(steps_size(rows, k, n));
    int failed = 1;
    if (x && y && units && steps) {
        memcpy(x, data + sizeof header, x_size);
        memcpy(units, data + sizeof header + x_size, (size_t)units_size);
        int status = dtype == DTYPE_F32 ? tercet_block_matmul_f32(x, k, rows, k, units, (int)kind, n, y, n)
                                        : tercet_block_matmul(x, k, rows, k, units, (int)kind, n, y, n);
        if (status || run_steps(x, dtype, rows, k, units, (int)kind, n, steps))
            fprintf(stderr, "%s: the kernel is out of memory\n", path);
        else
            failed = write_file(out_dir, path, ".y", y, y_size) ||
                     write_file(out_dir, path, ".steps", steps, steps_size(rows, k, n));
    } else {
        fprintf(stderr, "%s: out of memory\n", path);
    }
    free(steps);
    free(units);
    free(y);
    free(x);
    free(data);
    return failed;
}

int main(int argc, char **argv) {
    printf("vectorized %d\n", tercet_block_matmul_vectorized());
    fflush(stdout);
    if (argc < 2) {
        fprintf(stderr, "usage: %s OUT_DIR CASE...\n", argv[0]);
        return 1;
    }
    for (int i = 2; i < argc; i++)
        if (run_case(argv[1], argv[i])) return 1;
    return 0;
}
