#ifndef SYNCLEDGER_CLMDB_SHIM_H
#define SYNCLEDGER_CLMDB_SHIM_H
#include <lmdb.h>
#endif
