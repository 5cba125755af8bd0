/*
 * Private to the frame codec (proto.c decodes, proto_enc.c encodes): the
 * fixed sizes of the bodies on the wire (docs/protocol.md). Not installed.
 */
#ifndef ESD_TRANSPORT_PROTO_INTERNAL_H
#define ESD_TRANSPORT_PROTO_INTERNAL_H

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "the codec copies little-endian fields directly; add byte swaps for this host");
_Static_assert(sizeof(float) == 4, "floats are binary32 on the wire");

#define ROWS_HDR_SIZE  40u
#define ROW_FIXED_SIZE 16u
#define HELLO_SIZE     40u
#define PULL_HDR_SIZE  32u
#define BARRIER_SIZE   24u
#define ROLLBACK_SIZE  16u
#define ORDER_HDR_SIZE 120u
#define ACK_SIZE       24u
#define ERROR_HDR_SIZE 8u
#define STATS_HDR_SIZE 8u
#define STATS_ENT_SIZE 40u
#define SETTING_HDR_SIZE 12u

#endif /* ESD_TRANSPORT_PROTO_INTERNAL_H */
