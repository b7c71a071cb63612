/*
 * Every proxy/ header at once, for main.c, the unit tests, fuzz targets
 * and benchmarks. Library code never includes this file (its include
 * path does not reach it): each folder includes the headers of the
 * layers below it only (docs/architecture.md).
 */
#ifndef SLUICE_PROXY_H
#define SLUICE_PROXY_H

#include "proxy/util/ascii.h"
#include "proxy/util/utf8.h"
#include "proxy/util/util.h"
#include "proxy/http/http1.h"
#include "proxy/http/reason.h"
#include "proxy/dns/dnsmsg.h"
#include "proxy/dns/resolve.h"
#include "proxy/token/token.h"
#include "proxy/token/store.h"
#include "proxy/config/config.h"
#include "proxy/ops/ops.h"
#include "proxy/policy/policy.h"
#include "proxy/relay/relay.h"
#include "proxy/daemon/daemon.h"
#include "proxy/cli/cli.h"

#endif
