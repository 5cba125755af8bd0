/*
 * esd/le.h - little-endian fields at any alignment: the one set of
 * helpers every encoder of the project's formats uses (the wire frames of
 * docs/protocol.md, the checkpoint files, the dataset files).
 *
 * esd_put_leN stores v at p as N/8 bytes, least significant first;
 * esd_get_leN loads them back. p need not be aligned. On a little-endian
 * host each is one memcpy; a big-endian host swaps the bytes.
 */
#ifndef ESD_LE_H
#define ESD_LE_H

#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define ESD_LE_SWAP16(x) __builtin_bswap16(x)
#define ESD_LE_SWAP32(x) __builtin_bswap32(x)
#define ESD_LE_SWAP64(x) __builtin_bswap64(x)
#else
#define ESD_LE_SWAP16(x) (x)
#define ESD_LE_SWAP32(x) (x)
#define ESD_LE_SWAP64(x) (x)
#endif

static inline void esd_put_le16(void *p, uint16_t v)
{
	v = ESD_LE_SWAP16(v);
	memcpy(p, &v, 2);
}

static inline void esd_put_le32(void *p, uint32_t v)
{
	v = ESD_LE_SWAP32(v);
	memcpy(p, &v, 4);
}

static inline void esd_put_le64(void *p, uint64_t v)
{
	v = ESD_LE_SWAP64(v);
	memcpy(p, &v, 8);
}

/* A binary64 double as the 64-bit pattern of its bits. */
static inline void esd_put_lef64(void *p, double v)
{
	uint64_t u;
	memcpy(&u, &v, 8);
	esd_put_le64(p, u);
}

static inline uint16_t esd_get_le16(const void *p)
{
	uint16_t v;
	memcpy(&v, p, 2);
	return ESD_LE_SWAP16(v);
}

static inline uint32_t esd_get_le32(const void *p)
{
	uint32_t v;
	memcpy(&v, p, 4);
	return ESD_LE_SWAP32(v);
}

static inline uint64_t esd_get_le64(const void *p)
{
	uint64_t v;
	memcpy(&v, p, 8);
	return ESD_LE_SWAP64(v);
}

static inline double esd_get_lef64(const void *p)
{
	uint64_t u = esd_get_le64(p);
	double v;
	memcpy(&v, &u, 8);
	return v;
}

#ifdef __cplusplus
}
#endif
#endif /* ESD_LE_H */
