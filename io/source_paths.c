/* The files a source spec names: one HDF5 file, a list file of paths, a directory of *.h5 and
 * *.hdf5 files, or a glob pattern. */
#include "io/source_internal.h"

#include <dirent.h>
#include <errno.h>
#include <glob.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#define LIST_LINE_MAX  4096    /* a path */
#define LIST_FILES_MAX 1000000 /* files of one set */

/* --- the list of files ------------------------------------------------------------------------ */

static void list_add(src_path_list *l, char *path, int line) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 16;
        l->paths = si_xrealloc(l->paths, (size_t)l->cap * sizeof *l->paths);
        l->lines = si_xrealloc(l->lines, (size_t)l->cap * sizeof *l->lines);
    }
    l->paths[l->n] = path;
    l->lines[l->n++] = line;
}

void src_list_free(src_path_list *l) {
    for (int i = 0; i < l->n; i++) free(l->paths[i]);
    free(l->paths);
    free(l->lines);
}

static char *join(const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    char *r = si_xmalloc(a + b + 2);
    memcpy(r, dir, a);
    r[a] = '/';
    memcpy(r + a + 1, name, b + 1);
    return r;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool has_suffix(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a > b && strcasecmp(s + a - b, suf) == 0;
}

static si_status list_dir(const char *dir, src_path_list *l) {
    DIR *d = opendir(dir);
    if (!d) return si_error(SI_ERR_IO, "%s: cannot read the directory: %s", dir, strerror(errno));
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        if (!has_suffix(e->d_name, ".h5") && !has_suffix(e->d_name, ".hdf5")) continue;
        char *p = join(dir, e->d_name);
        struct stat sb;
        if (stat(p, &sb) == 0 && S_ISREG(sb.st_mode))
            list_add(l, p, 0);
        else
            free(p);
    }
    closedir(d);
    if (l->n == 0) return si_error(SI_ERR_IO, "%s: directory has no *.h5 or *.hdf5 files", dir);
    qsort(l->paths, (size_t)l->n, sizeof *l->paths, cmp_str);
    return SI_OK;
}

/* A text file of paths: anything else (a JPEG given by mistake) is refused before its bytes
 * become a confusing "no such file" about a line of binary. Lines are read into a bounded
 * buffer: a file of one endless line costs no more than a path's length. */
static si_status list_file(const char *path, src_path_list *l) {
    FILE *fp = fopen(path, "r");
    if (!fp) return si_error(SI_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    const char *slash = strrchr(path, '/');
    char *dir = NULL;
    if (slash) {
        dir = si_xmalloc((size_t)(slash - path) + 2);
        memcpy(dir, path, (size_t)(slash - path));
        dir[slash - path] = '\0';
        if (slash == path) strcpy(dir, "/");
    }
    char line[LIST_LINE_MAX + 2];
    int lineno = 0;
    si_status st = SI_OK;
    while (fgets(line, sizeof line, fp)) {
        lineno++;
        size_t len = strlen(line);
        bool whole = len > 0 && line[len - 1] == '\n';
        if (!whole && !feof(fp)) {
            st = si_error(SI_ERR_FORMAT,
                          "%s: line %d is longer than %d bytes: neither an HDF5 file nor a list "
                          "file of HDF5 paths",
                          path, lineno, LIST_LINE_MAX);
            break;
        }
        bool text = true; /* control characters but tabs and line ends are not a path's */
        for (size_t k = 0; k < len && text; k++) {
            unsigned char c = (unsigned char)line[k];
            text = c >= 0x20 || c == '\t' || c == '\n' || c == '\r';
        }
        if (!text) {
            st = si_error(SI_ERR_FORMAT,
                          "%s: neither an HDF5 file nor a list file of HDF5 paths (line %d is "
                          "not text)",
                          path, lineno);
            break;
        }
        char *b = line, *e = line + len;
        while (b < e && (*b == ' ' || *b == '\t')) b++;
        while (e > b && (e[-1] == '\n' || e[-1] == '\r' || e[-1] == ' ' || e[-1] == '\t')) e--;
        *e = '\0';
        if (*b == '\0' || *b == '#') continue;
        if (l->n >= LIST_FILES_MAX) {
            st = si_error(SI_ERR_FORMAT, "%s: names more than %d files", path, LIST_FILES_MAX);
            break;
        }
        list_add(l, *b == '/' || !dir ? si_xstrdup(b) : join(dir, b), lineno);
    }
    if (st == SI_OK && ferror(fp))
        st = si_error(SI_ERR_IO, "%s: cannot read: %s", path, strerror(errno));
    free(dir);
    fclose(fp);
    if (st == SI_OK && l->n == 0)
        st = si_error(SI_ERR_FORMAT, "%s: list file names no HDF5 file", path);
    return st;
}

/* Expands spec into files; *origin gets what spec was. */
si_status src_expand(const char *spec, src_path_list *l, const char **origin) {
    struct stat sb;
    if (stat(spec, &sb) == 0) {
        if (S_ISDIR(sb.st_mode)) {
            *origin = "directory";
            return list_dir(spec, l);
        }
        /* a FIFO would block the open forever, a device read without end */
        if (!S_ISREG(sb.st_mode))
            return si_error(SI_ERR_IO, "%s: not a regular file, a directory or a pattern", spec);
        htri_t is = H5Fis_hdf5(spec);
        if (is > 0) {
            *origin = "file";
            list_add(l, si_xstrdup(spec), 0);
            return SI_OK;
        }
        *origin = "list file";
        return list_file(spec, l);
    }
    if (errno != ENOENT) return si_error(SI_ERR_IO, "%s: cannot open: %s", spec, strerror(errno));
    if (!strpbrk(spec, "*?[")) return si_error(SI_ERR_IO, "%s: no such file", spec);
    *origin = "pattern";
    glob_t g;
    int r = glob(spec, 0, NULL, &g);
    if (r == GLOB_NOMATCH) return si_error(SI_ERR_IO, "%s: pattern matches no file", spec);
    if (r != 0) {
        globfree(&g);
        return si_error(SI_ERR_IO, "%s: cannot expand the pattern", spec);
    }
    for (size_t i = 0; i < g.gl_pathc; i++) list_add(l, si_xstrdup(g.gl_pathv[i]), 0);
    globfree(&g);
    return SI_OK;
}
