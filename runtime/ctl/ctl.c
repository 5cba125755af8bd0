/*
 * Control socket server and client. Line-delimited JSON over a unix stream
 * socket: trivially scriptable (socat, nc -U) and easy to keep robust.
 * The server runs one thread with poll(2) over the listening socket, its
 * clients and a wake-up pipe for shutdown.
 */
#include <esd/ctl.h>
#include <esd/err.h>
#include <esd/log.h>
#include <esd/clock.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#define MAX_CLIENTS 16
#define MAX_REQ     (64 * 1024)

struct client {
	int fd;
	size_t len;
	char *buf;
};

struct esd_ctl_server {
	const struct esd_ctl_cmd *cmds;
	void *arg;
	int lfd;
	int wake[2];
	char path[108];
	pthread_t thread;
	struct client cl[MAX_CLIENTS];
};

static int addr_of(const char *path, struct sockaddr_un *sa)
{
	memset(sa, 0, sizeof(*sa));
	sa->sun_family = AF_UNIX;
	if (strlen(path) >= sizeof(sa->sun_path))
		return -ENAMETOOLONG;
	strcpy(sa->sun_path, path);
	return 0;
}

static void reply(int fd, json_t *obj)
{
	char *s = json_dumps(obj, JSON_COMPACT);
	if (!s)
		return;
	size_t n = strlen(s);
	s[n] = '\n'; /* replaces the terminator: we write n+1 bytes */
	for (size_t off = 0; off <= n;) {
		ssize_t w = send(fd, s + off, n + 1 - off, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0) {
			if (errno == EAGAIN) {
				struct pollfd p = {.fd = fd, .events = POLLOUT};
				if (poll(&p, 1, 1000) > 0)
					continue;
			}
			break;
		}
		off += (size_t)w;
	}
	free(s);
}

static void error_reply(int fd, const char *msg)
{
	json_t *o = json_pack("{s:b, s:s}", "ok", 0, "error", msg);
	reply(fd, o);
	json_decref(o);
}

static json_t *error_obj(const char *msg)
{
	return json_pack("{s:b, s:s}", "ok", 0, "error", msg);
}

json_t *esd_ctl_run(const struct esd_ctl_cmd *cmds, void *arg, json_t *req)
{
	json_t *resp = NULL;
	char msg[1024];
	const char *err = NULL;
	const char *cmd = json_string_value(json_object_get(req, "cmd"));
	if (!cmd)
		return error_obj("request has no \"cmd\" string");
	if (!strcmp(cmd, "help")) {
		json_t *all = json_object();
		for (const struct esd_ctl_cmd *c = cmds; c->name; c++)
			json_object_set_new(all, c->name, json_string(c->help ? c->help : ""));
		return json_pack("{s:b, s:o}", "ok", 1, "commands", all);
	}
	for (const struct esd_ctl_cmd *c = cmds; c->name; c++) {
		if (strcmp(c->name, cmd))
			continue;
		int rc = c->fn(arg, req, &resp, &err);
		if (rc) {
			json_decref(resp);
			snprintf(msg, sizeof(msg), "%s: %s", cmd, err ? err : esd_strerror(rc));
			return error_obj(msg);
		}
		if (!resp)
			resp = json_object();
		json_object_set_new(resp, "ok", json_true());
		return resp;
	}
	snprintf(msg, sizeof(msg), "unknown command '%.64s' (try {\"cmd\":\"help\"})", cmd);
	return error_obj(msg);
}

static void handle_line(struct esd_ctl_server *s, int fd, const char *line)
{
	json_error_t jerr;
	json_t *req = json_loads(line, 0, &jerr);
	char msg[1024];

	if (!req || !json_is_object(req)) {
		snprintf(msg, sizeof(msg), "request is not a JSON object: %s",
			 req ? "wrong type" : jerr.text);
		error_reply(fd, msg);
		json_decref(req);
		return;
	}
	json_t *resp = esd_ctl_run(s->cmds, s->arg, req);
	if (resp)
		reply(fd, resp);
	json_decref(resp);
	json_decref(req);
}

