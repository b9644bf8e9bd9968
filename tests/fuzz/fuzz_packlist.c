/* libFuzzer target for the list files `shardinfer pack` reads (io/pack.h): lines `PATH`,
 * `PATH<TAB>ID` and `PATH<TAB>ID<TAB>LABEL`. Each input gets a fresh directory of fixtures:
 * two small valid JPEGs (made once with TurboJPEG), a file that is not a JPEG, an empty one, a
 * subdirectory, a symbolic link, a dangling one and a FIFO. The input is a recipe
 * (fuzz_common.h) that writes the list: lines naming those fixtures by relative or absolute
 * path, missing files, the directory, the list itself, /dev/zero, with ids (empty, not UTF-8)
 * and labels (overflowing, not numbers), extra tabs, CR, comments, blank lines; or the input's
 * own bytes as the list. Now and then the source is a directory tree made by the recipe instead
 * (names of any bytes, nesting, a symbolic link back up and one out of the tree). Then si_pack
 * into a temporary output with the recipe's chunk size and overwrite flag. Nothing may crash,
 * hang, allocate without bound or leave an HDF5 handle open; a pack that succeeds must open as
 * a source with its count and bytes.
 * Build and run: scripts/fuzz.sh packlist [SECONDS] (docs/user-guide.md, "Fuzzing"). */
#include "io/pack.h"
#include "io/source.h"
#include "fuzz_common.h"

#include <sys/stat.h>
#include <turbojpeg.h>

static uint8_t *jpeg[2];
static unsigned long jpeg_len[2];

/* Two JPEGs, 3x2 RGB and 8x8 grey, made once. */
static void make_jpegs(void) {
    tjhandle tj = tjInitCompress();
    if (!tj) abort();
    static uint8_t px[8 * 8 * 3];
    for (size_t i = 0; i < sizeof px; i++) px[i] = (uint8_t)(i * 29);
    if (tjCompress2(tj, px, 3, 0, 2, TJPF_RGB, &jpeg[0], &jpeg_len[0], TJSAMP_444, 90, 0) != 0 ||
        tjCompress2(tj, px, 8, 0, 8, TJPF_GRAY, &jpeg[1], &jpeg_len[1], TJSAMP_GRAY, 75, 0) != 0)
        abort();
    tjDestroy(tj);
}

static void fixtures(void) {
    fz_write_file(fz_path(0, "a.jpg"), jpeg[0], jpeg_len[0]);
    fz_write_file(fz_path(0, "b.JPEG"), jpeg[1], jpeg_len[1]);
    fz_write_file(fz_path(0, "c.jpg"), "not a jpeg", 10);
    fz_write_file(fz_path(0, "empty.jpg"), "", 0);
    mkdir(fz_path(0, "sub"), 0755);
    fz_write_file(fz_path(0, "sub/d.jpg"), jpeg[1], jpeg_len[1]);
    symlink("a.jpg", fz_path(0, "link.jpg"));
    symlink("gone.jpg", fz_path(0, "dangling.jpg"));
    mkfifo(fz_path(0, "pipe.jpg"), 0644);
}

/* A name from the recipe's bytes for a directory entry: no '/', no NUL, not "." or "..". */
static void entry_name(fz_recipe *r, char *b, size_t cap, const char *suffix) {
    const uint8_t *p;
    size_t len = fz_blob(r, 12, &p), o = 0;
    for (size_t i = 0; i < len && o + 1 < cap; i++)
        if (p[i] != '/' && p[i] != 0) b[o++] = (char)p[i];
    if (o == 0 || (o <= 2 && b[0] == '.')) b[o++] = 'n';
    snprintf(b + o, cap - o, "%s", suffix);
}

/* A directory tree under rel from the recipe (depth levels more at most). */
static void make_tree(fz_recipe *r, const char *rel, int depth) {
    for (int k = (int)fz_range(r, 1, 4); k > 0; k--) {
        char name[40], path[256];
        static const char *const suffixes[] = {".jpg", ".JPEG", ".png", "", ".jpg.txt"};
        entry_name(r, name, sizeof name, suffixes[fz_pick(r, 5)]);
        snprintf(path, sizeof path, "%s/%s", rel, name);
        switch (fz_pick(r, 7)) {
        case 0: fz_write_new(fz_path(0, "%s", path), jpeg[k & 1], jpeg_len[k & 1]); break;
        case 1: fz_write_new(fz_path(0, "%s", path), "xx", 2); break;
        case 2:
            if (depth > 0 && mkdir(fz_path(0, "%s", path), 0755) == 0)
                make_tree(r, path, depth - 1);
            break;
        case 3: symlink("..", fz_path(0, "%s", path)); break;        /* a loop */
        case 4: symlink("../../sub", fz_path(0, "%s", path)); break; /* out of the tree */
        case 5: symlink("missing", fz_path(0, "%s", path)); break;
        default: mkfifo(fz_path(0, "%s", path), 0644); break;
        }
    }
}

