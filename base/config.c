/*
 * Configuration table: INI files through libinih, overrides from the
 * command line, typed getters whose errors name the key, the value and
 * where it was set. The table is small (tens of keys), so a linear array
 * is the right structure: insertion order is kept for dumps.
 */
#include <esd/config.h>
#include <esd/err.h>
#include <esd/log.h>

#include <ini.h>
#include <ctype.h>
#include <errno.h>
#include <fnmatch.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

struct entry {
	char *section;
	char *key;
	char *value;
	char *origin;
};

struct esd_config {
	struct entry *v;
	size_t n, cap;
};

int esd_config_create(struct esd_config **out)
{
	struct esd_config *c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	*out = c;
	return 0;
}

static void entry_free(struct entry *e)
{
	free(e->section);
	free(e->key);
	free(e->value);
	free(e->origin);
}

void esd_config_free(struct esd_config *cfg)
{
	if (!cfg)
		return;
	for (size_t i = 0; i < cfg->n; i++)
		entry_free(&cfg->v[i]);
	free(cfg->v);
	free(cfg);
}

static struct entry *find(const struct esd_config *cfg, const char *section, const char *key)
{
	for (size_t i = 0; i < cfg->n; i++)
		if (!strcmp(cfg->v[i].section, section) && !strcmp(cfg->v[i].key, key))
			return &cfg->v[i];
	return NULL;
}

int esd_config_put(struct esd_config *cfg, const char *section, const char *key,
		   const char *value, const char *origin)
{
	struct entry *e = find(cfg, section, key);
	char *nv = strdup(value), *no = strdup(origin ? origin : "?");

	if (!nv || !no)
		goto err_dup;
	if (e) {
		free(e->value);
		free(e->origin);
		e->value = nv;
		e->origin = no;
		return 0;
	}
	if (cfg->n == cfg->cap) {
		size_t cap = cfg->cap ? cfg->cap * 2 : 16;
		struct entry *v = realloc(cfg->v, cap * sizeof(*v));
		if (!v)
			goto err_dup;
		cfg->v = v;
		cfg->cap = cap;
	}
	e = &cfg->v[cfg->n];
	e->section = strdup(section);
	e->key = strdup(key);
	if (!e->section || !e->key) {
		free(e->section);
		free(e->key);
		goto err_dup;
	}
	e->value = nv;
	e->origin = no;
	cfg->n++;
	return 0;
err_dup:
	free(nv);
	free(no);
	return -ENOMEM;
}

struct load_ctx {
	struct esd_config *tmp;
	const char *path;
	FILE *f;
	int line; /* line the parser read last (Debian's inih reports none) */
	int rc;
	/* a line longer than inih's buffer (200 bytes in Debian's build) goes
	 * to it in pieces, the later ones as continuation lines (indented),
	 * which on_ini appends to the value they continue */
	char *phys;       /* the physical line being handed over */
	size_t off, len;  /* what of it is handed over already */
	bool continuing;  /* the next value is the rest of the previous one */
	char last_section[128], last_key[128];
};

/* Where to cut s (at most max bytes): between two non-blank bytes, as the
 * parser strips blanks at both ends of each piece. */
static size_t cut_at(const char *s, size_t len, size_t max)
{
	if (len <= max)
		return len;
	for (size_t c = max; c > max / 2; c--)
		if (s[c - 1] != ' ' && s[c - 1] != '\t' && s[c] != ' ' && s[c] != '\t')
			return c;
	return max;
}

/* A line too long for inih loses what inih would drop anyway, so that no
 * piece of it is mistaken for a value: a comment line is cut to its first
 * piece, an inline comment (";" after a blank) is removed. */
static void trim_long_line(struct load_ctx *lc, size_t room)
{
	char *p = lc->phys;
	if (lc->len <= room)
		return;
	size_t i = 0;
	while (i < lc->len && (p[i] == ' ' || p[i] == '\t'))
		i++;
	if (i < lc->len && (p[i] == ';' || p[i] == '#')) {
		lc->len = room;
		return;
	}
	for (size_t j = 1; j < lc->len; j++)
		if (p[j] == ';' && (p[j - 1] == ' ' || p[j - 1] == '\t')) {
			lc->len = j;
			break;
		}
}

/* inih reads line by line through this reader, so counting here gives the
 * line of the key the handler sees next. A long line is handed over as its
 * first piece and continuation lines (" " + the next piece). */
