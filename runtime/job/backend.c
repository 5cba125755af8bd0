/*
 * The job's transport keys: ps.backend and the keys of the dpdk and rdma
 * backends (docs/configuration.md); their bounds and the parsers of the
 * simple ones are in settings.def. Checked here, at load, so that a wrong
 * value stops every process at start naming the key, instead of a link
 * that fails later with the transport's words. Whether the backend is
 * built into the program, and whether the device is there, are checked by
 * the programs that open links (esd/job_link.h).
 */
#include "job_internal.h"

#include <esd/log.h>

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#define MTU_MIN   256u   /* the first packet carries a whole frame header */
#define QUEUE_MIN 64u
#define QUEUE_MAX 4096u /* ps.dpdk_queue's bound in settings.def */
/* A PCI port's EAL arguments when ps.dpdk_eal is unset: huge pages, only
 * that device, no files left behind (--in-memory). */
#define PCI_EAL_FMT "--in-memory -a %s --no-telemetry --log-level=*:warning"

static int hexval(int c)
{
	return isdigit(c) ? c - '0' : isxdigit(c) ? tolower(c) - 'a' + 10 : -1;
}

/* n hex digits at s into *v; 0 or -1. */
static int hex_field(const char *s, int n, unsigned *v)
{
	*v = 0;
	for (int i = 0; i < n; i++) {
		int h = hexval((unsigned char)s[i]);
		if (h < 0)
			return -1;
		*v = *v << 4 | (unsigned)h;
	}
	return 0;
}

/* "aa:bb:cc:dd:ee:ff", a unicast address (a peer's port). */
static int parse_mac(const char *s, uint8_t mac[6])
{
	if (strlen(s) != 17)
		return -EINVAL;
	for (int i = 0; i < 6; i++) {
		unsigned v;
		if (hex_field(s + 3 * i, 2, &v) || (i < 5 && s[3 * i + 2] != ':'))
			return -EINVAL;
		mac[i] = (uint8_t)v;
	}
	static const uint8_t zero[6];
	return mac[0] & 1 || !memcmp(mac, zero, 6) ? -EINVAL : 0;
}

/* The full PCI address form DDDD:BB:DD.F (domain, bus, device <= 1f,
 * function <= 7), as lspci -D and DPDK's -a print it. */
static int parse_pci(const char *s)
{
	unsigned dom, bus, dev, fn;
	if (strlen(s) != 12 || s[4] != ':' || s[7] != ':' || s[10] != '.' ||
	    hex_field(s, 4, &dom) || hex_field(s + 5, 2, &bus) || hex_field(s + 8, 2, &dev) ||
	    hex_field(s + 11, 1, &fn))
		return -EINVAL;
	return dev > 0x1f || fn > 7 ? -EINVAL : 0;
}

/* A Linux interface name as it goes into af_packet's devargs. */
static int iface_ok(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n > 15)
		return 0;
	for (; *s; s++)
		if (isspace((unsigned char)*s) || *s == ',' || *s == '=' || *s == '/')
			return 0;
	return 1;
}

static int dpdk_port(const struct esd_config *cfg, struct esd_job *j)
{
	const char *s;
	esd_config_get_str(cfg, "ps", "dpdk_port", "memif", &s);
	if (!strcmp(s, "memif")) {
		j->dpdk_port = ESD_JOB_PORT_MEMIF;
		return 0;
	}
	if (!strncmp(s, "af_packet:", 10)) {
		if (!iface_ok(s + 10)) {
			ESD_ERR("config", "ps.dpdk_port = '%s': expected af_packet:IFACE with the name "
				"of a Linux interface (1 to 15 characters, no blank, ',', '=' or '/')",
				s);
			return -EINVAL;
		}
		j->dpdk_port = ESD_JOB_PORT_AF_PACKET;
		snprintf(j->dpdk_dev, sizeof(j->dpdk_dev), "%s", s + 10);
		return 0;
	}
	if (strchr(s, ':') && parse_pci(s)) {
		ESD_ERR("config", "ps.dpdk_port = '%s': not a PCI address of the form DDDD:BB:DD.F "
			"(hex domain, bus, device <= 1f, function <= 7, as lspci -D prints it)", s);
		return -EINVAL;
	}
	if (parse_pci(s)) {
		ESD_ERR("config", "ps.dpdk_port = '%s': expected memif, af_packet:IFACE or a PCI "
			"address DDDD:BB:DD.F", s);
		return -EINVAL;
	}
	j->dpdk_port = ESD_JOB_PORT_PCI;
	snprintf(j->dpdk_dev, sizeof(j->dpdk_dev), "%s", s);
	return 0;
}