static void drop(struct client *c)
{
	close(c->fd);
	free(c->buf);
	memset(c, 0, sizeof(*c));
	c->fd = -1;
}

static void client_read(struct esd_ctl_server *s, struct client *c)
{
	char tmp[4096];
	ssize_t n = recv(c->fd, tmp, sizeof(tmp), MSG_DONTWAIT);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		drop(c);
		return;
	}
	if (c->len + (size_t)n > MAX_REQ) {
		error_reply(c->fd, "request larger than 64 KiB");
		drop(c);
		return;
	}
	char *nb = realloc(c->buf, c->len + (size_t)n + 1);
	if (!nb) {
		drop(c);
		return;
	}
	c->buf = nb;
	memcpy(c->buf + c->len, tmp, (size_t)n);
	c->len += (size_t)n;
	c->buf[c->len] = '\0';
	char *nl;
	while (c->fd >= 0 && (nl = memchr(c->buf, '\n', c->len))) {
		*nl = '\0';
		handle_line(s, c->fd, c->buf);
		size_t rest = c->len - (size_t)(nl + 1 - c->buf);
		memmove(c->buf, nl + 1, rest);
		c->len = rest;
		c->buf[c->len] = '\0';
	}
}

/* A control socket's peer must run as this process's user or as root
 * (who could read the process's memory anyway): file modes alone do not
 * hold against a socket file made in a directory others may write. */
static int peer_uid_ok(int fd, const char *who)
{
	struct ucred cred;
	socklen_t len = sizeof(cred);
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0) {
		ESD_WARN("ctl", "%s: cannot learn the peer's user: %s", who, strerror(errno));
		return -EPERM;
	}
	if (cred.uid == geteuid() || cred.uid == 0)
		return 0;
	ESD_WARN("ctl", "%s: refused a peer of uid %u (pid %d): only uid %u and root may talk here",
		 who, (unsigned)cred.uid, (int)cred.pid, (unsigned)geteuid());
	return -EPERM;
}

