"""sluicetest: the Python (stdlib-only) harness of sluice's integration
tests. See tests/integration/lib/README.md for how the pieces fit."""

from . import policy
from .base import CLEANUP, ENV, Proc, run, wait_until
from .case import Harness, ProxyTestCase, main
from .daemons import Fakeup, FakeupLog, Sluice, StartError, header_values
from .dnsd import DnsServer
from .http import (Closed, RawClient, Response, StreamReader, build_request, curl,
                   curl_stream)
from .netns import Netns, Topology, entered, ns_exec
from .pki import CA, spki_pin
from .tokens import claims_of, mint, mint_python, write_secret

__all__ = [
    "policy", "CLEANUP", "ENV", "Proc", "run", "wait_until", "Harness",
    "ProxyTestCase", "main", "Fakeup", "FakeupLog", "Sluice", "StartError",
    "header_values", "DnsServer", "Closed", "RawClient", "Response",
    "StreamReader", "build_request", "curl", "curl_stream", "Netns", "Topology", "entered",
    "ns_exec", "CA", "spki_pin", "claims_of", "mint", "mint_python",
    "write_secret",
]