static char *read_line(char *str, int num, void *stream)
{
	struct load_ctx *lc = stream;
	size_t room = (size_t)num - 3; /* a leading blank, the newline, NUL */
	if (!lc->phys || lc->off >= lc->len) {
		size_t cap = 0;
		ssize_t n;
		free(lc->phys);
		lc->phys = NULL;
		if ((n = getline(&lc->phys, &cap, lc->f)) < 0)
			return NULL;
		lc->line++;
		lc->len = (size_t)n;
		while (lc->len && (lc->phys[lc->len - 1] == '\n' || lc->phys[lc->len - 1] == '\r'))
			lc->len--;
		lc->off = 0;
		lc->continuing = false;
		trim_long_line(lc, room);
		size_t c = cut_at(lc->phys, lc->len, room);
		memcpy(str, lc->phys, c);
		str[c] = '\n';
		str[c + 1] = 0;
		lc->off = c;
		return str;
	}
	size_t c = cut_at(lc->phys + lc->off, lc->len - lc->off, room);
	str[0] = ' ';
	memcpy(str + 1, lc->phys + lc->off, c);
	str[c + 1] = '\n';
	str[c + 2] = 0;
	lc->off += c;
	lc->continuing = true;
	return str;
}

static int on_ini(void *user, const char *section, const char *name, const char *value)
{
	struct load_ctx *lc = user;
	char origin[512];

	snprintf(origin, sizeof(origin), "%s:%d", lc->path, lc->line);
	if (!name) /* a section header with no keys yet */
		return 1;
	const char *sec = section && *section ? section : "global";
	if (lc->continuing && !strcmp(sec, lc->last_section) && !strcmp(name, lc->last_key)) {
		/* the rest of a long line: appended to its value */
		const struct entry *e = find(lc->tmp, sec, name);
		if (e) {
			const char *prev = e->value;
			size_t a = strlen(prev), b = strlen(value ? value : "");
			char *joined = malloc(a + b + 1);
			if (!joined) {
				lc->rc = -ENOMEM;
				return 0;
			}
			memcpy(joined, prev, a);
			memcpy(joined + a, value ? value : "", b + 1);
			int rc = esd_config_put(lc->tmp, sec, name, joined, origin);
			free(joined);
			if (rc) {
				lc->rc = rc;
				return 0;
			}
			return 1;
		}
	}
	snprintf(lc->last_section, sizeof(lc->last_section), "%s", sec);
	snprintf(lc->last_key, sizeof(lc->last_key), "%s", name);
	int rc = esd_config_put(lc->tmp, section && *section ? section : "global", name,
				value ? value : "", origin);
	if (rc) {
		lc->rc = rc;
		return 0;
	}
	return 1;
}

int esd_config_load(struct esd_config *cfg, const char *path)
{
	struct load_ctx lc = {.path = path};
	FILE *f = fopen(path, "r");
	lc.f = f;
	int rc;

	if (!f) {
		rc = esd_neg_errno();
		ESD_ERR("config", "cannot open %s: %s", path, esd_strerror(rc));
		return rc;
	}
	struct stat st;
	if (fstat(fileno(f), &st) == 0 && !S_ISREG(st.st_mode)) {
		ESD_ERR("config", "%s is not a file (a directory?): a job file is expected", path);
		fclose(f);
		return -EINVAL;
	}
	rc = esd_config_create(&lc.tmp);
	if (rc)
		goto out_close;
	int line = ini_parse_stream(read_line, &lc, on_ini, &lc);
	free(lc.phys);
	if (lc.rc) {
		rc = lc.rc;
		goto out_free;
	}
	if (line != 0) {
		ESD_ERR("config", "%s:%d: syntax error (expected [section] or key = value)", path,
			line);
		rc = -EINVAL;
		goto out_free;
	}
	if (!lc.tmp->n) { /* an empty file would run a job of defaults nobody asked for */
		ESD_ERR("config", "%s sets nothing: a job file needs at least [data] stream", path);
		rc = -EINVAL;
		goto out_free;
	}
	for (size_t i = 0; i < lc.tmp->n; i++) {
		struct entry *e = &lc.tmp->v[i];
		rc = esd_config_put(cfg, e->section, e->key, e->value, e->origin);
		if (rc)
			goto out_free;
	}
out_free:
	esd_config_free(lc.tmp);
out_close:
	fclose(f);
	return rc;
}

