/*
 * esd-replay: replay a dataset stream through n simulated worker caches,
 * with the daemon's own snapshot, policy and decision code (struct
 * esd_dispatcher), for a list of mechanisms, and report what each really
 * costs: the true transmission cost and its composition per transfer kind
 * and per link class, the critical path (esd/dispatch_quality.h), the hit
 * ratio and the decision time. No network. The settings come from the
 * job INI that drives the runtime, so the "job" mechanism counts exactly
 * the transfers esdd's dispatcher plans (its summary's plan_all_workers).
 *
 * usage: esd-replay --config JOB.ini [--set sec.key=v]... [--mechanisms LIST]
 *                   [--iters N] [--format table|csv|json] [--json FILE]
 *
 * A mechanism is METHOD[+shared][@SIZES]:
 *   METHOD  vanilla (with full-set sync, as published), laia, heu, opt,
 *           hungarian, hybrid:ALPHA, or job (the INI's method, sync, matrix
 *           and sizes as they are);
 *   +shared the shared-charge cost matrix (cost-based methods);
 *   +padded with model.dims: decide as if every row were a full one (what
 *           charging each row its own bytes buys; "wire_bytes" in the
 *           JSON is what each mechanism moved);
 *   @SIZES  job (default: workers.batch), equal, auto (link-aware sizes,
 *           chosen by probing the size model on the stream's first
 *           iterations), same (the sizes of the mechanism before it in the
 *           list), or a list m0/m1/...;
 *   esd+    is opt+shared@auto.
 * The first mechanism is the baseline of the ratio columns.
 */
#include "replay.h"

#include <esd/err.h>
#include <esd/log.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f)
{
	fprintf(f,
	        "usage: esd-replay --config JOB.ini [--set sec.key=v]... [--mechanisms LIST]\n"
	        "                  [--iters N] [--format table|csv|json] [--json FILE]\n"
	        "  LIST: comma-separated METHOD[+shared][+padded][+ls[:N]][@job|equal|auto|same|m0/m1/..]\n"
	        "        METHOD: vanilla laia heu opt hungarian hybrid:ALPHA job; esd+ is\n"
	        "        opt+shared@auto (default: laia@equal,laia,heu,opt,esd+)\n");
}

/* Long: esd-replay's options, each checked with its own message, then the mechanisms' runs
 * and the table. */
int main(int argc, char **argv)
{
	const char *config = NULL, *mechs = "laia@equal,laia,heu,opt,esd+", *format = "table";
	const char *json_path = NULL;
	const char *sets[64];
	int nsets = 0;
	uint64_t iters = 0;
	static const struct option opts[] = {{"config", required_argument, 0, 'c'},
	                                     {"set", required_argument, 0, 's'},
	                                     {"mechanisms", required_argument, 0, 'm'},
	                                     {"iters", required_argument, 0, 'i'},
	                                     {"format", required_argument, 0, 'f'},
	                                     {"json", required_argument, 0, 'j'},
	                                     {"help", no_argument, 0, 'h'},
	                                     {0, 0, 0, 0}};
	int c;
	while ((c = getopt_long(argc, argv, "c:s:m:i:f:j:h", opts, NULL)) != -1) {
		switch (c) {
		case 'c':
			config = optarg;
			break;
		case 's':
			if (nsets == 64) {
				fprintf(stderr, "esd-replay: too many --set\n");
				return 2;
			}
			sets[nsets++] = optarg;
			break;
		case 'm':
			mechs = optarg;
			break;
		case 'i': {
			char *e;
			iters = strtoull(optarg, &e, 10);
			if (*e || !*optarg) {
				fprintf(stderr, "esd-replay: --iters '%s': expected a number\n",
				        optarg);
				return 2;
			}
			break;
		}
		case 'f':
			format = optarg;
			break;
		case 'j':
			json_path = optarg;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (!config || optind != argc ||
	    (strcmp(format, "table") && strcmp(format, "csv") && strcmp(format, "json"))) {
		usage(stderr);
		return 2;
	}
	struct replay_env env;
	if (replay_env_load(&env, config, sets, nsets, iters))
		return 1;
	struct replay_result res[REPLAY_MAX_MECH];
	int nres = 0, rc = 0;
	char list[1024];
	snprintf(list, sizeof(list), "%s", mechs);
	for (char *save = NULL, *tok = strtok_r(list, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		if (nres == REPLAY_MAX_MECH) {
			fprintf(stderr, "esd-replay: at most %d mechanisms\n", REPLAY_MAX_MECH);
			rc = 2;
			break;
		}
		struct replay_mech m;
		if (replay_mech_parse(&env, tok, &m)) {
			fprintf(stderr, "esd-replay: bad mechanism '%s'\n", tok);
			rc = 2;
			break;
		}
		if (m.sizes == SIZES_SAME) {
			if (!nres) {
				fprintf(stderr,
				        "esd-replay: %s: @same needs an earlier mechanism\n", tok);
				rc = 2;
				break;
			}
			m.sizes = SIZES_LIST;
			memcpy(m.cap, res[nres - 1].cap, sizeof(m.cap));
		}
		if ((rc = replay_run(&env, &m, &res[nres]))) {
			fprintf(stderr, "esd-replay: mechanism %s: %s\n", tok, esd_strerror(rc));
			rc = 1;
			break;
		}
		nres++;
	}
	if (!rc) {
		if (!strcmp(format, "table"))
			replay_print_table(&env, res, nres, stdout);
		else if (!strcmp(format, "csv"))
			replay_print_csv(&env, res, nres, stdout);
		else
			rc = replay_write_json(&env, res, nres, "-");
		if (!rc && json_path)
			rc = replay_write_json(&env, res, nres, json_path);
	}
	replay_env_free(&env);
	return rc ? 1 : 0;
}
