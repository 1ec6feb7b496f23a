/* artifact.c - the checks on an artifact's fd, passed by the node with a
 * verb (suspend, template and memory-base exports and imports): the verbs
 * and the rooms that read or write it both run them. */
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>

#include "nodemgr-internal.h"

int mgr_artifact_fd_check(int fd, bool write, err_t *err)
{
	struct stat st;
	int fl;

	if (fd < 0)
		return err_set(err, EINVAL, "no artifact fd passed");
	if (fstat(fd, &st) < 0)
		return err_sys(err, "fstat artifact fd");
	if (!S_ISREG(st.st_mode))
		return err_set(err, EINVAL, "artifact fd is not a regular file");
	fl = fcntl(fd, F_GETFL);
	if (fl < 0 || (write && (fl & O_ACCMODE) == O_RDONLY))
		return err_set(err, EINVAL, "artifact fd is not writable");
	if (!write && (fl & O_ACCMODE) == O_WRONLY)
		return err_set(err, EINVAL, "artifact fd is not readable");
	return 0;
}

int mgr_artifact_stream_check(int fd, bool write, bool *piped, err_t *err)
{
	struct stat st;
	bool fifo = fd >= 0 && fstat(fd, &st) == 0 && S_ISFIFO(st.st_mode);
	int mode = fifo ? fcntl(fd, F_GETFL) & O_ACCMODE : 0;

	if (piped)
		*piped = fifo;
	if (!fifo)
		return mgr_artifact_fd_check(fd, write, err);
	if (mode == (write ? O_RDONLY : O_WRONLY))
		return err_set(err, EINVAL, "artifact pipe is not %s", write ? "writable" : "readable");
	return 0;
}

