/* Control socket: commands, errors for bad requests, stale and live sockets,
 * and a client of another user refused although the socket's mode lets it
 * in (SO_PEERCRED). */
#include "testutil.h"

#include <esd/ctl.h>
#include <esd/err.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

static int counter;

static int cmd_status(void *arg, json_t *req, json_t **resp, const char **err)
{
	(void)req;
	(void)err;
	*resp = json_pack("{s:i, s:s}", "count", ++*(int *)arg, "state", "running");
	return 0;
}

static int cmd_fail(void *arg, json_t *req, json_t **resp, const char **err)
{
	(void)arg;
	(void)req;
	(void)resp;
	*err = "no such link";
	return -ENOENT;
}

static const struct esd_ctl_cmd cmds[] = {
	{"status", cmd_status, "node status"},
	{"fail", cmd_fail, "always fails"},
	{NULL, NULL, NULL},
};

static void test_commands(void **state)
{
	(void)state;
	char *dir = esd_test_mkdtemp("esd-ctl"), path[256];
	snprintf(path, sizeof(path), "%s/ctl.sock", dir);
	struct esd_ctl_server *s, *s2;
	json_t *r;

	json_t *req = json_pack("{s:s}", "cmd", "status");
	assert_int_equal(esd_ctl_call(path, req, 1000, &r), -ENOENT);
	json_decref(req);
	assert_int_equal(esd_ctl_server_start(path, cmds, &counter, &s), 0);
	/* a second server on a live socket is refused */
	assert_int_equal(esd_ctl_server_start(path, cmds, &counter, &s2), -EADDRINUSE);

	req = json_pack("{s:s}", "cmd", "status");
	assert_int_equal(esd_ctl_call(path, req, 2000, &r), 0);
	assert_true(json_is_true(json_object_get(r, "ok")));
	assert_int_equal(json_integer_value(json_object_get(r, "count")), 1);
	json_decref(r);
	json_decref(req);

	req = json_pack("{s:s}", "cmd", "fail");
	assert_int_equal(esd_ctl_call(path, req, 2000, &r), 0);
	assert_true(json_is_false(json_object_get(r, "ok")));
	assert_string_equal(json_string_value(json_object_get(r, "error")), "fail: no such link");
	json_decref(r);
	json_decref(req);

	req = json_pack("{s:s}", "cmd", "bogus");
	assert_int_equal(esd_ctl_call(path, req, 2000, &r), 0);
	assert_non_null(strstr(json_string_value(json_object_get(r, "error")), "unknown command"));
	json_decref(r);
	json_decref(req);

	req = json_pack("{s:s}", "cmd", "help");
	assert_int_equal(esd_ctl_call(path, req, 2000, &r), 0);
	assert_non_null(json_object_get(json_object_get(r, "commands"), "status"));
	json_decref(r);
	json_decref(req);

	/* raw garbage gets an error reply, and the server keeps serving */
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	strcpy(sa.sun_path, path);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(write(fd, "{not json\n", 10), 10);
	char buf[512] = {0};
	assert_true(read(fd, buf, sizeof(buf) - 1) > 0);
	assert_non_null(strstr(buf, "\"ok\":false"));
	close(fd);
	req = json_pack("{s:s}", "cmd", "status");
	assert_int_equal(esd_ctl_call(path, req, 2000, &r), 0);
	assert_int_equal(json_integer_value(json_object_get(r, "count")), 2);
	json_decref(r);
	json_decref(req);

	esd_ctl_server_stop(s);
	esd_ctl_server_stop(NULL);
	assert_int_equal(access(path, F_OK), -1);
	esd_test_rmtree(dir);
	free(dir);
}

/* In a child of uid 65534: what the server answers (exit 0: refused). */
static int other_user_asks(const char *path)
{
	pid_t pid = fork();
	if (pid == 0) {
		if (setgid(65534) || setuid(65534))
			_exit(77);
		int fd = socket(AF_UNIX, SOCK_STREAM, 0);
		struct sockaddr_un sa = {.sun_family = AF_UNIX};
		strcpy(sa.sun_path, path);
		if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)))
			_exit(3);
		/* the server may have answered and closed already: no SIGPIPE */
		(void)send(fd, "{\"cmd\":\"status\"}\n", 17, MSG_NOSIGNAL);
		char buf[512] = {0};
		if (read(fd, buf, sizeof(buf) - 1) <= 0)
			_exit(5);
		_exit(strstr(buf, "\"ok\":false") && strstr(buf, "your user") &&
			      !strstr(buf, "count") ? 0 : 6);
	}
	int st;
	waitpid(pid, &st, 0);
	if (!WIFEXITED(st))
		fprintf(stderr, "the client of uid 65534 ended by signal %d\n", WTERMSIG(st));
	return WIFEXITED(st) ? WEXITSTATUS(st) : 9;
}

static void test_other_user(void **state)
{
	(void)state;
	if (geteuid() != 0)
		ESD_TEST_SKIP("needs root to run a client as another user");
	char *dir = esd_test_mkdtemp("esd-ctl"), path[256];
	snprintf(path, sizeof(path), "%s/ctl.sock", dir);
	chmod(dir, 0755);
	struct esd_ctl_server *s;
	assert_int_equal(esd_ctl_server_start(path, cmds, &counter, &s), 0);
	chmod(path, 0666); /* a careless mode: the uid check still holds */
	int rc = other_user_asks(path);
	if (rc == 77)
		ESD_TEST_SKIP("cannot switch to uid 65534 here");
	assert_int_equal(rc, 0);
	esd_ctl_server_stop(s);
	esd_test_rmtree(dir);
	free(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {cmocka_unit_test(test_commands),
					   cmocka_unit_test(test_other_user)};
	return cmocka_run_group_tests(tests, NULL, NULL) ? 1 : 0;
}
