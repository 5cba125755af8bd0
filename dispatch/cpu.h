/* Private to dispatch/: what the CPU has, for the bodies that come in a
 * vector and a scalar form. */
#ifndef ESD_DISPATCH_CPU_H
#define ESD_DISPATCH_CPU_H

#include <stdbool.h>

/* AVX-512 (with popcnt) present? Asked once; ESD_NO_AVX512 in the
 * environment says no, so the tests can run the other bodies on any CPU. */
bool esd_have_avx512(void);

#endif
