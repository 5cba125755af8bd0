/*
 * Thread pinning. hwloc gives a portable view of the topology (and the
 * dispatcher's core can be named the way hwloc-ls shows it); without
 * hwloc the same OS indices go through sched_setaffinity(2).
 */
#include <esd/pin.h>
#include <esd/err.h>
#include <esd/log.h>

#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#ifdef ESD_HAVE_HWLOC
#include <hwloc.h>

static hwloc_topology_t topo;
static pthread_once_t topo_once = PTHREAD_ONCE_INIT;
static int topo_rc;

static void topo_load(void)
{
	if (hwloc_topology_init(&topo) < 0 || hwloc_topology_load(topo) < 0)
		topo_rc = esd_neg_errno();
}
#endif

/* The cores this process may use, captured before any thread narrowed its
 * own mask by pinning (a pinned thread's mask is just its core). */
static cpu_set_t allowed;
static int allowed_ok;
static pthread_once_t allowed_once = PTHREAD_ONCE_INIT;

static void allowed_load(void)
{
	allowed_ok = sched_getaffinity(0, sizeof(allowed), &allowed) == 0;
}

const char *esd_pin_mechanism(void)
{
#ifdef ESD_HAVE_HWLOC
	return "hwloc";
#else
	return "sched_setaffinity";
#endif
}

int esd_pin_ncores(void)
{
	pthread_once(&allowed_once, allowed_load);
	if (allowed_ok)
		return CPU_COUNT(&allowed);
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	return n > 0 ? (int)n : 1;
}

int esd_pin_thread(int core, int *obtained)
{
	if (core < 0 || core >= CPU_SETSIZE)
		return -EINVAL;
	pthread_once(&allowed_once, allowed_load);
	if (allowed_ok && !CPU_ISSET(core, &allowed)) {
		ESD_ERR("pin", "core %d is not in this process's affinity mask (%d cores allowed)",
			core, CPU_COUNT(&allowed));
		return -EINVAL;
	}
#ifdef ESD_HAVE_HWLOC
	pthread_once(&topo_once, topo_load);
	if (topo_rc)
		return topo_rc;
	hwloc_obj_t pu = hwloc_get_pu_obj_by_os_index(topo, (unsigned)core);
	if (!pu) {
		ESD_ERR("pin", "hwloc knows no processing unit with OS index %d", core);
		return -EINVAL;
	}
	if (hwloc_set_cpubind(topo, pu->cpuset, HWLOC_CPUBIND_THREAD) < 0)
		return esd_neg_errno();
	sched_yield(); /* let the scheduler move us before we look */
	if (obtained) {
		hwloc_bitmap_t where = hwloc_bitmap_alloc();
		int got = -1;
		if (where && hwloc_get_last_cpu_location(topo, where, HWLOC_CPUBIND_THREAD) == 0)
			got = hwloc_bitmap_first(where);
		hwloc_bitmap_free(where);
		*obtained = got >= 0 ? got : sched_getcpu();
	}
#else
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(core, &set);
	int rc = pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
	if (rc)
		return -rc;
	sched_yield();
	if (obtained)
		*obtained = sched_getcpu();
#endif
	return 0;
}