int esd_config_set(struct esd_config *cfg, const char *assignment)
{
	const char *eq = strchr(assignment, '=');
	char section[128], key[128];

	if (!eq || eq == assignment) {
		ESD_ERR("config", "override '%s': expected section.key=value", assignment);
		return -EINVAL;
	}
	size_t klen = (size_t)(eq - assignment);
	const char *dot = memchr(assignment, '.', klen);
	size_t slen = dot ? (size_t)(dot - assignment) : 0;
	size_t nlen = dot ? klen - slen - 1 : klen;
	if ((dot && slen == 0) || nlen == 0 || slen >= sizeof(section) || nlen >= sizeof(key)) {
		ESD_ERR("config", "override '%s': expected section.key=value", assignment);
		return -EINVAL;
	}
	if (dot) {
		memcpy(section, assignment, slen);
		section[slen] = '\0';
	} else {
		strcpy(section, "global");
	}
	memcpy(key, dot ? dot + 1 : assignment, nlen);
	key[nlen] = '\0';
	return esd_config_put(cfg, section, key, eq + 1, "command line");
}

bool esd_config_has(const struct esd_config *cfg, const char *section, const char *key)
{
	return find(cfg, section, key) != NULL;
}

const char *esd_config_origin(const struct esd_config *cfg, const char *section,
			      const char *key)
{
	const struct entry *e = find(cfg, section, key);
	return e ? e->origin : NULL;
}

static int bad(const struct entry *e, const char *what)
{
	ESD_ERR("config", "%s.%s = '%s' (%s): %s", e->section, e->key, e->value, e->origin, what);
	return -EINVAL;
}

static int out_of_range(const struct entry *e, const char *range)
{
	ESD_ERR("config", "%s.%s = '%s' (%s): out of range %s", e->section, e->key, e->value,
		e->origin, range);
	return -ERANGE;
}

int esd_config_get_str(const struct esd_config *cfg, const char *section, const char *key,
		       const char *def, const char **out)
{
	const struct entry *e = find(cfg, section, key);
	*out = e ? e->value : def;
	return 0;
}

/* Decimal, or hexadecimal with 0x; never octal (a leading 0 is decimal). */
static int base_of(const char *s)
{
	while (isspace((unsigned char)*s) || *s == '-' || *s == '+')
		s++;
	return (s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) ? 16 : 10;
}

int esd_parse_i64(const char *s, int64_t *out)
{
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, base_of(s));
	if (end == s || *end != '\0' || errno)
		return -EINVAL;
	*out = v;
	return 0;
}

int esd_parse_u64(const char *s, uint64_t *out)
{
	char *end;
	while (isspace((unsigned char)*s))
		s++;
	if (*s == '-')
		return -EINVAL;
	errno = 0;
	unsigned long long v = strtoull(s, &end, base_of(s));
	if (end == s || *end != '\0' || errno)
		return -EINVAL;
	*out = v;
	return 0;
}

int esd_parse_double(const char *s, double *out)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (end == s || *end != '\0' || errno || !isfinite(v))
		return -EINVAL;
	*out = v;
	return 0;
}

/* number followed by an optional suffix from 'sfx' (each with multiplier
 * base^(index+1)) and an optional tail word from 'tails'. */
static int parse_scaled(const char *s, const char *sfx, double base, const char *const *tails,
			uint64_t *out)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (end == s || errno || !isfinite(v) || v < 0)
		return -EINVAL;
	double mul = 1;
	if (*end) {
		const char *p = strchr(sfx, *end);
		if (p && *end) {
			for (long i = 0; i <= p - sfx; i++)
				mul *= base;
			end++;
		}
	}
	if (*end) {
		bool ok = false;
		for (const char *const *t = tails; t && *t; t++)
			if (!strcasecmp(end, *t))
				ok = true;
		if (!ok)
			return -EINVAL;
	}
	double r = v * mul;
	if (r >= 18446744073709551616.0)
		return -EINVAL;
	*out = (uint64_t)llround(r);
	return 0;
}

int esd_parse_size(const char *s, uint64_t *out)
{
	static const char *const tails[] = {"B", "iB", NULL};
	/* K/k both mean KiB for sizes. */
	char buf[64];
	snprintf(buf, sizeof(buf), "%s", s);
	for (char *p = buf; *p; p++)
		if (*p == 'k')
			*p = 'K';
	return parse_scaled(buf, "KMGT", 1024.0, tails, out);
}

int esd_parse_rate(const char *s, uint64_t *out)
{
	static const char *const tails[] = {"bit", "bps", "bit/s", "b", NULL};
	return parse_scaled(s, "kMGT", 1000.0, tails, out);
}

