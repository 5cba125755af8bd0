/* gpu/cuda.cu, the real kernel and its host side, compiled for the CPU
 * emulation of gpu/emu/cuda_runtime.h (found first on this file's include
 * path): the library esd_gpu_emu, which the kernel's tests link. */
#include "../cuda.cu"
