/*
 * esdctl serve-metrics: the metrics text over HTTP, on 127.0.0.1 unless
 * --bind names another IPv4 address of the host (a node's metrics address
 * in a deployment on several hosts), served by libmicrohttpd. Each scrape of /metrics
 * polls every target's control socket, so the numbers are as fresh as the
 * scrape; a daemon that went away shows as esd_up 0 instead of failing
 * the scrape. Runs until SIGINT or SIGTERM.
 */
#include "esdctl.h"

#include <microhttpd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t stop_sig;
static pthread_mutex_t scrape_mu = PTHREAD_MUTEX_INITIALIZER;

static void on_signal(int sig)
{
	stop_sig = sig;
}

static enum MHD_Result answer(void *cls, struct MHD_Connection *conn, const char *url,
                              const char *method, const char *version, const char *upload,
                              size_t *upload_len, void **con_cls)
{
	const struct esdctl *ctl = cls;
	struct MHD_Response *resp;
	enum MHD_Result ret;
	unsigned status = MHD_HTTP_OK;
	char *body;
	(void)version;
	(void)upload;
	(void)upload_len;
	(void)con_cls;

	if (strcmp(method, "GET") && strcmp(method, "HEAD")) {
		body = strdup("only GET\n");
		status = MHD_HTTP_METHOD_NOT_ALLOWED;
	} else if (!strcmp(url, "/metrics")) {
		pthread_mutex_lock(&scrape_mu);
		body = esdctl_metrics_text(ctl);
		pthread_mutex_unlock(&scrape_mu);
	} else if (!strcmp(url, "/")) {
		body = strdup("esdctl: metrics at /metrics\n");
	} else {
		body = strdup("not found: metrics are at /metrics\n");
		status = MHD_HTTP_NOT_FOUND;
	}
	if (!body)
		return MHD_NO;
	resp = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
	if (!resp) {
		free(body);
		return MHD_NO;
	}
	MHD_add_response_header(resp, "Content-Type", "text/plain; version=0.0.4; charset=utf-8");
	ret = MHD_queue_response(conn, status, resp);
	MHD_destroy_response(resp);
	return ret;
}

int esdctl_serve_metrics(const struct esdctl *ctl, const char *bind, unsigned port)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	if (!bind)
		bind = "127.0.0.1";
	if (inet_pton(AF_INET, bind, &sa.sin_addr) != 1) {
		fprintf(stderr, "esdctl: serve-metrics --bind '%s': not an IPv4 address\n", bind);
		return ESDCTL_EUSAGE;
	}
	struct MHD_Daemon *d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG,
	                                        (uint16_t)port, NULL, NULL, answer, (void *)ctl,
	                                        MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
	                                        MHD_OPTION_CONNECTION_TIMEOUT, 30u, MHD_OPTION_END);
	if (!d) {
		fprintf(stderr, "esdctl: cannot serve on %s:%u (port in use, or not an address "
		        "of this host?)\n", bind, port);
		return ESDCTL_EFAIL;
	}
	const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
	unsigned bound = di ? di->port : port;
	/* the testbed reads this line to learn a port picked by the kernel */
	printf("esdctl: serving metrics of %d target%s on http://%s:%u/metrics\n",
	       ctl->ntargets, ctl->ntargets == 1 ? "" : "s", bind, bound);
	fflush(stdout);

	struct sigaction act = {.sa_handler = on_signal};
	sigaction(SIGINT, &act, NULL);
	sigaction(SIGTERM, &act, NULL);
	signal(SIGPIPE, SIG_IGN);
	while (!stop_sig)
		nanosleep(&(struct timespec){0, 100 * 1000 * 1000}, NULL);
	MHD_stop_daemon(d);
	return 0;
}