int esd_config_get_i64(const struct esd_config *cfg, const char *section, const char *key,
		       int64_t def, int64_t min, int64_t max, int64_t *out)
{
	const struct entry *e = find(cfg, section, key);
	int64_t v;
	char range[96];

	if (!e) {
		*out = def;
		return 0;
	}
	if (esd_parse_i64(e->value, &v))
		return bad(e, "not an integer");
	if (v < min || v > max) {
		snprintf(range, sizeof(range), "[%lld, %lld]", (long long)min, (long long)max);
		return out_of_range(e, range);
	}
	*out = v;
	return 0;
}

int esd_config_get_u64(const struct esd_config *cfg, const char *section, const char *key,
		       uint64_t def, uint64_t min, uint64_t max, uint64_t *out)
{
	const struct entry *e = find(cfg, section, key);
	uint64_t v;
	char range[96];

	if (!e) {
		*out = def;
		return 0;
	}
	if (esd_parse_u64(e->value, &v))
		return bad(e, "not an unsigned integer");
	if (v < min || v > max) {
		snprintf(range, sizeof(range), "[%llu, %llu]", (unsigned long long)min,
			 (unsigned long long)max);
		return out_of_range(e, range);
	}
	*out = v;
	return 0;
}

int esd_config_get_double(const struct esd_config *cfg, const char *section, const char *key,
			  double def, double min, double max, double *out)
{
	const struct entry *e = find(cfg, section, key);
	double v;
	char range[96];

	if (!e) {
		*out = def;
		return 0;
	}
	if (esd_parse_double(e->value, &v))
		return bad(e, "not a number");
	if (v < min || v > max) {
		snprintf(range, sizeof(range), "[%g, %g]", min, max);
		return out_of_range(e, range);
	}
	*out = v;
	return 0;
}

int esd_config_get_bool(const struct esd_config *cfg, const char *section, const char *key,
			bool def, bool *out)
{
	static const char *const yes[] = {"1", "true", "yes", "on"};
	static const char *const no[] = {"0", "false", "no", "off"};
	const struct entry *e = find(cfg, section, key);

	if (!e) {
		*out = def;
		return 0;
	}
	for (int i = 0; i < 4; i++) {
		if (!strcasecmp(e->value, yes[i])) {
			*out = true;
			return 0;
		}
		if (!strcasecmp(e->value, no[i])) {
			*out = false;
			return 0;
		}
	}
	return bad(e, "not a boolean (true/false, yes/no, on/off, 1/0)");
}

int esd_config_get_size(const struct esd_config *cfg, const char *section, const char *key,
			uint64_t def, uint64_t *out)
{
	const struct entry *e = find(cfg, section, key);
	if (!e) {
		*out = def;
		return 0;
	}
	if (esd_parse_size(e->value, out))
		return bad(e, "not a size (e.g. 4096, 64K, 512M, 2G)");
	return 0;
}

int esd_config_get_rate(const struct esd_config *cfg, const char *section, const char *key,
			uint64_t def, uint64_t *out)
{
	const struct entry *e = find(cfg, section, key);
	if (!e) {
		*out = def;
		return 0;
	}
	if (esd_parse_rate(e->value, out))
		return bad(e, "not a bit rate (e.g. 500M, 5G, 0.5Gbit; 0 = unshaped)");
	return 0;
}

int esd_config_check_keys(const struct esd_config *cfg, const char *const *known)
{
	int rc = 0;
	char full[272];

	for (size_t i = 0; i < cfg->n; i++) {
		const struct entry *e = &cfg->v[i];
		bool ok = false;
		snprintf(full, sizeof(full), "%s.%s", e->section, e->key);
		for (const char *const *k = known; *k && !ok; k++)
			ok = fnmatch(*k, full, 0) == 0;
		if (!ok) {
			ESD_ERR("config", "unknown key %s (%s)", full, e->origin);
			rc = -EINVAL;
		}
	}
	return rc;
}

int esd_config_foreach(const struct esd_config *cfg,
		       int (*fn)(const char *section, const char *key, const char *value,
				 const char *origin, void *arg),
		       void *arg)
{
	for (size_t i = 0; i < cfg->n; i++) {
		int rc = fn(cfg->v[i].section, cfg->v[i].key, cfg->v[i].value, cfg->v[i].origin,
			    arg);
		if (rc)
			return rc;
	}
	return 0;
}
