/*
 * esd/pin.h - pinning threads to cores.
 *
 * Uses hwloc when the build has it (the topology is loaded once per
 * process), else sched_setaffinity(2). The core actually obtained is
 * reported, since a cgroup or a busy machine can move a thread anyway.
 */
#ifndef ESD_PIN_H
#define ESD_PIN_H

#ifdef __cplusplus
extern "C" {
#endif

/* Number of processing units (logical cores) this process may run on. */
int esd_pin_ncores(void);

/* Bind the calling thread to logical core 'core' (an OS index, as in
 * /proc/cpuinfo). On success *obtained (if not NULL) is the core the
 * thread runs on after binding. Returns 0, -EINVAL (no such core or not
 * allowed by the affinity mask) or -errno of the binding call. */
int esd_pin_thread(int core, int *obtained);

/* "hwloc" or "sched_setaffinity": which mechanism esd_pin_thread uses. */
const char *esd_pin_mechanism(void);

#ifdef __cplusplus
}
#endif
#endif /* ESD_PIN_H */
