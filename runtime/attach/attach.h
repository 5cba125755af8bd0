/*
 * attach.h - the control channel between a node daemon and its trainer
 * (private to runtime/): the node directory and its lock, a SOCK_SEQPACKET
 * unix socket with peer-uid checking, fd passing, and the fixed messages
 * of the attach protocol (docs/runtime.md "Attach protocol").
 */
#ifndef ESD_RUNTIME_ATTACH_H
#define ESD_RUNTIME_ATTACH_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define ESD_ATTACH_MAGIC   0x45534441u /* "ESDA" */
#define ESD_ATTACH_VERSION     4u /* heartbeats, FAILED; WELCOME carries their timing */
#define ESD_ATTACH_VERSION_MIN 2u /* still served on jobs without bags */
#define ESD_ATTACH_SOCK    "esdd.sock"
#define ESD_ATTACH_LOCK    "lock"

enum esd_attach_op {
	ESD_AT_HELLO = 1,   /* trainer -> daemon */
	ESD_AT_WELCOME = 2, /* daemon -> trainer, + 2 fds (cache region, exchange area),
			     * + a third for trainer index > 0 (its own gradient slots) */
	ESD_AT_BATCH = 3,   /* daemon -> trainer: a micro-batch is ready */
	ESD_AT_COMMIT = 4,  /* trainer -> daemon: gradients written */
	ESD_AT_STOP = 5,    /* daemon -> trainer: training is over */
	ESD_AT_REFUSE = 6,  /* daemon -> trainer: attach refused, text says why */
	ESD_AT_STOP_REQ = 7, /* trainer -> daemon: stop the job gracefully (SIGTERM) */
	/* version 4 on */
	ESD_AT_FAILED = 8,    /* trainer -> daemon: it fails; detail says why (the job fails) */
	ESD_AT_HEARTBEAT = 9, /* both ways: sent by a side that sent nothing for heartbeat_ms */
};

/* Most bytes of FAILED's text, its NUL included. */
#define ESD_ATTACH_DETAIL 512

/* Every message is this struct; unused fields are zero. */
struct esd_attach_msg {
	uint32_t magic;
	uint16_t version;
	uint16_t op;
	uint32_t pid;     /* HELLO: trainer pid */
	uint32_t rank;    /* WELCOME */
	uint32_t workers; /* WELCOME */
	uint32_t index;   /* WELCOME: this trainer's place among the node's */
	uint32_t trainers; /* WELCOME: the node's trainers */
	uint32_t m;       /* BATCH: samples in this micro-batch */
	uint64_t iter;    /* BATCH, COMMIT */
	uint64_t global_k; /* BATCH: global batch size (loss normalisation) */
	double loss;      /* COMMIT: summed loss of the micro-batch */
	char text[80];    /* REFUSE: reason */
	/* version 3 on: a version-2 message is the struct up to here */
	uint32_t nkeys;   /* BATCH: keys (slots) in this micro-batch */
	uint32_t flags;   /* BATCH: ESD_AT_CHECKPOINT */
	/* version 4 on: a version-3 message is the struct up to here */
	uint32_t heartbeat_ms;    /* WELCOME: each side sends at least this often */
	uint32_t peer_timeout_ms; /* WELCOME: a side heard from not at all this long is dead */
	/* FAILED: what failed, NUL-terminated; only its bytes travel (a
	 * message without it ends before it) */
	char detail[ESD_ATTACH_DETAIL];
};

/* BATCH flags */
#define ESD_AT_CHECKPOINT 1u /* a checkpoint boundary: the rows' checkpoint is of this iteration */
/* WELCOME flags (version 3 on) */
#define ESD_AT_INSECURE 2u /* the job runs without a key (job.insecure): the trainer warns */

/* Bytes of a message of the given version on the wire, detail not
 * counted (0: not spoken). */
size_t esd_attach_msg_size(uint16_t version);

/* Create (mode 0700) or reuse the node directory and take its lock with
 * flock(LOCK_EX|LOCK_NB). Returns 0 and the lock fd (keep it open for the
 * daemon's lifetime), -EBUSY if another process holds it (logged with its
 * pid), -EPERM if the directory is not ours or is group/world accessible,
 * or -errno. */
int esd_nodedir_lock(const char *dir, int *lock_fd);

/* Listen on DIR/esdd.sock (mode 0600; a stale socket is replaced).
 * Returns 0 and the listening fd (non-blocking, close-on-exec), or -errno. */
int esd_attach_listen(const char *dir, int *listen_fd);

/* Accept one connection; *uid and *pid from SO_PEERCRED. Returns 0,
 * -EAGAIN if none is pending, or -errno. */
int esd_attach_accept(int listen_fd, int *fd, uid_t *uid, pid_t *pid);

/* Connect to DIR/esdd.sock. Returns 0, -ENOENT (no daemon), -ECONNREFUSED
 * (a socket left by a daemon that died, or one not listening yet), or
 * -errno; nothing logged. */
int esd_attach_connect(const char *dir, int *fd);

/* Send a message with up to 4 fds, in msg->version's size (a version-4
 * FAILED with its detail). Returns 0 or -errno (-EPIPE when the peer is
 * gone). */
int esd_attach_send(int fd, const struct esd_attach_msg *msg, const int *fds, int nfds);

/* Send without waiting (a heartbeat): -EAGAIN when the socket is full,
 * -EBUSY when the peer has not read all we sent before (it has something
 * to read, so it hears from us anyway). Async-signal-safe. */
int esd_attach_send_nowait(int fd, const struct esd_attach_msg *msg);

/* Receive one message, waiting at most timeout_ms (-1: forever), of any
 * version from ESD_ATTACH_VERSION_MIN on (a shorter one's later fields
 * read 0; msg->version says which; detail is NUL-terminated). Received fds go to fds[0..*nfds)
 * (close-on-exec); surplus fds are closed. Returns 0, -ETIMEDOUT,
 * -ECONNRESET (peer closed), -EPROTO (bad magic, version or size;
 * logged), or -errno. */
int esd_attach_recv(int fd, struct esd_attach_msg *msg, int *fds, int *nfds, int timeout_ms);

/* A message with magic and version (ESD_ATTACH_VERSION) filled in. */
struct esd_attach_msg esd_attach_msg_make(enum esd_attach_op op);

#endif
