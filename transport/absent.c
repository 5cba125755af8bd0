/*
 * Ops tables of backends whose dependency was missing at build time: every
 * call fails with -ENOTSUP and the lookup says "not built: <reason>" (the
 * reason the configure step printed). Compiled once per absent backend,
 * with ABSENT_NAME / ABSENT_SYM / ABSENT_WHY set by transport/CMakeLists.txt.
 */
#include "link_internal.h"

#include <esd_build_config.h>
#include <esd/log.h>

#include <errno.h>

#define STR2(x)    #x
#define STR(x)     STR2(x)
#define CAT2(a, b) a##b
#define CAT(a, b)  CAT2(a, b)
#define FN(n)      CAT(CAT(absent_, ABSENT_SYM), n)

static const char not_built[] = "not built: " ABSENT_WHY;

static int FN(_connect)(const struct esd_link_opts *o, struct wire **out)
{
	(void)o;
	(void)out;
	ESD_ERR("transport", "backend %s: %s", STR(ABSENT_SYM), not_built);
	return -ENOTSUP;
}

static int FN(_listen)(const struct esd_link_opts *o, struct wire_listener **out)
{
	(void)o;
	(void)out;
	ESD_ERR("transport", "backend %s: %s", STR(ABSENT_SYM), not_built);
	return -ENOTSUP;
}

const struct wire_ops CAT(esd_wire_, ABSENT_SYM) = {
    .name = STR(ABSENT_SYM),
    .not_built = not_built,
    .connect = FN(_connect),
    .listen = FN(_listen),
};
