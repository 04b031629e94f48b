#ifndef SYNCLEDGER_CZSTD_SHIM_H
#define SYNCLEDGER_CZSTD_SHIM_H
#include <zstd.h>
#include <zdict.h>
/* ZSTD_isError and friends are functions; only constants that Swift cannot import need shims. */
static inline unsigned long long syncledger_zstd_content_size_unknown(void) { return ZSTD_CONTENTSIZE_UNKNOWN; }
static inline unsigned long long syncledger_zstd_content_size_error(void) { return ZSTD_CONTENTSIZE_ERROR; }
#endif