static void *serve(void *arg)
{
	prctl(PR_SET_NAME, "esd-ctl", 0, 0, 0);
	struct esd_ctl_server *s = arg;
	struct pollfd p[MAX_CLIENTS + 2];

	for (;;) {
		int np = 0;
		p[np++] = (struct pollfd){.fd = s->wake[0], .events = POLLIN};
		p[np++] = (struct pollfd){.fd = s->lfd, .events = POLLIN};
		for (int i = 0; i < MAX_CLIENTS; i++)
			p[np++] = (struct pollfd){.fd = s->cl[i].fd, .events = POLLIN};
		if (poll(p, (nfds_t)np, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (p[0].revents)
			break;
		if (p[1].revents & POLLIN) {
			int fd = accept4(s->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
			if (fd >= 0 && peer_uid_ok(fd, s->path)) {
				error_reply(fd, "control socket: your user may not talk to this "
					    "daemon");
				close(fd);
			} else if (fd >= 0) {
				int i;
				for (i = 0; i < MAX_CLIENTS && s->cl[i].fd >= 0; i++)
					;
				if (i == MAX_CLIENTS) {
					error_reply(fd, "too many control clients");
					close(fd);
				} else {
					s->cl[i].fd = fd;
				}
			}
		}
		for (int i = 0; i < MAX_CLIENTS; i++)
			if (s->cl[i].fd >= 0 && p[i + 2].revents)
				client_read(s, &s->cl[i]);
	}
	return NULL;
}

int esd_ctl_server_start(const char *path, const struct esd_ctl_cmd *cmds, void *arg,
			 struct esd_ctl_server **out)
{
	struct sockaddr_un sa;
	struct esd_ctl_server *s;
	int rc = addr_of(path, &sa);

	if (rc)
		return rc;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->cmds = cmds;
	s->arg = arg;
	strcpy(s->path, path);
	for (int i = 0; i < MAX_CLIENTS; i++)
		s->cl[i].fd = -1;
	s->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (s->lfd < 0) {
		rc = esd_neg_errno();
		goto err_free;
	}
	/* a live server on path? then refuse; else replace the stale socket */
	int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (probe >= 0 && connect(probe, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
		close(probe);
		ESD_ERR("ctl", "a server already answers on %s", path);
		rc = -EADDRINUSE;
		goto err_sock;
	}
	if (probe >= 0)
		close(probe);
	unlink(path);
	if (bind(s->lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || chmod(path, 0600) < 0 ||
	    listen(s->lfd, 16) < 0) {
		rc = esd_neg_errno();
		ESD_ERR("ctl", "cannot listen on %s: %s", path, esd_strerror(rc));
		goto err_sock;
	}
	if (pipe2(s->wake, O_CLOEXEC) < 0) {
		rc = esd_neg_errno();
		goto err_unlink;
	}
	rc = -pthread_create(&s->thread, NULL, serve, s);
	if (rc)
		goto err_pipe;
	*out = s;
	return 0;
err_pipe:
	close(s->wake[0]);
	close(s->wake[1]);
err_unlink:
	unlink(path);
err_sock:
	close(s->lfd);
err_free:
	free(s);
	return rc;
}

void esd_ctl_server_stop(struct esd_ctl_server *s)
{
	if (!s)
		return;
	ssize_t w = write(s->wake[1], "x", 1);
	(void)w;
	pthread_join(s->thread, NULL);
	for (int i = 0; i < MAX_CLIENTS; i++)
		if (s->cl[i].fd >= 0)
			drop(&s->cl[i]);
	close(s->wake[0]);
	close(s->wake[1]);
	close(s->lfd);
	unlink(s->path);
	free(s);
}

int esd_ctl_call(const char *path, json_t *req, int timeout_ms, json_t **out)
{
	struct sockaddr_un sa;
	int rc = addr_of(path, &sa), fd;
	char *s = NULL, *buf = NULL;
	size_t len = 0;

	if (rc)
		return rc;
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return esd_neg_errno();
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		rc = esd_neg_errno();
		goto out;
	}
	if ((rc = peer_uid_ok(fd, path))) /* a daemon of another user: not ours */
		goto out;
	s = json_dumps(req, JSON_COMPACT);
	if (!s) {
		rc = -ENOMEM;
		goto out;
	}
	size_t n = strlen(s);
	s[n] = '\n';
	if (send(fd, s, n + 1, MSG_NOSIGNAL) != (ssize_t)(n + 1)) {
		rc = esd_neg_errno();
		goto out;
	}
	int64_t deadline = esd_now_ns() + (int64_t)timeout_ms * ESD_NS_PER_MS;
	for (;;) {
		int left = (int)((deadline - esd_now_ns()) / ESD_NS_PER_MS);
		struct pollfd p = {.fd = fd, .events = POLLIN};
		if (left <= 0 || poll(&p, 1, left) == 0) {
			rc = -ETIMEDOUT;
			goto out;
		}
		char *nb = realloc(buf, len + 65536 + 1);
		if (!nb) {
			rc = -ENOMEM;
			goto out;
		}
		buf = nb;
		ssize_t r = recv(fd, buf + len, 65536, 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			rc = r == 0 ? -EPROTO : esd_neg_errno();
			goto out;
		}
		len += (size_t)r;
		buf[len] = '\0';
		char *nl = memchr(buf, '\n', len);
		if (nl) {
			*nl = '\0';
			json_error_t jerr;
			*out = json_loads(buf, 0, &jerr);
			rc = *out ? 0 : -EPROTO;
			goto out;
		}
		if (len > 64 * 1024 * 1024) {
			rc = -EPROTO;
			goto out;
		}
	}
out:
	free(buf);
	free(s);
	close(fd);
	return rc;
}
