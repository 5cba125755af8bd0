/*
 * esdctl: the operator's view of a running ESD job.
 *
 *   esdctl [--node DIR | --socket PATH ...] [--json] [--timeout MS] COMMAND
 *
 * Talks to esdd (NODE_DIR/control.sock) and esd-ps (--control PATH) over
 * their control sockets (esd/ctl.h: one JSON object per line), prints
 * human tables or, with --json, the replies for scripts; exports
 * Prometheus metrics; and plans the memory of a job file before anything
 * starts. Nothing here changes what a job decides: settings that would
 * make the nodes' dispatchers disagree are refused by the daemons.
 */
#include "esdctl.h"

#include <esd/auth.h>
#include <esd/ctl.h>
#include <esd/config.h>
#include <esd/log.h>

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void usage(FILE *f)
{
	fprintf(f,
	        "usage: esdctl [--node DIR | --socket PATH]... [--json] [--timeout MS]\n"
	        "              [--worker W] COMMAND\n"
	        "\n"
	        "targets (repeat to address several daemons; default $ESDCTL_SOCKET or\n"
	        "./control.sock):\n"
	        "  --node DIR      an esdd by its node directory (DIR/control.sock)\n"
	        "  --socket PATH   any control socket (esdd --control, esd-ps --control)\n"
	        "  --json          print the replies as JSON (one object, or an array for\n"
	        "                  several targets) instead of tables\n"
	        "  --timeout MS    per-request timeout (default 5000)\n"
	        "  --worker W      with PS shard 0's socket: run the command on node W of\n"
	        "                  the job (wherever it runs) through shard 0, after W's\n"
	        "                  next barrier (status, links, cache, dispatch, set)\n"
	        "\n"
	        "commands:\n"
	        "  status                 iteration, throughput, trainer, method (esdd, esd-ps)\n"
	        "  links                  per link: rate, bytes and rows per transfer kind (esdd)\n"
	        "  cache                  size, occupancy, hit ratio, per-table counters (esdd)\n"
	        "  dispatch               method, alpha, decision time, regret, heu-vs-opt gap\n"
	        "  set KEY VALUE          change a setting live:\n"
	        "                           link.rate        on each esdd target (token bucket\n"
	        "                                            of the node's links)\n"
	        "                           worker.rate      on an esdd target: link.rate, and\n"
	        "                                            reported to shard 0 so that every\n"
	        "                                            node's decisions take it\n"
	        "                           dispatch.method  heu, opt, hungarian, hybrid, laia,\n"
	        "                                            vanilla\n"
	        "                           dispatch.alpha   0..1 (hybrid)\n"
	        "                           cache.policy     lru, lfu, emark, lookahead\n"
	        "                           workers.rates    R0,R1,... every worker's rate\n"
	        "                         the last four go to PS shard 0 (--socket PS0.sock):\n"
	        "                         every node must switch at the same iteration, so the\n"
	        "                         next barrier schedules the change 3 iterations ahead;\n"
	        "                         prints that iteration; one change pending at a time\n"
	        "                         (docs/esdctl.md)\n"
	        "  checkpoint [--wait S]  ask esd-ps for a checkpoint: the next barrier\n"
	        "                         schedules it 3 iterations ahead, where every daemon\n"
	        "                         flushes (docs/esdctl.md); --wait: until it is written\n"
	        "  stop                   stop the whole job gracefully (esd-ps or esdd): at\n"
	        "                         a checkpoint boundary a few iterations on, every\n"
	        "                         process exits 0; start the job again to resume\n"
	        "  top [--interval S] [--count N]\n"
	        "                         a live view of the job through PS shard 0's socket\n"
	        "                         (--socket PS0.sock; more shards' sockets add their\n"
	        "                         rows), refreshed in place every S seconds (default\n"
	        "                         2): per node iteration, it/s, decision ms, CPU\n"
	        "                         ms/iteration, link bytes/s and rate use, hit ratio;\n"
	        "                         N frames, or until the job ends; --json: one line\n"
	        "                         of JSON per frame\n"
	        "  metrics                Prometheus text of every target\n"
	        "  serve-metrics --port P [--bind ADDR]\n"
	        "                         serve the same on http://ADDR:P/metrics (ADDR\n"
	        "                         default 127.0.0.1; P 0: any free port, printed);\n"
	        "                         polls the sockets per scrape\n"
	        "  plan [--set K=V] JOB.ini\n"
	        "                         memory per process and in total before starting, and\n"
	        "                         whether it fits this machine (no daemon needed)\n"
	        "  keygen FILE            write a new job key (job.key) to FILE, mode 0600;\n"
	        "                         never replaces a file (no daemon needed)\n"
	        "\n"
	        "exit status: 0 done, 1 refused or failed, 2 usage, 3 no daemon answers\n");
}

