/*
 * esdctl.h - internals shared by the files of esdctl (private).
 *
 * A target is one control socket (an esdd's NODE_DIR/control.sock or an
 * esd-ps --control PATH). Every subcommand works on the list of targets
 * given on the command line.
 */
#ifndef ESDCTL_H
#define ESDCTL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#define ESDCTL_MAX_TARGETS 64

/* Exit codes. */
enum {
	ESDCTL_OK = 0,
	ESDCTL_EFAIL = 1,     /* the daemon refused or failed the command */
	ESDCTL_EUSAGE = 2,    /* bad command line or configuration */
	ESDCTL_ENODAEMON = 3, /* nothing answers on a socket */
};

struct esdctl {
	const char *targets[ESDCTL_MAX_TARGETS];
	int ntargets;
	bool json;
	int timeout_ms;
	int worker; /* --worker W: every request to node W through PS shard 0 (-1: none) */
};

/* One request to target i. On success *reply is the daemon's reply (the
 * caller owns it) and 0 is returned; otherwise a one-line error is printed
 * to stderr (unless quiet) and an ESDCTL_E* exit code returned. */
int esdctl_call(const struct esdctl *ctl, int i, json_t *req, bool quiet, json_t **reply);
/* {"cmd": cmd} to target i. */
int esdctl_cmd(const struct esdctl *ctl, int i, const char *cmd, bool quiet, json_t **reply);

/* Print obj as one JSON document on stdout. */
void esdctl_print_json(json_t *obj);
/* Field accessors that tolerate absent fields. */
double esdctl_num(json_t *obj, const char *key);
const char *esdctl_str(json_t *obj, const char *key);
/* "1.5 GiB" style. */
const char *esdctl_bytes(double b, char *buf, size_t len);

/* Subcommands (query.c); each returns an exit code. */
int esdctl_status(const struct esdctl *ctl);
int esdctl_links(const struct esdctl *ctl);
int esdctl_cache(const struct esdctl *ctl);
int esdctl_dispatch(const struct esdctl *ctl);
int esdctl_set(const struct esdctl *ctl, const char *key, const char *value);
int esdctl_checkpoint(const struct esdctl *ctl, double wait_s);
/* A graceful stop of the whole job (esd-ps or esdd target). */
int esdctl_stop(const struct esdctl *ctl);

/* metrics.c: the Prometheus text of every target (a daemon that does not
 * answer shows as esd_up 0). Returns a malloc'd string. */
char *esdctl_metrics_text(const struct esdctl *ctl);
int esdctl_metrics(const struct esdctl *ctl);
/* serve.c */
int esdctl_serve_metrics(const struct esdctl *ctl, const char *bind, unsigned port);
/* top.c: a live view of the job through its PS shards (shard 0: every
 * node), every interval_s, frames times (0: until the job ends). */
int esdctl_top(const struct esdctl *ctl, double interval_s, long frames);
/* plan.c */
int esdctl_plan(const struct esdctl *ctl, const char *config, const char *const *sets, int nsets);

#endif
