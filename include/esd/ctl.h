/*
 * esd/ctl.h - the control socket of esdd and esd-ps, and its client.
 *
 * Protocol: a unix stream socket (mode 0600) that serves only clients of
 * the daemon's user and root (SO_PEERCRED; others get an error reply and
 * the close), and whose client talks only to a daemon of its own user or
 * root; the client sends one JSON
 * object on one line, e.g. {"cmd":"status"} or
 * {"cmd":"set","key":"link.rate","value":"5G"}, and reads one JSON object
 * on one line back: {"ok":true,...} or {"ok":false,"error":"..."}.
 * Connections are served one request at a time by the server's thread;
 * a request larger than 64 KiB or not valid JSON gets an error reply.
 *
 * Handlers run on the server thread: they must take whatever locks the
 * state they read needs, and must not block for long.
 */
#ifndef ESD_CTL_H
#define ESD_CTL_H

#include <jansson.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A handler fills *resp (a new JSON object; the server adds "ok") and
 * returns 0, or returns -errno and may set *err to a static or
 * handler-owned message for the client. */
typedef int (*esd_ctl_handler)(void *arg, json_t *req, json_t **resp, const char **err);

struct esd_ctl_cmd {
	const char *name; /* value of "cmd" */
	esd_ctl_handler fn;
	const char *help; /* one line, shown by the "help" command */
};

struct esd_ctl_server;

/* Listen on 'path' (a stale socket is replaced) and serve the commands in
 * 'cmds' (terminated by a {NULL} entry; the array must outlive the server)
 * on a new thread. A "help" command is built in. Returns 0, -ENAMETOOLONG,
 * -EADDRINUSE (a live server answers on path), or -errno. */
int esd_ctl_server_start(const char *path, const struct esd_ctl_cmd *cmds, void *arg,
			 struct esd_ctl_server **out);
/* Stop the thread, close and unlink the socket. Accepts NULL. */
void esd_ctl_server_stop(struct esd_ctl_server *srv);

/* Run request req against cmds as the server would (the built-in "help"
 * included): a new reply object with "ok" and, on failure, "error". What
 * relays a request to a daemon through another uses. */
json_t *esd_ctl_run(const struct esd_ctl_cmd *cmds, void *arg, json_t *req);

/* Client: send req to the server at path and return its reply (caller
 * owns it: json_decref). Returns 0, -ENOENT/-ECONNREFUSED (no server;
 * nothing logged, so tools can word their own message), -EPERM (the
 * daemon runs as another user; logged), -ETIMEDOUT, -EPROTO (reply not
 * JSON), or -errno. */
int esd_ctl_call(const char *path, json_t *req, int timeout_ms, json_t **reply);

#ifdef __cplusplus
}
#endif
#endif /* ESD_CTL_H */
