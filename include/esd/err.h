/*
 * esd/err.h - the error convention of the ESD runtime.
 *
 * Every fallible function returns 0 on success or a negative errno value
 * (-EINVAL, -ENOMEM, ...) on failure; constructors hand the object back
 * through an out-parameter. Foreign conventions (rte_errno, the positive
 * errno of ibv_post_send, -1 + errno of libc) are converted once, at the
 * boundary, with esd_neg_errno().
 *
 * Errors that a user can act on (a bad option, a corrupt file, a peer that
 * broke the protocol) are also logged with what and where (esd/log.h);
 * the return code says which class of error it was.
 */
#ifndef ESD_ERR_H
#define ESD_ERR_H

#include <errno.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Error codes of our own, beyond errno's range. */
enum {
	ESD_EPROTO_BASE = 4096,
	ESD_EBADMAGIC = 4097,   /* a header's magic does not match */
	ESD_EBADVERSION = 4098, /* a layout or protocol version we do not speak */
	ESD_EBADSUM = 4099,     /* a checksum does not match */
	ESD_EDIVERGED = 4100,   /* dispatch decisions of two nodes differ */
	ESD_ESTREAM = 4101,     /* two processes of a job read different data streams */
	ESD_EJOBFAILED = 4102,  /* a PS shard failed the job (a worker went away, ...) */
	ESD_EROLLBACK = 4103,   /* the shard went back to a checkpoint: resume there */
};

/* -errno of the last libc call, never 0 (a failed call that left errno 0
 * maps to -EIO). */
static inline int esd_neg_errno(void)
{
	return errno ? -errno : -EIO;
}

/* Human-readable text of a return code (0, -errno or -ESD_E*). The string
 * is static; do not free it. */
const char *esd_strerror(int rc);

#ifdef __cplusplus
}
#endif
#endif /* ESD_ERR_H */
