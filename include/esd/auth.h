/*
 * esd/auth.h - the job key: who may talk to a job's PS shards.
 *
 * A job has one secret, a 256-bit key in a file named by the job
 * (job.key). Every process of the job reads the same key; every link
 * between a node daemon and a shard starts with a mutual challenge-response
 * over it, and every frame after that carries a tag that binds it to the
 * link and to its place in the link's order (docs/protocol.md, "Job key
 * handshake" and "Threat model"). The key never leaves the file: what
 * travels are fresh nonces and one-way tags over them.
 *
 * The key file is one line of 64 hexadecimal digits, mode 0600, a regular
 * file owned by the process's user or root (a file that its group or
 * others may read, another user's file, or a FIFO, socket, device or
 * directory is refused, as ssh refuses such a private key). Create one
 * with `esdctl keygen FILE`. A job without a key must say job.insecure =
 * yes (esd_job_key_check).
 *
 * Example
 * -------
 *     struct esd_key k;
 *     if (esd_key_load(job.key_file, &k)) exit(2);   // error logged
 *     struct esd_link_opts o;
 *     esd_link_opts_init(&o);
 *     o.key = &k;                                    // links use it
 *     ...
 *     esd_key_wipe(&k);
 *
 * The tag cipher is chosen per link: AES-256-GCM when both ends' CPUs run
 * it in hardware, else ChaCha20-Poly1305. ESD_AUTH_SUITES=chacha20-poly1305
 * in a process's environment makes it offer only the latter (to compare
 * their cost).
 *
 * Caveats
 * -------
 * - A link with a key refuses a peer without one and the other way round:
 *   every process of a job has the key, or none has.
 * - The key authenticates and binds frames; it does not encrypt them: an
 *   eavesdropper on the network can read the rows (see the threat model).
 */
#ifndef ESD_AUTH_H
#define ESD_AUTH_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ESD_KEY_BYTES 32

struct esd_key {
	uint8_t b[ESD_KEY_BYTES];
};

/*
 * Write a new random key to path, created with mode 0600 (never replacing
 * a file). Returns 0, -EEXIST, or another -errno; errors are logged with
 * the path.
 */
int esd_key_create(const char *path);

/*
 * Read the key of path into *out. Refuses (logging the path and why) a
 * file that group or others may read or write, or that another user than
 * this process's (or root) owns, naming the owner (-EPERM); anything but
 * a regular file, naming what it is (-EINVAL; a FIFO is refused at once,
 * never waited on); a file that is not one line of 64 hexadecimal digits
 * (-EINVAL), or that cannot be read (-errno).
 */
int esd_key_load(const char *path, struct esd_key *out);

/* Overwrite a key in memory. */
void esd_key_wipe(struct esd_key *k);

#ifdef __cplusplus
}
#endif
#endif /* ESD_AUTH_H */