/* esdctl top [--interval S] [--count N] */
static int top_main(const struct esdctl *ctl, char **av, int ac)
{
	double interval = 2;
	uint64_t count = 0;
	bool ok = ac % 2 == 0;
	for (int i = 0; i + 1 < ac && ok; i += 2) {
		if (!strcmp(av[i], "--interval"))
			ok = !esd_parse_double(av[i + 1], &interval) && interval >= 0.1 &&
			     interval <= 3600;
		else if (!strcmp(av[i], "--count"))
			ok = !esd_parse_u64(av[i + 1], &count) && count <= 1000000;
		else
			ok = false;
	}
	if (!ok) {
		fprintf(stderr, "esdctl: usage: esdctl --socket PS0.sock top [--interval SECONDS "
		                "(0.1..3600)] [--count FRAMES]\n");
		return ESDCTL_EUSAGE;
	}
	return esdctl_top(ctl, interval, (long)count);
}

/* Long: esdctl's options and the dispatch to its commands, one case each. */
int main(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"node", required_argument, NULL, 'n'}, {"socket", required_argument, NULL, 's'},
	    {"json", no_argument, NULL, 'j'},       {"timeout", required_argument, NULL, 't'},
	    {"help", no_argument, NULL, 'h'},       {"worker", required_argument, NULL, 'w'},
	    {NULL, 0, NULL, 0},
	};
	static struct esdctl ctl = {.timeout_ms = 5000, .worker = -1};
	static char paths[ESDCTL_MAX_TARGETS][PATH_MAX];
	int c;

	esd_log_init("esdctl");
	esd_log_set_level(ESD_LOG_WARN);
	while ((c = getopt_long(argc, argv, "+n:s:jt:hw:", opts, NULL)) != -1) {
		switch (c) {
		case 'n':
		case 's':
			if (ctl.ntargets == ESDCTL_MAX_TARGETS) {
				fprintf(stderr, "esdctl: at most %d targets\n", ESDCTL_MAX_TARGETS);
				return ESDCTL_EUSAGE;
			}
			if (c == 'n')
				snprintf(paths[ctl.ntargets], PATH_MAX, "%s/control.sock", optarg);
			else
				snprintf(paths[ctl.ntargets], PATH_MAX, "%s", optarg);
			ctl.targets[ctl.ntargets] = paths[ctl.ntargets];
			ctl.ntargets++;
			break;
		case 'j':
			ctl.json = true;
			break;
		case 't': {
			uint64_t v;
			if (esd_parse_u64(optarg, &v) || v == 0 || v > 600000) {
				fprintf(stderr, "esdctl: --timeout '%s': expected 1..600000 ms\n",
				        optarg);
				return ESDCTL_EUSAGE;
			}
			ctl.timeout_ms = (int)v;
			break;
		}
		case 'w': {
			uint64_t v;
			if (esd_parse_u64(optarg, &v) || v >= 64) {
				fprintf(stderr, "esdctl: --worker '%s': expected a rank 0..63\n", optarg);
				return ESDCTL_EUSAGE;
			}
			ctl.worker = (int)v;
			break;
		}
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return ESDCTL_EUSAGE;
		}
	}
	if (optind >= argc) {
		usage(stderr);
		return ESDCTL_EUSAGE;
	}
	if (!ctl.ntargets) {
		const char *env = getenv("ESDCTL_SOCKET");
		snprintf(paths[0], PATH_MAX, "%s", env && *env ? env : "control.sock");
		ctl.targets[0] = paths[0];
		ctl.ntargets = 1;
	}
	const char *cmd = argv[optind];
	char **av = argv + optind + 1;
	int ac = argc - optind - 1;
	/* --json is also accepted after the command (esdctl status --json) */
	for (int i = 0; i < ac;) {
		if (!strcmp(av[i], "--json")) {
			ctl.json = true;
			memmove(av + i, av + i + 1, (size_t)(ac - i - 1) * sizeof(*av));
			ac--;
		} else {
			i++;
		}
	}

	if (!strcmp(cmd, "status") && ac == 0)
		return esdctl_status(&ctl);
	if (!strcmp(cmd, "links") && ac == 0)
		return esdctl_links(&ctl);
	if (!strcmp(cmd, "cache") && ac == 0)
		return esdctl_cache(&ctl);
	if (!strcmp(cmd, "dispatch") && ac == 0)
		return esdctl_dispatch(&ctl);
	if (!strcmp(cmd, "metrics") && ac == 0)
		return esdctl_metrics(&ctl);
	if (!strcmp(cmd, "stop") && ac == 0)
		return esdctl_stop(&ctl);
	if (!strcmp(cmd, "set") && ac == 2)
		return esdctl_set(&ctl, av[0], av[1]);
	if (!strcmp(cmd, "checkpoint")) {
		double wait_s = 0;
		if (ac == 2 && !strcmp(av[0], "--wait") && !esd_parse_double(av[1], &wait_s) &&
		    wait_s >= 0)
			return esdctl_checkpoint(&ctl, wait_s);
		if (ac == 0)
			return esdctl_checkpoint(&ctl, 0);
		fprintf(stderr,
		        "esdctl: usage: esdctl --socket PS.sock checkpoint [--wait SECONDS]\n");
		return ESDCTL_EUSAGE;
	}
	if (!strcmp(cmd, "serve-metrics")) {
		uint64_t port = UINT64_MAX;
		const char *bind = NULL;
		bool ok = true;
		for (int i = 0; i + 1 < ac && ok; i += 2) {
			if (!strcmp(av[i], "--port"))
				ok = !esd_parse_u64(av[i + 1], &port) && port <= 65535;
			else if (!strcmp(av[i], "--bind"))
				bind = av[i + 1];
			else
				ok = false;
		}
		if (ok && ac % 2 == 0 && port != UINT64_MAX)
			return esdctl_serve_metrics(&ctl, bind, (unsigned)port);
		fprintf(stderr, "esdctl: usage: esdctl [targets] serve-metrics --port PORT "
		                "[--bind ADDR]\n");
		return ESDCTL_EUSAGE;
	}
	if (!strcmp(cmd, "top"))
		return top_main(&ctl, av, ac);
	if (!strcmp(cmd, "keygen")) {
		if (ac != 1 || av[0][0] == '-') {
			fprintf(stderr, "esdctl: usage: esdctl keygen FILE\n");
			return ESDCTL_EUSAGE;
		}
		if (esd_key_create(av[0]))
			return 1;
		printf("wrote a new job key to %s (mode 0600): name it in the job as "
		       "[job] key = %s, and copy it to every host of the job\n", av[0], av[0]);
		return 0;
	}
	if (!strcmp(cmd, "plan")) {
		const char *sets[64];
		int nsets = 0;
		const char *config = NULL;
		for (int i = 0; i < ac; i++) {
			if (!strcmp(av[i], "--set") && i + 1 < ac && nsets < 64)
				sets[nsets++] = av[++i];
			else if (!config && av[i][0] != '-')
				config = av[i];
			else
				config = NULL, i = ac;
		}
		if (!config) {
			fprintf(stderr,
			        "esdctl: usage: esdctl [--json] plan [--set K=V ...] JOB.ini\n");
			return ESDCTL_EUSAGE;
		}
		return esdctl_plan(&ctl, config, sets, nsets);
	}
	fprintf(stderr, "esdctl: unknown command or wrong arguments: '%s' (esdctl --help)\n", cmd);
	return ESDCTL_EUSAGE;
}
