# Addon for the mitmproxy peer of tests/bench/intercept.sh (peers/mitmproxy.sh).
# 1. The campaign's host names (ICPT_SUFFIX, default .bench.test: h0.bench.test,
#    h1.bench.test, ... for the first-CONNECT probe) have no DNS in the bench
#    namespaces: connect them to the campaign's upstream (ICPT_UP_IP, default
#    198.18.2.2); the name stays the SNI and the name its certificate is
#    checked against. The other peers get the same mapping (sluice: route
#    hosts, squid: hosts_file).
# 2. mitmproxy 8 buffers a whole response unless told to stream it, which
#    swallows server-sent events (mitmproxy issue 4469); its documented
#    workaround, streaming text/event-stream responses, is applied here so
#    the SSE probe measures a working setup.
import os

SUFFIX = os.environ.get("ICPT_SUFFIX", ".bench.test")
UP_IP = os.environ.get("ICPT_UP_IP", "198.18.2.2")


def server_connect(data):
    addr = data.server.address
    if addr and addr[0].endswith(SUFFIX):
        data.server.address = (UP_IP, addr[1])


def responseheaders(flow):
    ctype = flow.response.headers.get("content-type", "")
    if ctype.startswith("text/event-stream"):
        flow.response.stream = True
