/*
 * esd-ref's checkpoint subcommands: "info" validates checkpoint files and
 * prints what they hold; "compare" runs esd_ckpt_compare between two sets
 * of shard files, for scripts (exit status) and for people (the report).
 */
#include "inspect.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <esd/ckpt.h>
#include <esd/err.h>
#include <esd/optim.h>

int esd_ref_cmd_info(int argc, char **argv)
{
	int bad = 0;
	if (argc < 2) {
		fprintf(stderr, "usage: esd-ref info FILE...\n");
		return 2;
	}
	for (int i = 1; i < argc; i++) {
		struct esd_ckpt_reader *r;
		struct esd_ckpt_error err;
		int rc = esd_ckpt_open(argv[i], &r, &err);
		if (rc) {
			fprintf(stderr, "esd-ref: refused: %s\n", err.msg);
			bad = 1;
			continue;
		}
		const struct esd_ckpt_info *in = esd_ckpt_info(r);
		const struct esd_ckpt_meta *m = &in->meta;
		printf("%s: valid checkpoint, %" PRIu64 " bytes\n"
		       "  seed %" PRIu64 ", iteration %" PRIu64 ", data cursor %" PRIu64 "\n"
		       "  shard %u of %u, %" PRIu64 " rows of dim %u%s, optimizer %s\n"
		       "  dense table %" PRIu64 " floats, dense clock %" PRIu64 "\n",
		       argv[i], in->file_size, m->seed, m->iteration, m->data_cursor, m->shard,
		       m->nshards, in->row_count, m->dim, in->sorted ? " (sorted by key)" : "",
		       esd_optim_name(m->optimizer), m->dense_len, m->dense_clock);
		if (m->ntables) { /* version 2: each table's rows at its own dim */
			printf("  version 2: %u tables of dims", m->ntables);
			for (uint32_t t = 0; t < m->ntables; t++)
				printf("%s%u", t ? "," : " ", m->table_dims[t]);
			printf("\n");
		}
		esd_ckpt_close(r);
	}
	return bad ? 3 : 0;
}

/* Split "a,b,c" into a NULL-terminated array (pointers into s). */
static const char **split_list(char *s, size_t *n)
{
	size_t cap = 1;
	for (char *p = s; *p; p++)
		cap += *p == ',';
	const char **v = calloc(cap + 1, sizeof(*v));
	if (!v)
		return NULL;
	*n = 0;
	for (char *tok = strtok(s, ","); tok; tok = strtok(NULL, ","))
		v[(*n)++] = tok;
	return v;
}

int esd_ref_cmd_compare(int argc, char **argv)
{
	static const struct option longopts[] = {
	    {"rtol", required_argument, NULL, 'r'}, {"atol", required_argument, NULL, 'a'},
	    {"exact", no_argument, NULL, 'x'},      {"no-state", no_argument, NULL, 's'},
	    {"no-clocks", no_argument, NULL, 'c'},  {NULL, 0, NULL, 0},
	};
	struct esd_ckpt_cmp_opts o = {.rtol = 1e-5, .atol = 1e-8, .state = true, .clocks = true};
	int c;
	optind = 1;
	while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		char *end;
		switch (c) {
		case 'r':
		case 'a': {
			double v = strtod(optarg, &end);
			if (end == optarg || *end || !(v >= 0) || !isfinite(v)) {
				fprintf(stderr, "esd-ref compare: bad tolerance '%s'\n", optarg);
				return 2;
			}
			*(c == 'r' ? &o.rtol : &o.atol) = v;
			break;
		}
		case 'x':
			o.exact = true;
			break;
		case 's':
			o.state = false;
			break;
		case 'c':
			o.clocks = false;
			break;
		default:
			goto usage;
		}
	}
	if (argc - optind != 2)
		goto usage;
	size_t na = 0, nb = 0;
	const char **a = split_list(argv[optind], &na), **b = split_list(argv[optind + 1], &nb);
	struct esd_ckpt_cmp_result res;
	struct esd_ckpt_error err;
	int rc = a && b ? esd_ckpt_compare(a, na, b, nb, &o, &res, &err) : -ENOMEM;
	free(a);
	free(b);
	if (rc) {
		fprintf(stderr, "esd-ref compare: %s\n",
		        err.msg[0] && rc != -ENOMEM ? err.msg : esd_strerror(rc));
		return 3;
	}
	printf("%s: rows %" PRIu64 " vs %" PRIu64 ", %" PRIu64 " differ, %" PRIu64
	       " only in A, %" PRIu64 " only in B, %" PRIu64 " duplicates; "
	       "max abs %.3g, max rel %.3g%s%s\n",
	       res.equal ? "equal" : "DIFFERENT", res.rows_a, res.rows_b, res.rows_differ,
	       res.only_a, res.only_b, res.duplicates, res.max_abs, res.max_rel,
	       res.equal ? "" : "; first: ", res.equal ? "" : res.first_what);
	return res.equal ? 0 : 1;
usage:
	fprintf(stderr, "usage: esd-ref compare [--rtol X] [--atol X] [--exact] [--no-state] "
	                "[--no-clocks] A[,A...] B[,B...]\n"
	                "  exit 0 equal, 1 different, 2 usage, 3 a file refused\n");
	return 2;
}
