/* The output's lock (io/lock.h). */
#include "io/lock.h"

#include "io/beside.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct si_lock {
    char *path;
    int fd;
    bool held;
};

/* What the holder wrote in the lock file, or a stand-in when it is empty (just taken). */
static void holder_of(int fd, char *buf, size_t cap) {
    ssize_t got = pread(fd, buf, cap - 1, 0);
    buf[got > 0 ? got : 0] = 0;
    char *nl = strchr(buf, '\n');
    if (nl) *nl = 0;
    if (!buf[0]) snprintf(buf, cap, "holder not yet named");
}

static void name_holder(int fd) {
    char host[256] = "?", when[64] = "?", line[512];
    gethostname(host, sizeof host - 1);
    time_t now = time(NULL);
    struct tm tm;
    if (gmtime_r(&now, &tm)) strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", &tm);
    int n = snprintf(line, sizeof line, "host %s, pid %d, started %s\n", host, (int)getpid(), when);
    if (ftruncate(fd, 0) != 0 || pwrite(fd, line, (size_t)n, 0) != n)
        si_log_warn("cannot name this job in its lock file: %s", strerror(errno));
}

si_status si_lock_take(const char *output, si_lock **out) {
    *out = NULL;
    si_lock *l = si_xcalloc(1, sizeof *l);
    if (asprintf(&l->path, "%s.lock", output) < 0) si_fatal(__FILE__, __LINE__, "asprintf", NULL);
    for (int attempt = 0; attempt < 16; attempt++) {
        /* never through a planted link: the lock file is written (its holder's name) */
        si_status st = si_beside_open(l->path, O_RDWR | O_CREAT, &l->fd);
        if (st != SI_OK) {
            si_error_prefix(st, "%s: its lock file: ", output);
            si_lock_release(l);
            return st;
        }
        struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
        if (fcntl(l->fd, F_OFD_SETLK, &fl) != 0) {
            if (errno == EAGAIN || errno == EACCES) {
                char who[300];
                holder_of(l->fd, who, sizeof who);
                st = si_error(SI_ERR_ARG,
                              "%s: another job is writing it (%s); wait for it to end "
                              "or choose another --output",
                              output, who);
                si_lock_release(l);
                return st;
            }
            si_log_warn("%s: this file system does not lock files (%s): a second run on the same "
                        "output would not be noticed",
                        l->path, strerror(errno));
            *out = l;
            return SI_OK;
        }
        struct stat a, b; /* still the file at the path (not one a finishing job just removed) */
        if (fstat(l->fd, &a) == 0 && stat(l->path, &b) == 0 && a.st_dev == b.st_dev &&
            a.st_ino == b.st_ino) {
            l->held = true;
            name_holder(l->fd);
            *out = l;
            return SI_OK;
        }
        close(l->fd);
    }
    si_status st = si_error(SI_ERR_IO, "%s: the lock file keeps being replaced", l->path);
    l->fd = -1;
    si_lock_release(l);
    return st;
}

void si_lock_release(si_lock *l) {
    if (!l) return;
    if (l->held) unlink(l->path);
    if (l->fd >= 0) close(l->fd);
    free(l->path);
    free(l);
}
