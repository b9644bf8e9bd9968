/* Opening and making files beside the output (io/beside.h). */
#include "io/beside.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Why the file open as fd (at path) is not one to use, or NULL. */
static const char *unfit(int fd) {
    struct stat sb;
    if (fstat(fd, &sb) != 0) return "it cannot be examined";
    if (!S_ISREG(sb.st_mode)) return "it is not a regular file";
    if (sb.st_nlink > 1) return "it has other names (hard links)";
    return NULL;
}

si_status si_beside_open(const char *path, int flags, int *fd) {
    *fd = open(path, flags | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
    if (*fd < 0 && errno == ELOOP)
        return si_error(SI_ERR_ARG,
                        "%s: is a symbolic link; refusing to open it (remove it, or choose "
                        "another --output)",
                        path);
    if (*fd < 0) return si_error(SI_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    const char *why = unfit(*fd);
    if (!why && fcntl(*fd, F_SETFL, fcntl(*fd, F_GETFL) & ~O_NONBLOCK) != 0)
        why = "its flags cannot be set";
    if (why) {
        close(*fd);
        *fd = -1;
        return si_error(SI_ERR_ARG,
                        "%s: %s; refusing to use it (remove it, or choose another "
                        "--output)",
                        path, why);
    }
    return SI_OK;
}

si_status si_beside_create(const char *path, int flags, int *fd) {
    if (unlink(path) != 0 && errno != ENOENT) {
        *fd = -1;
        return si_error(SI_ERR_IO, "%s: cannot remove the old one: %s", path, strerror(errno));
    }
    *fd = open(path, flags | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (*fd < 0)
        return si_error(SI_ERR_IO, "%s: cannot create: %s", path,
                        errno == EEXIST ? "another process made it meanwhile" : strerror(errno));
    return SI_OK;
}

si_status si_beside_check(const char *path) {
    struct stat sb;
    if (lstat(path, &sb) != 0)
        return errno == ENOENT
                   ? SI_OK
                   : si_error(SI_ERR_IO, "%s: cannot examine: %s", path, strerror(errno));
    const char *why = S_ISLNK(sb.st_mode)    ? "it is a symbolic link"
                      : !S_ISREG(sb.st_mode) ? "it is not a regular file"
                      : sb.st_nlink > 1      ? "it has other names (hard links)"
                                             : NULL;
    if (why)
        return si_error(SI_ERR_ARG,
                        "%s: %s; refusing to use it (remove it, or choose another "
                        "--output)",
                        path, why);
    return SI_OK;
}