/* The list from the recipe: structured lines, or the recipe's remaining bytes as they are. */
static void make_list(fz_recipe *r, const char *list) {
    FILE *f = fopen(list, "wb");
    if (!f) abort();
    if (fz_pick(r, 4) == 3) {
        const uint8_t *b;
        size_t len = fz_blob(r, r->n, &b);
        fwrite(b, 1, len, f);
        fclose(f);
        return;
    }
    int lines = (int)((fz_range(r, 0, 16) + 3) % 17);
    bool labels = fz_pick(r, 4) == 3;
    for (int i = 0; i < lines; i++) {
        static const char *const paths[] = {"a.jpg",     "b.JPEG",    "sub/d.jpg", "c.jpg",
                                            "empty.jpg", "link.jpg",  "./a.jpg",   "dangling.jpg",
                                            "nope.jpg",  "sub",       ".",         "list.txt",
                                            "pipe.jpg",  "/dev/zero", "",          "sub/../a.jpg"};
        int k = i < 3 && !fz_bool(r) ? i : fz_pick(r, 16);
        switch (fz_pick(r, 8)) {
        case 1: fprintf(f, "# %s\n", paths[k]); continue;
        case 2: fputs(fz_pick(r, 2) ? "\n" : "  \t \r\n", f); continue;
        case 3: fprintf(f, "%s/", fz_dir); break; /* absolute */
        default: break;
        }
        fputs(paths[k], f);
        int id = fz_pick(r, 4);
        if (id || labels) {
            const uint8_t *b;
            size_t len = id == 2 ? fz_blob(r, 24, &b) : 0;
            fputc('\t', f);
            if (id == 1 || id == 0)
                fprintf(f, "id %d \xc3\xa9", i);
            else
                fwrite(b, 1, len, f); /* any bytes: empty, not UTF-8, with tabs */
        }
        if (labels) {
            static const char *const lab[] = {
                "7", "-1", "99999999999999999999", "x", "", "-9223372036854775808", "12 ", "0x10"};
            fprintf(f, "\t%s", lab[fz_pick(r, 8)]);
        }
        if (fz_pick(r, 8) == 7) fputs("\textra", f);
        fputs(fz_pick(r, 8) == 7 ? "\r\n" : "\n", f);
    }
    fclose(f);
}

/* What a pack that worked must hold: its count of images and bytes, readable as a source. */
static void check_output(const char *out, const si_pack_stats *st) {
    si_source *s = NULL;
    if (si_source_open(out, NULL, &s) != SI_OK) {
        fprintf(stderr, "==fuzz== a pack that worked does not open: %s\n", si_error_msg());
        abort();
    }
    uint64_t n = si_source_count(s), bytes = 0, off[2];
    si_bytes buf = {0};
    for (uint64_t i = 0; i < n; i++) {
        if (si_source_read(s, i, 1, &buf, off, NULL) != SI_OK) {
            fprintf(stderr, "==fuzz== image %llu of a pack does not read: %s\n",
                    (unsigned long long)i, si_error_msg());
            abort();
        }
        bytes += off[1] - off[0];
    }
    si_bytes_free(&buf);
    si_source_close(s);
    if (n != st->count || bytes != st->bytes) {
        fprintf(stderr, "==fuzz== a pack of %llu images, %llu bytes holds %llu, %llu bytes\n",
                (unsigned long long)st->count, (unsigned long long)st->bytes, (unsigned long long)n,
                (unsigned long long)bytes);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!jpeg[0]) {
        make_jpegs();
        fz_h5_quiet();
        si_log_set_level(SI_LOG_ERROR);
    }
    fz_tmpdir("packlist");
    fz_recipe rr = {data, size}, *r = &rr;
    fz_h5_counts before;
    fz_h5_count(&before);
    fixtures();
    char list[4200], out[4200];
    snprintf(list, sizeof list, "%s", fz_path(0, "list.txt"));
    snprintf(out, sizeof out, "%s", fz_path(0, "out.h5"));
    si_pack_opts o = {.source = list, .output = out};
    if (fz_pick(r, 8) == 7) { /* a directory instead of a list */
        mkdir(fz_path(0, "tree"), 0755);
        make_tree(r, "tree", 3);
        o.source = fz_path(1, "%s", fz_bool(r) ? "tree/" : "tree");
    } else {
        make_list(r, list);
    }
    static const size_t chunks[] = {0, 1, 7, 4096, 1 << 20, ((size_t)256 << 20) + 1};
    o.chunk_bytes = chunks[fz_pick(r, 6)];
    o.overwrite = fz_pick(r, 4) != 3;
    static const uint64_t caps[] = {0, 1, 100, 1000};
    o.max_file_bytes = caps[fz_pick(r, 4)];
    o.follow_links = fz_pick(r, 4) == 3;
    if (fz_pick(r, 4) == 3) fz_write_file(out, "old", 3); /* an output there already */
    si_pack_stats st;
    if (si_pack(&o, &st) == SI_OK) check_output(out, &st);
    fz_h5_check(&before, "pack");
    fz_clean(fz_dir);
    return 0;
}