/* ps.dpdk_eal, after ps.dpdk_port: a PCI port needs the PCI bus. */
static int dpdk_eal(const struct esd_config *cfg, struct esd_job *j)
{
	const char *s;
	esd_config_get_str(cfg, "ps", "dpdk_eal", "", &s);
	if (strlen(s) >= sizeof(j->dpdk_eal)) {
		ESD_ERR("config", "ps.dpdk_eal: %zu characters, at most %zu", strlen(s),
			sizeof(j->dpdk_eal) - 1);
		return -EINVAL;
	}
	if (j->dpdk_port != ESD_JOB_PORT_PCI) {
		snprintf(j->dpdk_eal, sizeof(j->dpdk_eal), "%s", s);
		return 0;
	}
	if (strstr(s, "--no-pci")) {
		ESD_ERR("config", "ps.dpdk_eal = '%s': --no-pci keeps the EAL from the PCI bus, "
			"so it cannot open ps.dpdk_port = %s; remove --no-pci (and --no-huge: "
			"a NIC reads and writes huge pages)", s, j->dpdk_dev);
		return -EINVAL;
	}
	if (strstr(s, "--no-huge"))
		ESD_WARN("config", "ps.dpdk_eal = '%s': --no-huge with the NIC at %s: most NIC "
			 "drivers need huge pages (docs/configuration.md)", s, j->dpdk_dev);
	if (*s)
		snprintf(j->dpdk_eal, sizeof(j->dpdk_eal), "%s", s);
	else
		snprintf(j->dpdk_eal, sizeof(j->dpdk_eal), PCI_EAL_FMT, j->dpdk_dev);
	return 0;
}

/* A list of want MAC addresses, or none. */
static int mac_list(const struct esd_config *cfg, const char *key, uint32_t want, const char *of,
		    uint8_t (*out)[6], bool *have)
{
	char items[ESD_MAX_WORKERS][ESD_JOB_ADDR_LEN];
	const char *s;
	*have = false;
	esd_config_get_str(cfg, "ps", key, NULL, &s);
	if (!s)
		return 0;
	int cnt = esd_job_split(s, items, ESD_MAX_WORKERS);
	if (cnt < 0) {
		ESD_ERR("config", "ps.%s = '%s': not a list of MAC addresses", key, s);
		return -EINVAL;
	}
	if (cnt != (int)want) {
		ESD_ERR("config", "ps.%s = '%s': %d MAC addresses for %u %ss (one per %s)", key, s,
			cnt, want, of, of);
		return -EINVAL;
	}
	for (int i = 0; i < cnt; i++) {
		if (parse_mac(items[i], out[i])) {
			ESD_ERR("config", "ps.%s = '%s': item %d '%s' is not a unicast MAC address "
				"aa:bb:cc:dd:ee:ff", key, s, i, items[i]);
			return -EINVAL;
		}
	}
	*have = true;
	return 0;
}

/* ps.dpdk_mtu and ps.dpdk_queue beyond their bounds (settings.def) */
static int dpdk_sizes(const struct esd_job *j)
{
	int rc = 0;
	if (j->dpdk_mtu && j->dpdk_mtu < MTU_MIN) {
		ESD_ERR("config", "ps.dpdk_mtu = '%u': at least %u bytes per packet (0: the default)",
			j->dpdk_mtu, MTU_MIN);
		rc = -EINVAL;
	}
	const uint32_t q = j->dpdk_queue;
	if (q && (q < QUEUE_MIN || (q & (q - 1)))) {
		ESD_ERR("config", "ps.dpdk_queue = '%u': a power of two from %u to %u (0: the "
			"default)", q, QUEUE_MIN, QUEUE_MAX);
		rc = -EINVAL;
	}
	return rc;
}

int esd_job_parse_rdma_device(const char *s, struct esd_job *j)
{
	size_t n = strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-");
	if (s[n] || n >= sizeof(j->rdma_device))
		return -EINVAL;
	snprintf(j->rdma_device, sizeof(j->rdma_device), "%s", s);
	return 0;
}

int esd_job_parse_backend(const char *s, struct esd_job *j)
{
	if (strcmp(s, "tcp") && strcmp(s, "dpdk") && strcmp(s, "rdma"))
		return -EINVAL;
	snprintf(j->backend, sizeof(j->backend), "%s", s);
	return 0;
}

int esd_job_parse_zero_copy(const char *s, struct esd_job *j)
{
	if (!strcmp(s, "auto"))
		j->zero_copy = ESD_JOB_ZC_AUTO;
	else if (!strcmp(s, "on"))
		j->zero_copy = ESD_JOB_ZC_ON;
	else if (!strcmp(s, "off"))
		j->zero_copy = ESD_JOB_ZC_OFF;
	else
		return -EINVAL;
	return 0;
}

int esd_job_backend_from_config(const struct esd_config *cfg, struct esd_job *j)
{
	int rc = 0;
	if (dpdk_port(cfg, j) || dpdk_eal(cfg, j))
		rc = -EINVAL;
	if (dpdk_sizes(j))
		rc = -EINVAL;
	if (mac_list(cfg, "dpdk_shard_macs", j->shards, "shard", j->shard_macs,
		     &j->have_shard_macs) ||
	    mac_list(cfg, "dpdk_worker_macs", j->n, "worker", j->worker_macs,
		     &j->have_worker_macs))
		rc = -EINVAL;
	return rc;
}
