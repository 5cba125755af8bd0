/*
 * esd-info: what this build of ESD contains and what this machine offers it
 * (cores, pinning, huge pages, io_uring), so an operator knows before
 * starting anything which fast paths will be used and which fall back.
 */
#include <esd/clock.h>
#include <esd/job_settings.h>
#include <esd/log.h>
#include <esd/pin.h>
#include <esd_build_config.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

static long meminfo(const char *key)
{
	FILE *f = fopen("/proc/meminfo", "r");
	char line[256];
	long v = -1;
	size_t n = strlen(key);
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, key, n) && line[n] == ':')
			v = strtol(line + n + 1, NULL, 10);
	fclose(f);
	return v;
}

static const char *hugetlb_probe(void)
{
	long sz = meminfo("Hugepagesize") * 1024;
	if (sz <= 0)
		return "no huge page support in this kernel";
	int fd = memfd_create("esd-info-probe", MFD_HUGETLB | MFD_CLOEXEC);
	if (fd < 0)
		return "memfd_create(MFD_HUGETLB) refused";
	const char *r = "memfd MFD_HUGETLB works";
	if (ftruncate(fd, sz) < 0) {
		r = "memfd MFD_HUGETLB: cannot size";
	} else {
		void *p = mmap(NULL, (size_t)sz, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE,
			       fd, 0);
		if (p == MAP_FAILED)
			r = "memfd MFD_HUGETLB: no free huge page (echo N > /proc/sys/vm/nr_hugepages)";
		else
			munmap(p, (size_t)sz);
	}
	close(fd);
	return r;
}

static const char *uring_probe(void)
{
#ifdef __NR_io_uring_setup
	long r = syscall(__NR_io_uring_setup, 0, NULL);
	/* entries = 0 is invalid: EINVAL means the syscall exists */
	if (r < 0 && (errno == EINVAL || errno == EFAULT))
		return "available";
	if (r < 0 && errno == ENOSYS)
		return "not in this kernel (TCP falls back to poll)";
	if (r < 0 && errno == EPERM)
		return "disabled by sysctl or seccomp";
#endif
	return "unknown";
}

/* The job's settings (esd/job_settings.h): name, type, default, bounds,
 * a line about each; docs/configuration.md has the whole story. */
static void print_settings(void)
{
	printf("%-30s %-6s %-22s %-24s %s\n", "KEY", "TYPE", "DEFAULT", "BOUNDS", "MEANING");
	for (size_t i = 0; i < esd_job_nsettings; i++) {
		const struct esd_setting *s = &esd_job_settings[i];
		char def[128], bounds[160];
		esd_setting_default_text(s, def, sizeof(def));
		esd_setting_bounds_text(s, bounds, sizeof(bounds));
		if (strlen(def) <= 22 && strlen(bounds) <= 24) {
			printf("%-30s %-6s %-22s %-24s %s\n", s->name,
			       esd_setting_type_name(s->type), def, bounds, s->doc);
			continue;
		}
		/* a long default or bounds: one cell a line, under DEFAULT */
		printf("%-30s %-6s %s\n", s->name, esd_setting_type_name(s->type), def);
		if (bounds[0])
			printf("%37s bounds: %s\n", "", bounds);
		printf("%37s %s\n", "", s->doc);
	}
}

static void feature(const char *name, int on, const char *why)
{
	printf("  %-8s %-4s %s\n", name, on ? "on" : "off", why);
}

int main(int argc, char **argv)
{
	if (argc > 1 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
		printf("usage: esd-info [--settings]\nPrints what this build of ESD contains and "
		       "what this machine offers it.\n  --settings  print the job's settings "
		       "instead: key, type, default, bounds, meaning\n");
		return 0;
	}
	if (argc == 2 && !strcmp(argv[1], "--settings")) {
		print_settings();
		return 0;
	}
	if (argc > 1) {
		fprintf(stderr, "esd-info: unknown argument '%s' (try --help)\n", argv[1]);
		return 2;
	}
	esd_log_init("esd-info");
	printf("ESD runtime %s\n\nBuild:\n", ESD_VERSION_STRING);
	feature("uring", ESD_BUILT_URING, ESD_WHY_URING);
	feature("dpdk", ESD_BUILT_DPDK, ESD_WHY_DPDK);
	feature("rdma", ESD_BUILT_RDMA, ESD_WHY_RDMA);
	feature("hwloc", ESD_BUILT_HWLOC, ESD_WHY_HWLOC);
	feature("cuda", ESD_BUILT_CUDA, ESD_WHY_CUDA);

	printf("\nMachine:\n");
	int n = esd_pin_ncores(), got = -1;
	printf("  cores     %d usable; pinning via %s", n, esd_pin_mechanism());
	if (esd_pin_thread(n - 1, &got) == 0)
		printf(" (asked core %d, got core %d)", n - 1, got);
	printf("\n");
	long total = meminfo("HugePages_Total"), nfree = meminfo("HugePages_Free");
	printf("  hugepages %ld total, %ld free, %ld KiB each: %s\n", total, nfree,
	       meminfo("Hugepagesize"), hugetlb_probe());
	printf("  io_uring  %s\n", uring_probe());
	printf("  memory    %ld MiB total, %ld MiB available\n", meminfo("MemTotal") / 1024,
	       meminfo("MemAvailable") / 1024);
	int64_t t0 = esd_now_ns();
	esd_sleep_ns(ESD_NS_PER_MS);
	printf("  timer     1 ms sleep took %.3f ms\n", esd_ns_to_ms(esd_now_ns() - t0));
	return 0;
}
